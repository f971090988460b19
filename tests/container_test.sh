#!/usr/bin/env bash
# The image and docker-compose.yml for real, with podman: makes the Debian 12 base images from
# Debian's archive (debootstrap; no registry is reachable here), runs docs/containers.md's compose
# commands (build, then the bench with its coordinator and four workers) and checks every row of
# the bench, then runs its across-hosts recipe on loopback (host networking, client
# sockets in host folders) with training processes of other users: the daemon run as the training
# user, and the daemon that hands its socket to a group (--client-gid), whose members connect and
# whose strangers cannot. Removes everything it made, also after a failure.
#
# Needs root (podman's networks, other users): installs podman where it is missing; without root
# it says it is skipped (exit 77). Podman's state lives in a cache of the machine's, outside the
# clone (GRADSYNC_CONTAINER_CACHE, default ~/.cache/gradsync/containers, beside ccache's), not in
# /var/lib/containers: the base images and the image's package layers are made once, whatever
# clone runs next, and the image's compile goes through a ccache in a build cache mount
# (deploy/Dockerfile). Each change of the sources leaves its layers there: past 8 GiB the unused
# images are removed first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${GRADSYNC_BIN:-$root/build/bin}
cache=${GRADSYNC_CONTAINER_CACHE:-${HOME:-/root}/.cache/gradsync/containers}
project=gradsync-test  # the compose project: its containers, network and volume carry the name
work=""
bench_pid=""  # a benchmark run in the background

say() { echo "container_test: $*"; }
fail() {
  echo "container_test: FAILED: $*" >&2
  exit 1
}

if [ "$(id -u)" -ne 0 ]; then
  say "skipped: needs root (podman's container networks; clients running as other users)"
  exit 77
fi
missing=()
for package in podman podman-compose runc debootstrap iptables; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi

# Podman's settings for this run, in files of its own (podman reads them from these variables).
mkdir -p "$cache"
files=$(ulimit -Hn)
[ "$files" -le 16384 ] || files=16384
cat >"$cache/containers.conf" <<EOF
[containers]
# Podman's default limits are above this machine's hard limits, and runc's setrlimit is refused
# even at them: below them it is not.
default_ulimits = ["nofile=$files:$files", "nproc=4096:4096"]
[engine]
# crun refuses the hybrid cgroup v1 + v2 layout of these machines; runc runs on it.
runtime = "runc"
tmp_dir = "$cache/tmp"
[network]
network_config_dir = "$cache/networks"
EOF
cat >"$cache/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$cache/storage"
runroot = "$cache/run"
EOF
export CONTAINERS_CONF=$cache/containers.conf CONTAINERS_STORAGE_CONF=$cache/storage.conf
if [ -d "$cache/storage" ] && [ "$(du -sm "$cache/storage" | cut -f1)" -gt 8192 ]; then
  say "the cache is past 8 GiB: removing its unused images"
  podman system prune -a -f >/dev/null
fi

# What podman changes outside its folders, as it was: restored by cleanup.
ip_forward=$(cat /proc/sys/net/ipv4/ip_forward)
had_chains=$(iptables-save 2>/dev/null | grep -c NETAVARK || true)
run_folders=(/run/containers /run/libpod /run/netns /run/runc)
new_run_folders=()
for folder in "${run_folders[@]}"; do [ -e "$folder" ] || new_run_folders+=("$folder"); done
cgroups_before=$(find /sys/fs/cgroup -maxdepth 2 -name 'libpod_parent' 2>/dev/null | sort)

