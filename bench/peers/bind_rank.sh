#!/usr/bin/env bash
# Runs COMMAND on the CPU that bench/compare.py gives this MPI rank, as gradsync's workers are bound
# (rank r on CPU r mod the CPU count): GRADSYNC_RANK_CPUS lists the CPUs in rank order, mpirun sets
# OMPI_COMM_WORLD_RANK.
#   bind_rank.sh COMMAND...
set -euo pipefail
IFS=, read -ra cpus <<<"${GRADSYNC_RANK_CPUS:?bind_rank: GRADSYNC_RANK_CPUS is not set}"
exec taskset -c "${cpus[${OMPI_COMM_WORLD_RANK:?bind_rank: not started by mpirun}]}" "$@"
