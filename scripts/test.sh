#!/usr/bin/env bash
# Builds gradsync and runs the whole test suite, then the image and compose topology with podman,
# then the fuzzers for a bounded time, then the C++ suite again under AddressSanitizer + UBSan and
# the cluster tests under ThreadSanitizer. Says how long each step took, and at the end (also
# after a failure) every step's time and how many compiles ccache served.
set -euo pipefail
cd "$(dirname "$0")/.."

# Compiles served from ccache and compiled, so far on this machine.
ccache_counts() {
  command -v ccache >/dev/null || { echo "0 0"; return; }
  ccache --print-stats | awk '$1 ~ /^(direct|preprocessed)_cache_hit$/ { hits += $2 }
    $1 == "cache_miss" { misses = $2 } END { print hits + 0, misses + 0 }'
}
read -r hits_before misses_before < <(ccache_counts)
times=()
summary() {
  local hits misses steps
  read -r hits misses < <(ccache_counts)
  steps=$(IFS=,; echo "${times[*]:-no step done}")
  echo "test: ${steps//,/, }; $SECONDS s in all; ccache served $((hits - hits_before))" \
    "compiles and compiled $((misses - misses_before))"
}
trap summary EXIT
step() {  # NAME COMMAND...
  local name=$1 start=$SECONDS
  shift
  "$@"
  times+=("$name $((SECONDS - start)) s")
  echo "test: $name took $((SECONDS - start)) s"
}
# The image built and docker-compose.yml run for real, with podman (as root; skipped, saying so,
# otherwise).
containers() {
  local status=0
  ./tests/container_test.sh || status=$?
  [ "$status" -eq 0 ] || [ "$status" -eq 77 ] || return "$status"
}

step build ./scripts/build.sh
step suite ctest --test-dir build --output-on-failure -j2 --timeout 300
step containers containers
# Every outside input path under libFuzzer, AddressSanitizer and UBSan, 10 s each.
step fuzzers ./scripts/fuzz.sh 10
step sanitizers ./scripts/sanitize.sh
