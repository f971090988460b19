#!/usr/bin/env bash
# The emulated LAN end to end: 4 hosts in network namespaces at 1 Gbit/s run a short all-reduce
# benchmark with every result checked, so does docker-compose.yml's topology with its own
# environment, a failing command fails the run, and none leaves a namespace behind. Needs root; without it the test reports itself skipped (exit 77), not passed.
set -euo pipefail
lan="$(dirname "$0")/../deploy/lan.sh"

if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "lan_test: skipped: needs root and network namespaces"
  exit 77
fi

leftover() { ip netns list | grep -c '^gslan-' || true; }

output=$("$lan" run --hosts 4 --rate 1gbit -- "$GRADSYNC_BIN/gradsync" bench --algorithm all \
  --min-bytes 4 --max-bytes 1MiB --step-factor 256 --iters 3 --warmup 1)
echo "$output"
rows=$(echo "$output" | grep -cE '^ +[0-9]+ +[0-9]+ +f32 +sum ')
[ "$rows" -eq 15 ] || { echo "lan_test: expected 15 benchmark rows, got $rows"; exit 1; }
if echo "$output" | grep -E '^ +[0-9]+ +[0-9]+ +f32 +sum ' | awk '$NF != 0 { bad = 1 } END { exit !bad }'; then
  echo "lan_test: a row has wrong results"
  exit 1
fi
grep -q "4 ranks" <<<"$output" || { echo "lan_test: the bench did not see 4 ranks"; exit 1; }
[ "$(leftover)" -eq 0 ] || { echo "lan_test: namespaces left after a run"; exit 1; }

# docker-compose.yml's own topology and environment, on the LAN.
output=$("$lan" compose --rate 1gbit -- --algorithm auto --min-bytes 4 --max-bytes 64KiB \
  --step-factor 64 --iters 3 --warmup 1)
echo "$output"
rows=$(echo "$output" | grep -cE '^ +[0-9]+ +[0-9]+ +f32 +sum .* 0$')
[ "$rows" -eq 3 ] || { echo "lan_test: the compose topology gave $rows correct rows, not 3"; exit 1; }
[ "$(leftover)" -eq 0 ] || { echo "lan_test: namespaces left after the compose run"; exit 1; }

if "$lan" run --hosts 2 -- false 2>/dev/null; then
  echo "lan_test: a failing command must fail the run"
  exit 1
fi
[ "$(leftover)" -eq 0 ] || { echo "lan_test: namespaces left after a failed run"; exit 1; }
# Bad arguments are refused before anything is created.
for bad in "run --hosts 0 -- true" "run --hosts x -- true" "frobnicate" "up --bogus" \
  "run --hosts 2 --slow 5:1mbit -- true" "run --hosts 2 --slow 1 -- true" \
  "run --hosts 2 --slow 1:fast -- true" "run --hosts 2 --rate 1.5gbit -- true"; do
  # shellcheck disable=SC2086 # the words are split on purpose
  if "$lan" $bad 2>/dev/null; then echo "lan_test: '$bad' was accepted"; exit 1; fi
done
message=$("$lan" run --hosts 0 -- true 2>&1 || true)
grep -q "lan: --hosts must be a number from 1 to 200" <<<"$message" ||
  { echo "lan_test: unclear message for --hosts 0: $message"; exit 1; }
message=$("$lan" run --hosts 2 --slow 5:1mbit -- true 2>&1 || true)
grep -q "lan: --slow takes HOST:RATE with a host below --hosts" <<<"$message" ||
  { echo "lan_test: unclear message for --slow 5:1mbit: $message"; exit 1; }
[ "$(leftover)" -eq 0 ] || { echo "lan_test: bad arguments left namespaces"; exit 1; }
echo "lan_test: passed"
