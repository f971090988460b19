#!/usr/bin/env bash
# Builds gradsync and runs the whole test suite, then the image and compose topology with podman,
# then the fuzzers for a bounded time, then the C++ suite again under AddressSanitizer + UBSan and
# the cluster tests under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/build.sh
ctest --test-dir build --output-on-failure -j2 --timeout 300
# The image built and docker-compose.yml run for real, with podman (as root; skipped, saying so,
# otherwise).
status=0
./tests/container_test.sh || status=$?
[ "$status" -eq 0 ] || [ "$status" -eq 77 ] || exit "$status"
# Every outside input path under libFuzzer, AddressSanitizer and UBSan, 10 s each.
./scripts/fuzz.sh 10
./scripts/sanitize.sh
