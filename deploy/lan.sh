#!/usr/bin/env bash
# An emulated LAN on one machine (docs/architecture.md §16): N network namespaces ("hosts"), each
# with a veth into a bridge that lives in a namespace of its own, addresses in 10.77.0.0/24 (which
# exists only inside these namespaces), every link shaped on both ends with tc tbf. Needs root.
#
#   deploy/lan.sh up   [--hosts N] [--rate R] [--slow H:R2]
#       create the LAN (default 4 hosts, 1gbit); --slow shapes host H's link at R2 instead
#   deploy/lan.sh down                            remove every namespace this script made
#   deploy/lan.sh run  [--hosts N] [--rate R] [--slow H:R2] [--ranks-per-host L] -- CMD ARGS...
#       create the LAN, start a coordinator on host 0 and one worker per host (host i's bound
#       to CPU i mod the CPU count, as gradsync local binds its workers; serving L local ranks),
#       run CMD on every host at once (with GRADSYNC_SOCKETS listing that host's worker once for
#       each of its local ranks, GRADSYNC_RANK set to the host's rank, GRADSYNC_JOB naming one
#       job for all of them unless set already),
#       print host 0's output, tear everything down (also on failure or Ctrl-C); exits with the
#       first non-zero status of CMD.
#   deploy/lan.sh compose [--rate R] [-- BENCH ARGS...]
#       docker-compose.yml's topology on the LAN: one host per service, the same commands and
#       environment; the bench service runs last (with BENCH ARGS instead of its own, if given).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="${GRADSYNC_BIN:-$here/../build/bin}"
prefix="gslan"
subnet="10.77.0"
port=29500
hosts=4
ranks_per_host=1
rate="1gbit"
slow_host=-1  # --slow: this host's link runs at slow_rate
slow_rate=""

host_ns() { echo "$prefix-h$1"; }
bridge_ns="$prefix-br"
work=""
daemons=()

usage() {
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  done
}

# NAMESPACE DEVICE RATE: a token bucket at the link rate, whose burst is what the link sends in
# 2 ms (256 KB at 1 Gbit/s, 25 KB at 100 Mbit/s), so that a slower link is slower for short
# messages too, as a real one would be.
shape() {
  local number=${3%%[a-z]*} unit=${3##*[0-9]} bits
  case "$unit" in
    bit) bits=$number ;;
    kbit) bits=$((number * 1000)) ;;
    mbit) bits=$((number * 1000000)) ;;
    gbit) bits=$((number * 1000000000)) ;;
  esac
  local burst=$((bits / 8 / 500))
  [ "$burst" -ge 16384 ] || burst=16384  # at least a few full frames
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "$burst" latency 50ms
}

