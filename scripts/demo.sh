#!/usr/bin/env bash
# The main job: build gradsync, start a local cluster of 4 workers, all-reduce real tensors from 4
# client processes, check them, train a model with DDP over gradsync, and print a benchmark table.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/build.sh
./build/bin/gradsync local --workers 4 -- ./scripts/demo_job.sh
