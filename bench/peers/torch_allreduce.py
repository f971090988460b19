#!/usr/bin/python3
"""torch.distributed all-reduce with the gloo backend (Debian's python3-torch), float32 sum in
place, over the same sweep and in the same columns as gradsync bench. One process per rank:
RANK, WORLD_SIZE and TORCH_STORE (a file all ranks share for the rendezvous)."""
import argparse
import json
import os
import re
import statistics
import time

import torch
import torch.distributed as dist


def size(text):
    match = re.fullmatch(r"(\d+)(KiB|MiB|GiB)?", text)
    if not match:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size in bytes")
    return int(match.group(1)) << {None: 0, "KiB": 10, "MiB": 20, "GiB": 30}[match.group(2)]


parser = argparse.ArgumentParser()
parser.add_argument("--min-bytes", type=size, default=4)
parser.add_argument("--max-bytes", type=size, default=64 << 20)
parser.add_argument("--step-factor", type=float, default=4)
parser.add_argument("--iters", type=int, default=20)
# Rows of at most 64 KiB take --small-iters timed iterations, as in cli/bench_report.h
# (kSmallRowMaxBytes), which says why.
parser.add_argument("--small-iters", type=int)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--json")
options = parser.parse_args()
small_iters = options.small_iters or options.iters

rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method="file://" + os.environ["TORCH_STORE"], rank=rank,
                        world_size=world_size)
rows = []
bytes_ = float(options.min_bytes)
while bytes_ <= options.max_bytes:
    count = max(int(bytes_) // 4, 1)
    index = torch.arange(count, dtype=torch.int64)
    pristine = ((index + rank) % 4).to(torch.float32)
    expected = sum(((index + r) % 4) for r in range(world_size)).to(torch.float32)
    starts, stops, wrong = [], [], 0
    timed = small_iters if count * 4 <= 64 << 10 else options.iters
    for iteration in range(options.warmup + timed):
        data = pristine.clone()
        dist.barrier()  # a row times the op, not the ranks arriving at different times
        # The wall clock, as cli::wall_clock_us(): an op's time runs from the first rank's start
        # to the last rank's end.
        start = time.clock_gettime(time.CLOCK_REALTIME) * 1e6
        dist.all_reduce(data, op=dist.ReduceOp.SUM)
        stop = time.clock_gettime(time.CLOCK_REALTIME) * 1e6
        if iteration >= options.warmup:
            starts.append(start)
            stops.append(stop)
            wrong += 0 if torch.equal(data, expected) else 1
    reduced = torch.tensor(stops + [-s for s in starts] + [wrong], dtype=torch.float64)
    dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
    spans = [reduced[i].item() + reduced[len(stops) + i].item() for i in range(len(stops))]
    median = statistics.median(spans)
    algbw = count * 4 / median / 1e3
    rows.append({"bytes": count * 4, "count": count, "time_us": median, "algbw_gbps": algbw,
                 "busbw_gbps": algbw * 2 * (world_size - 1) / world_size,
                 "wrong": int(reduced[-1]), "iterations": timed})
    bytes_ *= options.step_factor

if rank == 0:
    iterations = f"{options.iters} iterations"
    if small_iters != options.iters:
        iterations += f" ({small_iters} up to 64 KiB)"
    print(f"# torch.distributed (gloo): allreduce, {world_size} ranks, f32 sum, {iterations} "
          f"after {options.warmup} warm-up; time is the median, from the first rank's start to "
          f"the last rank's end")
    print(f"{'size(B)':>12} {'count':>12} {'type':>6} {'redop':>6} {'algorithm':<24} "
          f"{'time(us)':>12} {'algbw':>8} {'busbw':>8} {'predicted':>12} {'#wrong':>7}")
    for row in rows:
        print(f"{row['bytes']:>12} {row['count']:>12} {'f32':>6} {'sum':>6} {'torch:gloo':<24} "
              f"{row['time_us']:>12.1f} {row['algbw_gbps']:>8.3f} {row['busbw_gbps']:>8.3f} "
              f"{'-':>12} {row['wrong']:>7}")
    if options.json:
        with open(options.json, "w") as file:
            json.dump([{"system": "torch.distributed (gloo)", "ranks": world_size, **row}
                       for row in rows], file, indent=2)
dist.destroy_process_group()
