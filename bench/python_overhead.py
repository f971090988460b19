#!/usr/bin/python3
"""Python's cost per op over the C++ client: times N blocking 4-byte all-reduces from Python on
every rank of a group started by `gradsync local` (GRADSYNC_SOCKETS), every rank a process of its
own bound beside its daemon, each op after a barrier as `gradsync bench` times them, and prints
the slowest rank's median beside `gradsync bench`'s figure for the same size in the same group,
alternating.

    build/bin/gradsync local --workers 2 -- /usr/bin/python3 bench/python_overhead.py
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import gradsync


def one_rank(socket, iterations):
    """This process is one rank, as in a training job: the 4-byte all-reduce's median time."""
    client = gradsync.Client(socket)
    client.bind_thread_beside_daemon()
    data = client.allocate_array((1,), np.float32)
    for _ in range(100):
        client.allreduce(data)
    times = []
    for _ in range(iterations):
        client.barrier()  # as gradsync bench does: the row times the op, not the ranks' arrival
        start = time.perf_counter()
        client.allreduce(data)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def python_us(sockets, iterations):
    """The slowest rank's mean time, every rank a process of its own."""
    ranks = [subprocess.Popen([sys.executable, __file__, "--rank-socket", socket,
                               "--iterations", str(iterations)],
                              stdout=subprocess.PIPE, text=True) for socket in sockets]
    return max(float(rank.communicate()[0]) for rank in ranks)


def cpp_us(binary, iterations):
    table = subprocess.run([binary, "bench", "--min-bytes", "4", "--max-bytes", "4",
                            "--iters", str(iterations), "--small-iters", str(iterations)],
                           capture_output=True, text=True, check=True).stdout
    row = [line for line in table.splitlines() if line.split()[:1] == ["4"]][0]
    return float(row.split()[5])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--gradsync", default=os.path.join(os.path.dirname(__file__),
                                                           "../build/bin/gradsync"))
    parser.add_argument("--rank-socket", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_socket:
        print(one_rank(args.rank_socket, args.iterations))
        return
    sockets = [s for s in os.environ["GRADSYNC_SOCKETS"].split(",") if s]
    for repetition in range(args.repetitions):
        cpp = cpp_us(args.gradsync, args.iterations)
        python = python_us(sockets, args.iterations)
        print(f"p={len(sockets)} 4 B all-reduce: C++ client {cpp:.1f} us, Python {python:.1f} us, "
              f"overhead {python - cpp:+.1f} us")


if __name__ == "__main__":
    main()
