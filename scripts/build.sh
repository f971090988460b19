#!/usr/bin/env bash
# Installs what is missing, then configures and builds gradsync into build/ (two jobs: the machines
# this project targets have two cores).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2
