#!/usr/bin/env bash
# Installs the Debian 12 packages that gradsync's build and tests need; installs only what is
# missing, so running it again costs a second. Uses sudo when not run as root.
set -euo pipefail

packages=(
  g++ cmake ninja-build ccache
  protobuf-compiler libprotobuf-dev
  libcli11-dev nlohmann-json3-dev libspdlog-dev
  libgtest-dev libbenchmark-dev libasio-dev libssl-dev clang libfuzzer-14-dev
  pybind11-dev python3-dev python3-numpy python3-pytest python3-torch python3-sklearn
  iproute2 python3 python3-yaml mypy
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg -s "$package" >/dev/null 2>&1; then missing+=("$package"); fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
