#!/usr/bin/env bash
# Installs the systems gradsync is compared with (docs/architecture.md §16) and the link-speed
# tool: Open MPI, Gloo, torch.distributed (Debian's python3-torch, for /usr/bin/python3) and
# iperf3. Only what is missing; the next build then compiles bench/peers. Not needed for the test
# suite.
set -euo pipefail
packages=(openmpi-bin libopenmpi-dev libgloo-dev python3-torch iperf3)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "install_peers: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