cleanup() {
  set +e
  [ -z "$bench_pid" ] || kill "$bench_pid" 2>/dev/null
  (cd "$root" && podman-compose -p "$project" down -v) >/dev/null 2>&1
  podman rm -f -a -t 0 >/dev/null 2>&1
  podman network prune -f >/dev/null 2>&1
  podman volume prune -f >/dev/null 2>&1
  podman rmi --no-prune -f gradsync >/dev/null 2>&1  # its package layers stay, as a cache
  # The containers' monitors exit just after their containers.
  for _ in $(seq 50); do pgrep -f "$cache/storage" >/dev/null || break; sleep 0.1; done
  # The firewall chains netavark made for the networks (none were there before this run).
  if [ "$had_chains" -eq 0 ]; then
    local table rule chain chains
    for table in filter nat; do
      iptables-save -t "$table" | grep '^-A' | grep NETAVARK | grep -v '^-A NETAVARK' |
        sed 's/^-A/-D/' | while read -r rule; do
          eval "iptables -t $table $rule"  # a saved rule, quoted as iptables-save quotes it
        done
      mapfile -t chains < <(iptables-save -t "$table" | sed -n 's/^:\(NETAVARK[^ ]*\).*/\1/p')
      for chain in "${chains[@]}"; do iptables -t "$table" -F "$chain"; done
      for chain in "${chains[@]}"; do iptables -t "$table" -X "$chain"; done
    done
  fi
  echo "$ip_forward" >/proc/sys/net/ipv4/ip_forward
  local folder
  for folder in "${new_run_folders[@]}"; do
    ! mountpoint -q "$folder" || umount "$folder"
    rm -rf "$folder"
  done
  # Podman's cgroup folders (cgroupfs): the deepest first, as cgroups are removed.
  find /sys/fs/cgroup -maxdepth 2 -name 'libpod_parent' 2>/dev/null | while read -r folder; do
    grep -Fqx "$folder" <<<"$cgroups_before" || find "$folder" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  [ -z "$work" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
work=$(mktemp -d /tmp/gradsync-containers-XXXXXX)
chmod 755 "$work"

# The base images the Dockerfile names, from Debian's archive (the tarball is kept).
if ! podman image exists debian:12; then
  if [ ! -f "$cache/debian-12.tar" ]; then
    say "making the Debian 12 base image with debootstrap"
    debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian \
      >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; fail "debootstrap"; }
    tar -C "$work/rootfs" -cf "$cache/debian-12.tar.part" .  # whole, or not there
    mv "$cache/debian-12.tar.part" "$cache/debian-12.tar"
    rm -rf "$work/rootfs"
  fi
  podman import -q "$cache/debian-12.tar" debian:12 >/dev/null
  podman tag debian:12 debian:12-slim
fi

# docs/containers.md's commands, as written (with a project name of this test's own).
cd "$root"
(umask 077 && head -c 32 /dev/urandom | base64 >"$work/group.secret")
chown 10001 "$work/group.secret"  # the image's user reads it
export GRADSYNC_SECRET_FILE=$work/group.secret
say "building the image"
podman rmi --no-prune -f gradsync >/dev/null 2>&1 || true  # one a killed run left
start=$SECONDS
# podman-compose 1.0.3 exits 0 when the build fails: the image tells.
podman-compose -p "$project" build >"$work/build.log" 2>&1 || true
[ "$(podman images -q gradsync | wc -l)" -eq 1 ] ||
  { tail -40 "$work/build.log"; fail "the image did not build"; }
say "built in $((SECONDS - start)) s"
if grep -E '(warning|error): ' "$work/build.log"; then fail "the image's build printed the above"; fi
say "running the compose topology"
start=$SECONDS
status=0
podman-compose -p "$project" up --exit-code-from bench bench >"$work/up.log" 2>&1 || status=$?
[ "$status" -eq 0 ] || { tail -60 "$work/up.log"; fail "podman-compose up exited with $status"; }
podman logs "${project}_bench_1" >"$work/bench.txt" 2>&1
say "ran in $((SECONDS - start)) s"
cat "$work/bench.txt"
grep -q '^# gradsync bench: allreduce, 4 ranks' "$work/bench.txt" || fail "the bench did not see 4 ranks"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +f32 +sum ' "$work/bench.txt" || true)
correct=$(grep -cE '^ +[0-9]+ +[0-9]+ +f32 +sum .* 0$' "$work/bench.txt" || true)
[ "$rows" -ge 20 ] || fail "the bench printed $rows rows"
[ "$correct" -eq "$rows" ] || fail "$((rows - correct)) of $rows rows have wrong results"
(podman-compose -p "$project" down -v) >/dev/null 2>&1
[ -z "$(podman ps -aq)" ] || fail "podman-compose down left containers"

# Across hosts, on loopback: docs/containers.md's `docker run --network host` commands, with
# loopback for 0.0.0.0, a free port for 29500 and folders of this test's for ~/gradsync (a
# training user's, who runs the coordinator and one worker as itself) and /srv/gradsync (the
# other worker's, as the image's user, handing its socket to a group).
say "running the across-hosts recipe"
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
trainer=20001   # runs the daemons as itself
group=20002     # the other daemon's clients
member=20003    # a training user in that group
stranger=20004  # in neither
home=$work/home/gradsync
srv=$work/srv/gradsync
install -d -m 0755 "$work/home" "$work/srv"
install -d -o "$trainer" -g "$trainer" -m 0700 "$home"
install -o "$trainer" -m 0600 "$work/group.secret" "$home/group.secret"
install -d -o 10001 -g "$group" -m 0750 "$srv"
install -o 10001 -m 0600 "$work/group.secret" "$srv/group.secret"
podman run -d --name "$project-coordinator" --network host --user "$trainer:$trainer" \
  -v "$home/group.secret:/run/secrets/gradsync:ro" \
  -e GRADSYNC_LISTEN="127.0.0.1:$port" -e GRADSYNC_WORLD_SIZE=2 \
  -e GRADSYNC_SECRET_FILE=/run/secrets/gradsync gradsync coordinator >/dev/null
worker=(-e GRADSYNC_COORDINATOR="127.0.0.1:$port" -e GRADSYNC_LISTEN=127.0.0.1:0
  -e GRADSYNC_SOCKET=/run/gradsync/rank.sock -e GRADSYNC_SECRET_FILE=/run/gradsync/group.secret
  gradsync worker)
podman run -d --name "$project-worker-as-trainer" --network host --user "$trainer:$trainer" \
  -v "$home:/run/gradsync" "${worker[@]}" >/dev/null
podman run -d --name "$project-worker-for-group" --network host --group-add "$group" \
  -e GRADSYNC_CLIENT_GID="$group" -v "$srv:/run/gradsync" "${worker[@]}" >/dev/null
for socket in "$home/rank.sock" "$srv/rank.sock"; do
  for _ in $(seq 200); do [ -S "$socket" ] && break; sleep 0.1; done
  [ -S "$socket" ] || { podman logs "$project-worker-as-trainer" "$project-worker-for-group";
    fail "no socket $socket"; }
done
as_user() {  # UID GROUPS CMD...: runs CMD as a training process of that user
  local uid=$1 groups=$2
  shift 2
  local membership=(--clear-groups)
  [ -z "$groups" ] || membership=(--groups "$groups")
  setpriv --reuid "$uid" --regid "$uid" "${membership[@]}" "$@"
}
bench=("$bin/gradsync" bench --algorithm auto --min-bytes 4 --max-bytes 1MiB --step-factor 64
  --iters 3 --warmup 1)
# The two processes are one job, as every process of a run started by hand (docs/clients.md).
export GRADSYNC_JOB="across hosts $$"
GRADSYNC_SOCKETS=$home/rank.sock as_user "$trainer" "" "${bench[@]}" >"$work/trainer.txt" 2>&1 &
bench_pid=$!
GRADSYNC_SOCKETS=$srv/rank.sock as_user "$member" "$group" "${bench[@]}" >"$work/member.txt" 2>&1 ||
  { cat "$work/member.txt"; fail "the group's member could not run the bench"; }
wait "$bench_pid" || { cat "$work/trainer.txt"; fail "the daemon's own user could not run the bench"; }
bench_pid=""
# Rank 0, whichever worker joined first, prints the table; each bench exits non-zero on a wrong
# result of its own.
cat "$work/trainer.txt" "$work/member.txt" >"$work/across.txt"
cat "$work/across.txt"
grep -q '^# gradsync bench: allreduce, 2 ranks' "$work/across.txt" || fail "the bench did not see 2 ranks"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +f32 +sum .* 0$' "$work/across.txt" || true)
[ "$rows" -eq 4 ] || fail "the across-hosts bench gave $rows correct rows, not 4"
[ "$(stat -c '%a %u' "$home/rank.sock")" = "600 $trainer" ] ||
  fail "the trainer's socket is $(stat -c '%a, uid %u' "$home/rank.sock"), not 600, uid $trainer"
[ "$(stat -c '%a %g' "$srv/rank.sock")" = "660 $group" ] ||
  fail "the group's socket is $(stat -c '%a, gid %g' "$srv/rank.sock"), not 660, gid $group"
# A third user: kept out by the folders, and with the folders opened, by the sockets themselves.
stranger_is_denied() {  # SOCKET WHAT-DENIES-IT
  local message
  if message=$(as_user "$stranger" "" "$bin/gradsync" status --sockets "$1" 2>&1); then
    fail "a stranger reached $1"
  fi
  grep -Fq "$2" <<<"$message" || fail "a stranger on $1 was told: $message"
}
for socket in "$home/rank.sock" "$srv/rank.sock"; do
  stranger_is_denied "$socket" "Permission denied"
  chmod 0755 "$(dirname "$socket")"
  stranger_is_denied "$socket" "cannot connect to $socket: Permission denied"
done
say "passed"
