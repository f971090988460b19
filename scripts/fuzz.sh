#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, under AddressSanitizer and
# UndefinedBehaviorSanitizer, and runs each from its seed corpus (fuzz/corpus/NAME) for SECONDS
# seconds or RUNS inputs, whichever ends first; fails on the first crash, leak or sanitizer report.
#   scripts/fuzz.sh [SECONDS] [RUNS]        (default: 20 s, 1000000 inputs)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
runs=${2:-1000000}
fuzzers=(frame_decoder_fuzzer control_message_fuzzer client_request_fuzzer npy_reader_fuzzer
  op_queue_fuzzer)

CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DGRADSYNC_FUZZ=ON -DBUILD_TESTING=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j2 --target "${fuzzers[@]}"
echo "fuzz: built in $SECONDS s"
for fuzzer in "${fuzzers[@]}"; do
  name=${fuzzer%_fuzzer}
  found=$(mktemp -d)  # what the run adds to the corpus stays out of the repository
  log=$(mktemp)
  if ! "build-fuzz/bin/$fuzzer" -max_total_time="$seconds" -runs="$runs" -print_final_stats=1 \
    "$found" "fuzz/corpus/$name" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $fuzzer failed" >&2
    exit 1
  fi
  echo "fuzz: $fuzzer: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') inputs, no crash"
  rm -rf "$found" "$log"
done
