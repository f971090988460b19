#!/usr/bin/env bash
# The measured plan on the emulated LAN (docs/architecture.md §9): 4 hosts at 1 Gbit/s, then the
# same with host 2's link slowed to 100 Mbit/s. The probes must see the slow links, and the switch
# of the measured model's table from latency-optimal all-reduces to bandwidth-optimal ones (ring or
# halving-doubling) must move to smaller sizes, in one of two attempts. Needs root; without it the
# test reports itself skipped (exit 77), not passed.
set -euo pipefail
lan="$(dirname "$0")/../deploy/lan.sh"

if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "lan_plan_test: skipped: needs root and network namespaces"
  exit 77
fi

work=$(mktemp -d /tmp/gradsync-lan-plan-XXXXXX)
trap 'rm -rf "$work"' EXIT
# The table from the measured α-β-γ model alone (the coordinator reads GRADSYNC_CALIBRATION_MS):
# calibration adds measurements whose noise at 4 B and 64 KiB can move a switch either way.
export GRADSYNC_CALIBRATION_MS=0
# A second attempt, since a latency probe that a descheduled rank slowed (2 cores, 8 processes)
# can move one run's switch on its own; the slow link must show in one of two attempts.
for attempt in 1 2; do
  "$lan" run --hosts 4 --rate 1gbit -- "$GRADSYNC_BIN/gradsync" plan --json >"$work/even.json"
  "$lan" run --hosts 4 --rate 1gbit --slow 2:100mbit -- "$GRADSYNC_BIN/gradsync" plan --json \
    >"$work/slowed.json"
  if /usr/bin/python3 - "$work/even.json" "$work/slowed.json" <<'PYTHON'
import json, statistics, sys

even, slowed = (json.load(open(path)) for path in sys.argv[1:3])

def beta(plan, touching_2):
    return [link["beta_us_per_byte"] for link in plan["links"]
            if (2 in (link["from"], link["to"])) == touching_2]

def switch(plan):
    """The size from which the table runs bandwidth-optimal all-reduces only (ring or
    halving-doubling), whatever it picks among the small sizes."""
    start = None
    for entry in plan["table"]:
        if entry["collective"] != "allreduce":
            continue
        if entry["algorithm"] not in ("ring", "halving_doubling"):
            start = None
        elif start is None:
            start = entry["min_bytes"]
    return start

failures = []
for name, plan in (("even", even), ("slowed", slowed)):
    if not plan["measured"] or plan["world_size"] != 4 or len(plan["links"]) != 12:
        failures.append(f"{name}: not a measured plan of 4 ranks with 12 links")
# 1 Gbit/s is 0.008 us/byte; every link of the even LAN within a factor of 2 of it.
for value in beta(even, True) + beta(even, False):
    if not 0.004 < value < 0.016:
        failures.append(f"even: a link measured at {value} us/byte, not about 0.008")
fast, slow = statistics.median(beta(slowed, False)), min(beta(slowed, True))
if slow < 5 * fast:
    failures.append(f"slowed: host 2's links at {slow} us/byte, not 5x the others' {fast}")
print(f"beta: even {statistics.median(beta(even, False)):.4f}, slowed host {slow:.4f} us/byte")
print(f"switch to ring/halving_doubling: even {switch(even)} B, slowed {switch(slowed)} B")
if switch(even) is None or switch(slowed) is None or not switch(slowed) < switch(even):
    failures.append("the switch point did not move to smaller sizes with the slow link")
print(f"probing: even {even['probe_ms']:.0f} ms, slowed {slowed['probe_ms']:.0f} ms")
if even["calibration"] or slowed["calibration"]:
    failures.append("calibrated although GRADSYNC_CALIBRATION_MS=0")
for failure in failures:
    print("lan_plan_test:", failure)
sys.exit(1 if failures else 0)
PYTHON
  then
    echo "lan_plan_test: passed (attempt $attempt)"
    exit 0
  fi
done
exit 1
