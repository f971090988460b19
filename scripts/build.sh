#!/usr/bin/env bash
# Installs what is missing, then configures and builds gradsync into build/ (two jobs: the machines
# this project targets have two cores), and installs the Python package for /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2
# The Python package, where /usr/bin/python3 finds it: import gradsync works from any folder.
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
"${sudo[@]}" cmake --install build --component python >/dev/null
