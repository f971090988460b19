#!/usr/bin/env bash
# Open MPI's remote-shell agent on the emulated LAN (deploy/lan.sh): mpirun, itself inside host 0's
# namespace, starts its daemon on host 10.77.0.N by calling
#   netns_rsh.sh [OPTIONS] 10.77.0.N COMMAND...
# which runs COMMAND inside that host's namespace, as ssh would run it on a real host, with a host
# name of its own (a UTS namespace): Open MPI tells hosts apart by name, and took processes on
# different emulated hosts for neighbours that share memory (its vader transport then crashed).
set -euo pipefail
while [ $# -gt 0 ] && [[ "$1" == -* ]]; do shift; done  # ssh-style options mpirun may pass
host=${1:?usage: netns_rsh.sh HOST COMMAND...}
shift
[[ "$host" =~ ^10\.77\.0\.([0-9]+)$ ]] || { echo "netns_rsh: $host is not a LAN host" >&2; exit 2; }
ns="gslan-h$((BASH_REMATCH[1] - 1))"
exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $ns && $*"
