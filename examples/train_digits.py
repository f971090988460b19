#!/usr/bin/python3
"""Data-parallel training over gradsync: an MLP learns the handwritten digits that scikit-learn
ships (8x8 images, 1797 of them), with torch's DistributedDataParallel over the "gradsync"
backend, one process per rank, each on its slice of every global batch.

    build/bin/gradsync local --workers 4 -- /usr/bin/python3 examples/train_digits.py

One process per host, beside that host's daemon (as deploy/lan.sh runs a command on every
emulated host), each takes its daemon's rank and meets the others through a file they all see:

    deploy/lan.sh run --hosts 4 -- /usr/bin/python3 examples/train_digits.py --store /tmp/digits

Under a launcher that sets torch's conventions (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT; torchrun does, though Debian 12's torch 1.13 torchrun fails on Python 3.11 before
it starts anything), each process is the rank it is told and meets the others at MASTER_ADDR.

It prints the loss per epoch and the test accuracy; after every step it checks that every rank
holds bitwise the same parameters, and at the end that the loss curve is the one a single process
gets from the same global batches. With --wire bf16 (or f16) the gradients travel in 16 bits
through gradsync's DDP hook, added in f32: the curve then only approaches the single process's,
and the check is that the test accuracy stays within half a point of the single process's.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from typing import Iterator, Optional

import torch
import torch.distributed as dist
# The `type: ignore`s below mark where the libraries' own types fall short: scikit-learn has none,
# and torch 1.13 leaves a few functions untyped and ReduceOp.AVG out of its stub.
from sklearn.datasets import load_digits  # type: ignore[import]

import gradsync.torch  # noqa: F401 (registers the "gradsync" backend)

GLOBAL_BATCH = 64

# Images and their labels.
Split = tuple[torch.Tensor, torch.Tensor]


def data() -> tuple[Split, Split]:
    """The digits, scaled to [0, 1], split 80/20 in a fixed order."""
    digits = load_digits()
    images = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    images, labels = images[order], labels[order]
    split = int(0.8 * len(labels))
    return (images[:split], labels[:split]), (images[split:], labels[split:])


def model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def global_batches(train: Split, epoch: int) -> Iterator[Split]:
    """The epoch's global batches, the same on every rank (a seed per epoch)."""
    images, labels = train
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1 + epoch))
    for start in range(0, len(labels) - GLOBAL_BATCH + 1, GLOBAL_BATCH):
        chosen = order[start:start + GLOBAL_BATCH]
        yield images[chosen], labels[chosen]


def accuracy(network: torch.nn.Module, test: Split) -> float:
    images, labels = test
    with torch.no_grad():
        predicted: torch.Tensor = network(images).argmax(dim=1)
    return (predicted == labels).float().mean().item()


def train_one_process(train: Split, epochs: int,
                      lr: float) -> tuple[list[float], torch.nn.Module]:
    """The reference: one process, whole global batches. Returns the loss per epoch and the
    trained network."""
    network = model()
    optimizer = torch.optim.SGD(network.parameters(), lr=lr)
    losses = []
    for epoch in range(epochs):
        total = 0.0
        steps = 0
        for images, labels in global_batches(train, epoch):
            loss = torch.nn.functional.cross_entropy(network(images), labels)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += loss.item()
            steps += 1
        losses.append(total / steps)
    return losses, network