up() {
  down
  ip netns add "$bridge_ns"
  ip -n "$bridge_ns" link add br0 type bridge
  ip -n "$bridge_ns" link set br0 up
  local i ns
  for ((i = 0; i < hosts; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip link add "$prefix-v$i" type veth peer name "$prefix-b$i"
    ip link set "$prefix-v$i" netns "$ns"
    ip link set "$prefix-b$i" netns "$bridge_ns"
    ip -n "$ns" link set "$prefix-v$i" name eth0
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$bridge_ns" link set "$prefix-b$i" master br0 up
    local link_rate=$rate
    [ "$i" -ne "$slow_host" ] || link_rate=$slow_rate
    shape "$ns" eth0 "$link_rate"
    shape "$bridge_ns" "$prefix-b$i" "$link_rate"
  done
}

# The CPUs this script may use, one per line ("0-2,5" in /proc/self/status is 0 1 2 5).
allowed_cpus() {
  local list part
  list=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
  for part in ${list//,/ }; do seq "${part%-*}" "${part#*-}"; done
}

# Stops the daemons this run started (by PID), then removes the LAN and the scratch folder.
cleanup() {
  local pid
  for pid in "${daemons[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${daemons[@]}"; do wait "$pid" 2>/dev/null || true; done
  down
  [ -z "$work" ] || rm -rf "$work"
}

# The group's secret, new for every run: only this run's daemons can join its group.
make_secret() {
  (umask 077 && head -c 32 /dev/urandom | base64 >"$work/group.secret")
}

run() {
  [ $# -gt 0 ] || usage
  work=$(mktemp -d /tmp/gradsync-lan-XXXXXX)
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  up
  make_secret
  ip netns exec "$(host_ns 0)" "$bin/gradsyncd" coordinator --listen "$subnet.1:$port" \
    --world-size "$hosts" --secret-file "$work/group.secret" >"$work/coordinator.log" 2>&1 &
  daemons+=($!)
  local i cpus spin_us=0
  mapfile -t cpus < <(allowed_cpus)
  # Workers busy-poll only while each can have a CPU of its own, as gradsync local decides
  # (cli/local_cluster.h, kSpinUsWithOwnCpu says why).
  [ $((hosts * ranks_per_host)) -gt "${#cpus[@]}" ] || spin_us=50
  for ((i = 0; i < hosts; i++)); do
    ip netns exec "$(host_ns "$i")" "$bin/gradsyncd" worker --coordinator "$subnet.1:$port" \
      --listen "$subnet.$((i + 1)):0" --socket "$work/rank$i.sock" --rank "$i" \
      --cpus "${cpus[$((i % ${#cpus[@]}))]}" --spin-us "$spin_us" --local-ranks "$ranks_per_host" \
      --secret-file "$work/group.secret" >"$work/rank$i.log" 2>&1 &
    daemons+=($!)
  done
  for ((i = 0; i < hosts; i++)); do
    local waited=0
    until [ -S "$work/rank$i.sock" ]; do
      sleep 0.05
      waited=$((waited + 1))
      if [ "$waited" -gt 600 ]; then
        echo "lan: worker $i did not start; its log:" >&2
        cat "$work/rank$i.log" >&2
        exit 1
      fi
    done
  done
  local pids=() sockets
  # The command on every host is one job (docs/clients.md, "Jobs"), unless the caller named one.
  local job=${GRADSYNC_JOB:-lan $$ at $(date +%s%N)}
  for ((i = 0; i < hosts; i++)); do
    sockets=$(printf "$work/rank$i.sock,%.0s" $(seq "$ranks_per_host"))
    ip netns exec "$(host_ns "$i")" env GRADSYNC_SOCKETS="${sockets%,}" GRADSYNC_RANK="$i" \
      GRADSYNC_JOB="$job" "$@" >"$work/out$i.txt" 2>&1 &
    pids+=($!)
  done
  local status=0 result
  for ((i = 0; i < hosts; i++)); do
    result=0
    wait "${pids[$i]}" || result=$?
    if [ "$result" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$result
      echo "lan: the command failed on host $i (status $result):" >&2
      cat "$work/out$i.txt" >&2
    fi
  done
  cat "$work/out0.txt"
  return "$status"
}

compose() {
  work=$(mktemp -d /tmp/gradsync-lan-XXXXXX)
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  local plan
  plan=$(/usr/bin/python3 "$here/compose_plan.py" "$here/../docker-compose.yml" "$subnet" "$work")
  hosts=$(wc -l <<<"$plan")
  up
  make_secret
  local index=0 name program environment arguments
  while IFS=$'\t' read -r name program environment arguments; do
    if [ "$program" = gradsync ]; then
      [ $# -eq 0 ] || arguments="${arguments%% *} $*"
      # shellcheck disable=SC2086 # the plan's words are split on purpose
      ip netns exec "$(host_ns "$index")" env $environment "$bin/$program" $arguments
      return
    fi
    # shellcheck disable=SC2086
    ip netns exec "$(host_ns "$index")" env $environment "$bin/$program" $arguments \
      >"$work/$name.log" 2>&1 &
    daemons+=($!)
    index=$((index + 1))
  done <<<"$plan"
  echo "lan: docker-compose.yml has no gradsync (bench) service" >&2
  return 1
}

command=${1:-}
[ -n "$command" ] || usage
shift
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) ranks_per_host=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --slow) slow_host=${2%%:*}; slow_rate=${2#*:}; shift 2 ;;
    --) shift; break ;;
    *) if [ "$command" = run ]; then break; else usage; fi ;;
  esac
done
[[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 200 ] ||
  { echo "lan: --hosts must be a number from 1 to 200" >&2; exit 2; }
[[ "$ranks_per_host" =~ ^[0-9]+$ ]] && [ "$ranks_per_host" -ge 1 ] && [ "$ranks_per_host" -le 64 ] ||
  { echo "lan: --ranks-per-host must be a number from 1 to 64" >&2; exit 2; }
rate_pattern='^[0-9]+(bit|kbit|mbit|gbit)$'
[[ "$rate" =~ $rate_pattern ]] ||
  { echo "lan: --rate '$rate' is not a number with bit, kbit, mbit or gbit" >&2; exit 2; }
if [ "$slow_host" != -1 ]; then
  [[ "$slow_host" =~ ^[0-9]+$ ]] && [ "$slow_host" -lt "$hosts" ] &&
    [[ "$slow_rate" =~ $rate_pattern ]] ||
    { echo "lan: --slow takes HOST:RATE with a host below --hosts, e.g. 1:100mbit" >&2; exit 2; }
fi
[ "$(id -u)" -eq 0 ] || { echo "lan: needs root (network namespaces)" >&2; exit 2; }

case "$command" in
  up) up ;;
  down) down ;;
  run) run "$@" ;;
  compose) compose "$@" ;;
  *) usage ;;
esac
