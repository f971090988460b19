#!/usr/bin/env bash
# Runs under `gradsync local` (GRADSYNC_SOCKETS names every rank's daemon): four client processes
# all-reduce real tensors through .npy files, the results are checked, a small model trains with
# DDP over gradsync, then the group's plan and a benchmark table.
set -euo pipefail
bin="$(dirname "$0")/../build/bin"
IFS=, read -ra sockets <<<"$GRADSYNC_SOCKETS"
ranks=${#sockets[@]}
count=1000000
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Rank r's tensor: element i is (r + 1) * (i mod 100), as float32 in a NumPy 1.0 .npy file.
write_npy() {  # FILE SCALE
  perl -e '
    my ($file, $scale, $count) = @ARGV;
    my $header = "{\x27descr\x27: \x27<f4\x27, \x27fortran_order\x27: False, \x27shape\x27: ($count,), }";
    $header .= " " x (63 - (10 + length($header)) % 64) . "\n";
    open(my $out, ">:raw", $file) or die "$file: $!";
    print $out "\x93NUMPY\x01\x00", pack("v", length($header)), $header;
    print $out pack("f<*", map { $scale * ($_ % 100) } 0 .. $count - 1);
  ' "$1" "$2" "$count"
}

for ((r = 0; r < ranks; r++)); do write_npy "$work/in$r.npy" $((r + 1)); done
write_npy "$work/expected.npy" $((ranks * (ranks + 1) / 2))

pids=()
for ((r = 0; r < ranks; r++)); do
  "$bin/gradsync" submit --socket "${sockets[$r]}" --collective allreduce --op sum \
    --in "$work/in$r.npy" --out "$work/out$r.npy" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

bytes=$((count * 4))
for ((r = 0; r < ranks; r++)); do
  if ! cmp -s <(tail -c "$bytes" "$work/out$r.npy") <(tail -c "$bytes" "$work/expected.npy"); then
    echo "demo: rank $r's all-reduced tensor is WRONG" >&2
    exit 1
  fi
done
echo "demo: $ranks client processes all-reduced $count-element f32 tensors (.npy);" \
  "every rank's result equals the expected sum"
echo
# A real training job: DDP over the "gradsync" torch backend, one process per rank.
/usr/bin/python3 "$(dirname "$0")/../examples/train_digits.py" --epochs 5
echo
# What the group measured when it formed and what auto runs because of it.
"$bin/gradsync" plan --sizes 4,4KiB,64KiB,1MiB,16MiB
echo
"$bin/gradsync" bench --algorithm all --min-bytes 4 --max-bytes 16MiB --step-factor 16 \
  --iters 10 --warmup 3
