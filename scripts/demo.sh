#!/usr/bin/env bash
# The main job: build gradsync, then print the cost model's all-reduce table for the seed's cluster
# (64 ranks, alpha = 20 us, beta = 0.0001 us/byte) and the algorithm it chooses per size.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/build.sh
./build/cli/gradsync model --ranks 64 --alpha-us 20 --beta-us-per-byte 0.0001 \
  --sizes 1000,1000000,100000000