def same_parameters_everywhere(network: torch.nn.Module, size: int) -> bool:
    flat = torch.cat([p.detach().view(-1) for p in network.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)  # type: ignore[no-untyped-call]
    return all(torch.equal(other, flat) for other in everyone)


WIRE_HOOKS = {"bf16": gradsync.torch.bf16_wire_hook, "f16": gradsync.torch.f16_wire_hook}


def rank_main(rank: int, size: int, init_method: str, epochs: int, lr: float,
              wire: Optional[str] = None) -> None:
    dist.init_process_group("gradsync", init_method=init_method, rank=rank, world_size=size)
    train, test = data()
    ddp = torch.nn.parallel.DistributedDataParallel(model())
    if wire is not None:
        ddp.register_comm_hook(dist.group.WORLD, WIRE_HOOKS[wire])  # type: ignore[operator]
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    share = GLOBAL_BATCH // size
    losses = []
    for epoch in range(epochs):
        total = torch.zeros(1)
        steps = 0
        for images, labels in global_batches(train, epoch):
            mine = slice(rank * share, (rank + 1) * share)
            loss = torch.nn.functional.cross_entropy(ddp(images[mine]), labels[mine])
            optimizer.zero_grad()
            # DDP averages the gradients over the ranks: the global batch's.
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            if not same_parameters_everywhere(ddp.module, size):
                raise SystemExit(f"rank {rank}: ranks hold different parameters after a step")
            total += loss.detach()
            steps += 1
        # The global batches' mean loss.
        dist.all_reduce(total, op=dist.ReduceOp.AVG)  # type: ignore[no-untyped-call,attr-defined]
        losses.append(total.item() / steps)
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {losses[-1]:.4f}", flush=True)
    if rank == 0:
        trained = 100 * accuracy(ddp.module, test)
        sent = f"gradients sent as {wire}" if wire else "f32 gradients"
        print(f"test accuracy {trained:.1f}% after {epochs} epochs on {size} ranks, {sent}; "
              f"every rank held the same parameters after every step")
        reference, network = train_one_process(train, epochs, lr)
        worst = max(abs(a - b) for a, b in zip(losses, reference))
        print(f"loss curve against one process over the same global batches: largest "
              f"difference {worst:.2e}")
        if wire is None and worst > 1e-4:
            raise SystemExit("the loss curve differs from the single process's")
        alone = 100 * accuracy(network, test)
        print(f"test accuracy of the single process: {alone:.1f}%")
        if wire is not None and abs(trained - alone) > 0.5:
            raise SystemExit(f"with {wire} on the wire the accuracy is more than half a point "
                             f"from the single process's")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--rank", type=int, help="run as this rank (the launcher sets it)")
    parser.add_argument("--init-file", help=argparse.SUPPRESS)
    parser.add_argument("--store", help="one process per host: a file path every host sees, not "
                                        "yet there, where the ranks meet")
    parser.add_argument("--wire", choices=sorted(WIRE_HOOKS),
                        help="send the gradients in 16 bits (gradsync's DDP hook)")
    args = parser.parse_args()
    sockets = [s for s in os.environ.get("GRADSYNC_SOCKETS", "").split(",") if s]
    if not sockets:
        raise SystemExit("run under `gradsync local --workers N`, which sets GRADSYNC_SOCKETS")
    if GLOBAL_BATCH % len(sockets) != 0:
        raise SystemExit(f"{len(sockets)} ranks do not divide the global batch of {GLOBAL_BATCH}")
    if args.store is not None:  # this host's daemon says which rank this process is
        client = gradsync.Client()
        rank, size = client.rank, client.world_size
        del client  # the backend opens its own connection: one submitting client per rank
        rank_main(rank, size, "file://" + args.store, args.epochs, args.lr, args.wire)
        return
    if args.rank is not None:
        rank_main(args.rank, len(sockets), "file://" + args.init_file, args.epochs, args.lr,
                  args.wire)
        return
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # a launcher made this a rank
        rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://",
                  args.epochs, args.lr, args.wire)
        return
    # The launcher: one process per daemon, as torchrun starts one per rank.
    with tempfile.TemporaryDirectory() as directory:
        init_file = os.path.join(directory, "init")
        ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(rank), "--init-file",
                                   init_file, "--epochs", str(args.epochs), "--lr",
                                   str(args.lr)] + (["--wire", args.wire] if args.wire else []),
                                  env=dict(os.environ, LOCAL_RANK=str(rank), RANK=str(rank)))
                 for rank in range(len(sockets))]
        failed = [rank for rank, process in enumerate(ranks) if process.wait() != 0]
    if failed:
        raise SystemExit(f"ranks {failed} failed")


if __name__ == "__main__":
    main()
