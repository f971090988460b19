#!/usr/bin/python3
"""DDP step time over the "gradsync" torch backend against torch's own gloo backend, in the same
processes, alternating: a model whose gradients are 41 MB of f32 (communication dominates on a
LAN), the same inputs on both. Run one process per rank, each beside its host's daemon:

    deploy/lan.sh run --hosts 4 -- /usr/bin/python3 bench/ddp_step.py --store /tmp/ddp-store
    build/bin/gradsync local --workers 4 -- bench/ddp_step.py --launch   # loopback, one host

Rank 0 prints the median step time of each and their ratio.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import gradsync.torch  # noqa: F401 (registers the backend)

WIDTH = 3200  # one 3200 x 3200 layer: 10.2 M parameters, 41 MB of gradients


def step_times(ddp, optimizer, inputs, steps):
    times = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        loss = ddp(inputs).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return times


def rank_main(rank, size, store, rounds, steps):
    dist.init_process_group("gradsync", init_method="file://" + store, rank=rank,
                            world_size=size)
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    inputs = torch.randn(8, WIDTH)
    runs = {}
    for name, group in [("gradsync", dist.group.WORLD), ("gloo", gloo)]:
        torch.manual_seed(0)
        model = torch.nn.Linear(WIDTH, WIDTH)
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
        runs[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=1e-3), [])
        step_times(runs[name][0], runs[name][1], inputs, 2)  # warm-up
    for _ in range(rounds):
        for name, (ddp, optimizer, times) in runs.items():
            times.extend(step_times(ddp, optimizer, inputs, steps))
    if rank == 0:
        medians = {name: statistics.median(times) for name, (_, _, times) in runs.items()}
        gradient_mb = WIDTH * (WIDTH + 1) * 4 / 1e6
        print(f"DDP step, {size} ranks, {gradient_mb:.0f} MB of f32 gradients, "
              f"{rounds * steps} steps each, alternating:")
        for name, median in medians.items():
            print(f"  {name:9s} {1000 * median:8.1f} ms")
        print(f"  gradsync / gloo: {medians['gradsync'] / medians['gloo']:.2f}")
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="a file path every rank sees, not yet there")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--launch", action="store_true",
                        help="start one rank per GRADSYNC_SOCKETS entry on this host")
    args = parser.parse_args()
    if args.launch:
        sockets = [s for s in os.environ["GRADSYNC_SOCKETS"].split(",") if s]
        store = f"/tmp/gradsync-ddp-step-{os.getpid()}"
        ranks = [subprocess.Popen([sys.executable, __file__, "--store", store, "--rounds",
                                   str(args.rounds), "--steps", str(args.steps)],
                                  env=dict(os.environ, GRADSYNC_SOCKET=socket,
                                           GLOO_SOCKET_IFNAME="lo"))
                 for socket in sockets]
        status = max(rank.wait() for rank in ranks)
        if os.path.exists(store):
            os.remove(store)
        sys.exit(status)
    client = gradsync.Client()
    rank, size = client.rank, client.world_size
    del client  # the backend opens its own connection: one submitting client per rank
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")  # deploy/lan.sh's hosts
    rank_main(rank, size, args.store, args.rounds, args.steps)


if __name__ == "__main__":
    main()
