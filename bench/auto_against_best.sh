#!/usr/bin/env bash
# Auto against the best forced algorithm (docs/algorithms.md): in each of G fresh
# groups of P ranks, `gradsync bench --algorithm all` (auto and every forced algorithm taking turns
# within every iteration), printed per group as auto's worst ratio to the best forced algorithm
# and the all-reduce table the group published (the same table from group to group is the
# stability target).
#
#   bench/auto_against_best.sh [--groups G] [--ranks P] [--lan RATE] [--keep DIR] [-- BENCH ARGS...]
#
# Loopback (gradsync local) unless --lan, which runs on deploy/lan.sh's emulated LAN at RATE (root).
# --keep DIR keeps every group's full output there.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="${GRADSYNC_BIN:-$here/../build/bin}"
groups=5
ranks=4
lan=""
keep=""
bench_args=(--min-bytes 4 --max-bytes 64MiB --step-factor 4 --iters 10 --small-iters 50 --warmup 2)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --groups) groups="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --lan) lan="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --) shift; bench_args=("$@"); break ;;
    *) echo "usage: $0 [--groups G] [--ranks P] [--lan RATE] [--keep DIR] [-- BENCH ARGS...]" >&2
       exit 2 ;;
  esac
done
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# Every host runs the bench (one rank each); only host 0's output is printed.
script="'$bin/gradsync' plan --sizes 4 | grep -A1 '^allreduce >='; '$bin/gradsync' bench --algorithm all ${bench_args[*]}"
for group in $(seq 1 "$groups"); do
  log="$out/group$group.txt"
  if [[ -n "$lan" ]]; then
    "$here/../deploy/lan.sh" run --hosts "$ranks" --rate "$lan" -- sh -c "$script" > "$log" 2>&1
  else
    "$bin/gradsync" local --workers "$ranks" -- sh -c "$script" > "$log" 2>&1
  fi
  [[ -n "$keep" ]] && mkdir -p "$keep" && cp "$log" "$keep/p$ranks-group$group.txt"
  table="$(grep '^allreduce >=' "$log" | sed 's/allreduce >= //; s/ B:/:/' | paste -sd ' ' -)"
  worst="$(grep 'auto against the best' "$log" | sed 's/.*at worst //')"
  echo "p=$ranks group $group: auto at worst $worst; table: $table"
done
