"""One rank of the torch backend tests, run as a process of its own (as torchrun would):
    torch_rank.py RANK WORLD_SIZE INIT_FILE
with GRADSYNC_SOCKETS set. Checks every collective of the "gradsync" backend against its closed
form, then trains the same model with DDP over gradsync, over gloo, and over gloo with gradsync's
average hook, and checks that all give the same parameters, the same on every rank; and with
gradsync's bf16 and f16 hooks, parameters close to those and the same on every rank. Prints "ok"
when all holds."""
import math
import sys

import torch
import torch.distributed as dist

import gradsync
import gradsync.torch  # noqa: F401 (registers the backend)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def collectives(rank, size):
    for op, expected in [(dist.ReduceOp.SUM, sum(range(1, size + 1))),
                         (dist.ReduceOp.AVG, (size + 1) / 2), (dist.ReduceOp.MIN, 1),
                         (dist.ReduceOp.MAX, size), (dist.ReduceOp.PRODUCT, math.factorial(size))]:
        tensor = torch.full((5,), float(rank + 1))
        dist.all_reduce(tensor, op=op)
        check(torch.equal(tensor, torch.full((5,), float(expected))), f"all_reduce {op}: {tensor}")
    work = dist.all_reduce(torch.ones(3, dtype=torch.bfloat16), async_op=True)
    work.wait()
    tensor = torch.arange(4.0) + rank
    dist.broadcast(tensor, src=size - 1)
    check(torch.equal(tensor, torch.arange(4.0) + size - 1), f"broadcast: {tensor}")
    gathered = [torch.zeros(3, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(gathered, torch.full((3,), rank, dtype=torch.int64))
    check(all(torch.equal(g, torch.full((3,), r)) for r, g in enumerate(gathered)),
          f"all_gather: {gathered}")
    output = torch.zeros(2)
    dist.reduce_scatter(output, [torch.full((2,), float(r + rank)) for r in range(size)])
    check(torch.equal(output, torch.full((2,), float(size * rank + sum(range(size))))),
          f"reduce_scatter: {output}")
    sent = torch.arange(size * 2, dtype=torch.float32) + 100 * rank
    received = torch.zeros(size * 2)
    dist.all_to_all_single(received, sent)
    expected = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r
                          for r in range(size)])
    check(torch.equal(received, expected), f"all_to_all_single: {received}")
    dist.barrier()
    # A failed op raises from wait(), as gloo's do, instead of leaving the tensor as it was.
    for async_op in (False, True):
        try:
            work = dist.all_reduce(torch.ones(rank + 1), async_op=async_op)
            if async_op:
                work.wait()
        except gradsync.Mismatch:
            continue
        raise AssertionError(f"an all_reduce of different sizes did not raise (async {async_op})")


def train(process_group, rank, steps=5, hook_state=None, hook=gradsync.torch.allreduce_avg_hook):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=process_group)
    if hook_state is not None:
        ddp.register_comm_hook(hook_state, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1000 + rank)
    for _ in range(steps):
        inputs = torch.randn(16, 20, generator=data)
        loss = ddp(inputs).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return torch.cat([p.detach().view(-1) for p in model.parameters()])


def main():
    rank, size, init_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gradsync", init_method="file://" + init_file, rank=rank,
                            world_size=size)
    collectives(rank, size)
    over_gradsync = train(dist.group.WORLD, rank)
    gloo = dist.new_group(backend="gloo")
    over_gloo = train(gloo, rank)
    # The gradients of DDP over gloo, averaged by gradsync's hook instead.
    over_hook = train(gloo, rank, hook_state=dist.distributed_c10d._get_default_group())
    check(torch.allclose(over_hook, over_gloo, rtol=1e-5, atol=1e-6),
          "DDP with gradsync's average hook differs from DDP over gloo")
    check(torch.allclose(over_gradsync, over_gloo, rtol=1e-5, atol=1e-6),
          f"DDP over gradsync and over gloo differ by "
          f"{(over_gradsync - over_gloo).abs().max().item()}")
    results = {"DDP over gradsync": over_gradsync}
    # Gradients sent in 16 bits, added in f32: close to f32 throughout.
    for hook in (gradsync.torch.bf16_wire_hook, gradsync.torch.f16_wire_hook):
        compressed = train(gloo, rank, hook_state=dist.distributed_c10d._get_default_group(),
                           hook=hook)
        check(torch.allclose(compressed, over_gloo, rtol=1e-2, atol=1e-3),
              f"DDP with {hook.__name__} differs from f32 DDP over gloo by "
              f"{(compressed - over_gloo).abs().max().item()}")
        results[hook.__name__] = compressed
    for what, parameters in results.items():
        everyone = [torch.zeros_like(parameters) for _ in range(size)]
        dist.all_gather(everyone, parameters)
        check(all(torch.equal(p, parameters) for p in everyone),
              f"ranks hold different parameters after {what}")
    dist.destroy_process_group()
    print("ok")


if __name__ == "__main__":
    main()
