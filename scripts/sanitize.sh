#!/usr/bin/env bash
# The C++ test suite under AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/), then the
# cluster tests (real daemons, several threads each) under ThreadSanitizer (build-tsan/). Every
# process, the daemons the tests start included, writes what its sanitizer finds to a report file;
# any report, like any failed test, fails the script.
#   scripts/sanitize.sh [asan|tsan]...      (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- asan tsan

# The emulated LAN's tests need namespaces and time, and test the same daemons as the others; the
# compose test reads files. The schedule simulations check the builders' arithmetic on every
# collective up to p = 64 (half the sanitized run's time): no input from outside reaches them, and
# the engine that runs schedules on real buffers is rerun here with the executor's tests.
# Of the local-rank layouts, two run every path of the others under the sanitizers: 2 x 2 (in
# place) and 1 + 3 (staged, uneven); each takes 25 to 50 s there. Of the all-reduce's world sizes
# 2 to 8, 6 and 7 add no path that 5 and 8 do not take. The two largest plans test protobuf's
# size arithmetic, not an input.
not_rerun='^(lan_test|lan_plan_test|compose_test|AllBuilders/ScheduleSimulation\..*|Layouts/ClusterLocalRanks\..*/hosts_(2|3|3_3|2_1_2|3_1_2|2_2_2_2|1_1_1_1)|WorldSizes/ClusterAllreduce\..*/p(6|7)|PlanBuilder\.(AGroupTooLargeForALinkTableGetsItsSlowestLinkEverywhere|TheLargestPlanFitsInAControlMessage))$'
# Under ThreadSanitizer, ops run ten to a hundred times slower: the refinement test, which waits for
# hundreds of ops, took half of the pass; a thousand idle connections are one thread's accepts.
not_rerun_threaded='^(ClusterTableRefinement\..*|ClusterControlPlane\.AThousandIdleConnectionsNeitherStopAGroupNorCostCpu)$'

run() {
  local kind=$1 sanitizers=$2
  shift 2
  local reports
  reports=$(mktemp -d)
  # The micro-benchmark is not run here, so not built.
  cmake -S . -B "build-$kind" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DGRADSYNC_SANITIZE="$sanitizers" -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON >/dev/null
  cmake --build "build-$kind" -j2 "$@"
  local options="log_path=$reports/report:halt_on_error=1"
  local failed=0
  ASAN_OPTIONS="$options:detect_leaks=1" UBSAN_OPTIONS="$options:print_stacktrace=1" \
    TSAN_OPTIONS="$options:second_deadlock_stack=1" \
    ctest --test-dir "build-$kind" --output-on-failure -j2 --timeout 600 -E "${excluded:-$not_rerun}" \
    ${labels:+-L "$labels"} || failed=1
  if compgen -G "$reports/report*" >/dev/null; then
    echo "sanitize: $kind: sanitizer reports:" >&2
    head -n 80 "$reports"/report* >&2
    failed=1
  fi
  rm -rf "$reports"
  [ "$failed" -eq 0 ] || { echo "sanitize: $kind failed" >&2; return 1; }
  echo "sanitize: $kind: no report"
}

# Only the cluster tests run under ThreadSanitizer: only they have threads, in their daemons.
cluster_tests=(gradsyncd gradsync)
for source in tests/cluster_*_test.cc; do cluster_tests+=("$(basename "$source" .cc)"); done

for kind in "$@"; do
  case $kind in
    asan) labels='' run asan address,undefined ;;
    tsan) labels=cluster excluded="$not_rerun|$not_rerun_threaded" \
      run tsan thread --target "${cluster_tests[@]}" ;;
    *) echo "sanitize: unknown kind '$kind' (asan or tsan)" >&2; exit 2 ;;
  esac
done
