#!/usr/bin/python3
"""DDP step time over the "gradsync" torch backend, and over it with gradsync's bf16 wire hook,
against torch's own gloo backend, in the same processes, alternating: a model whose gradients are
41 MB of f32 (communication dominates on a LAN), the same inputs on all. Run one process per
rank, each beside its host's daemon:

    deploy/lan.sh run --hosts 4 -- /usr/bin/python3 bench/ddp_step.py --store /tmp/ddp-store
    build/bin/gradsync local --workers 4 -- bench/ddp_step.py --launch   # loopback, one host

Rank 0 prints the median step time of each and its ratio to gloo's.
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import gradsync.torch  # noqa: F401 (registers the backend)

WIDTH = 3200  # one 3200 x 3200 layer: 10.2 M parameters, 41 MB of gradients


def step_times(ddp, optimizer, inputs, steps, communicate=True):
    times = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        with contextlib.nullcontext() if communicate else ddp.no_sync():
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
    # The last: the step without its all-reduce (DDP's no_sync), the floor that the compute of
    # all ranks on this host's cores sets.
    for name, group, hook in [("gradsync", dist.group.WORLD, None),
                              ("gradsync, bf16 wire", dist.group.WORLD,
                               gradsync.torch.bf16_wire_hook),
                              ("gloo", gloo, None),
                              ("no communication", gloo, None)]:
        torch.manual_seed(0)
        model = torch.nn.Linear(WIDTH, WIDTH)
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
        if hook is not None:
            ddp.register_comm_hook(group, hook)
        runs[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=1e-3), [])
        step_times(runs[name][0], runs[name][1], inputs, 2)  # warm-up
    for _ in range(rounds):
        for name, (ddp, optimizer, times) in runs.items():
            times.extend(step_times(ddp, optimizer, inputs, steps, name != "no communication"))
    if rank == 0:
        medians = {name: statistics.median(times) for name, (_, _, times) in runs.items()}
        gradient_mb = WIDTH * (WIDTH + 1) * 4 / 1e6
        print(f"DDP step, {size} ranks, {gradient_mb:.0f} MB of f32 gradients, "
              f"{rounds * steps} steps each, alternating:")
        for name, median in medians.items():
            print(f"  {name:20s} {1000 * median:8.1f} ms  {median / medians['gloo']:.2f} x gloo")
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
