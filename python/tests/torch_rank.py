"""One rank of the torch backend tests, run as a process of its own (as torchrun would):
    torch_rank.py RANK WORLD_SIZE INIT_FILE [SCENARIO]
with GRADSYNC_SOCKETS set. Prints "ok" when the scenario's checks all hold. The scenarios:
  everything (the default): every collective of the "gradsync" backend against its closed form,
    point-to-point messages (send, recv, isend, irecv, batch_isend_irecv), then the same model trained with DDP over gradsync, over gloo, and over gloo with gradsync's
    average hook, which must give the same parameters, the same on every rank; and with gradsync's
    bf16 and f16 hooks, parameters close to those and the same on every rank.
  groups: a new group of every rank beside the default one, their collectives interleaved.
  groups_in_flight: as groups, with the ops of both in flight at once (async_op).
  subgroups: groups of some ranks (new_group(ranks)): the last rank alone, pairs of neighbours
    at once, ranks 1 and 2; their collectives by group rank, and a send from each group's first
    member to its last, the others not involved.
  reinit: destroy_process_group, then init_process_group again in the same process (a store of
    its own: INIT_FILE with ".again"), and collectives on the new one."""
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
    uneven_all_to_all(rank, size)
    dist.barrier()
    every_dtype(rank, size)
    non_contiguous(rank, size)
    rooted(rank, size)
    # A failed op raises from wait(), as gloo's do, instead of leaving the tensor as it was.
    for async_op in (False, True):
        try:
            work = dist.all_reduce(torch.ones(rank + 1), async_op=async_op)
            if async_op:
                work.wait()
        except gradsync.Mismatch:
            continue
        raise AssertionError(f"an all_reduce of different sizes did not raise (async {async_op})")


def uneven_all_to_all(rank, size):
    """all_to_all_single with splits (rows of 3 values: rank r sends rank j r + j + 1 rows), and
    all_to_all's list form, whose tensors differ in length."""
    rows = [rank + j + 1 for j in range(size)]
    sent = torch.cat([torch.full((count, 3), float(10 * rank + j)) for j, count in enumerate(rows)])
    received = torch.zeros(sum(r + rank + 1 for r in range(size)), 3)
    dist.all_to_all_single(received, sent, output_split_sizes=[r + rank + 1 for r in range(size)],
                           input_split_sizes=rows)
    expected = torch.cat([torch.full((r + rank + 1, 3), float(10 * r + rank))
                          for r in range(size)])
    check(torch.equal(received, expected), f"all_to_all_single with splits: {received}")
    inputs = [torch.full((j + 1,), rank * 100 + j, dtype=torch.int16) for j in range(size)]
    outputs = [torch.zeros(rank + 1, dtype=torch.int16) for _ in range(size)]
    dist.all_to_all(outputs, inputs)
    check(all(torch.equal(output, torch.full((rank + 1,), r * 100 + rank, dtype=torch.int16))
              for r, output in enumerate(outputs)), f"all_to_all: {outputs}")


def every_dtype(rank, size):
    """The dtypes and operators beyond the floats' sum: int8 moved as bytes (torch's own
    test_broadcast), bool with torch's semantics, the bitwise operators and complex numbers."""
    tensor = torch.arange(-4, 4, dtype=torch.int8) * (rank + 1)
    dist.broadcast(tensor, src=size - 1)
    check(torch.equal(tensor, torch.arange(-4, 4, dtype=torch.int8) * size), f"int8: {tensor}")
    flags = torch.tensor([rank == 0, True, False, rank % 2 == 1])
    anyone = flags.clone()
    dist.all_reduce(anyone)  # sum of bools: "or"
    check(torch.equal(anyone, torch.tensor([True, True, False, size > 1])), f"bool sum: {anyone}")
    everyone = flags.clone()
    dist.all_reduce(everyone, op=dist.ReduceOp.PRODUCT)  # "and"
    check(torch.equal(everyone, torch.tensor([size == 1, True, False, False])),
          f"bool product: {everyone}")
    bits = torch.tensor([0b0110 << rank, -1, 1 << rank], dtype=torch.int16)
    for op, expected in [(dist.ReduceOp.BOR, [_or(0b0110 << r for r in range(size)), -1,
                                              (1 << size) - 1]),
                         (dist.ReduceOp.BXOR, [_xor(0b0110 << r for r in range(size)),
                                               -1 if size % 2 else 0, (1 << size) - 1])]:
        result = bits.clone()
        dist.all_reduce(result, op=op)
        check(result.tolist() == expected, f"int16 {op}: {result}")
    number = torch.tensor([complex(rank + 1, -rank)], dtype=torch.complex64)
    dist.all_reduce(number)
    check(number.item() == complex(size * (size + 1) / 2, -size * (size - 1) / 2),
          f"complex64 sum: {number}")


def rooted(rank, size):
    """reduce, gather and scatter, from the last rank and from rank 0, and the object forms
    that torch builds on them."""
    for root in (size - 1, 0):
        tensor = torch.full((3,), float(rank + 1))
        dist.reduce(tensor, dst=root)
        expected = float(size * (size + 1) // 2) if rank == root else float(rank + 1)
        check(torch.equal(tensor, torch.full((3,), expected)), f"reduce to {root}: {tensor}")
        gathered = [torch.zeros(2, dtype=torch.int32) for _ in range(size)] if rank == root \
            else None
        dist.gather(torch.full((2,), rank, dtype=torch.int32), gathered, dst=root)
        if rank == root:
            check(all(torch.equal(g, torch.full((2,), r, dtype=torch.int32))
                      for r, g in enumerate(gathered)), f"gather to {root}: {gathered}")
        received = torch.zeros(2, 2)
        parts = [torch.full((2, 2), float(10 * r)) for r in range(size)] if rank == root \
            else None
        dist.scatter(received, parts, src=root)
        check(torch.equal(received, torch.full((2, 2), float(10 * rank))),
              f"scatter from {root}: {received}")
    objects = [None] * size if rank == 0 else None
    dist.gather_object({"rank": rank, "name": "x" * rank}, objects, dst=0)
    if rank == 0:
        check(objects == [{"rank": r, "name": "x" * r} for r in range(size)],
              f"gather_object: {objects}")
    mine = [None]
    dist.scatter_object_list(mine, [f"to {r}" for r in range(size)] if rank == 0 else None,
                             src=0)
    check(mine == [f"to {rank}"], f"scatter_object_list: {mine}")


def non_contiguous(rank, size):
    """Transposed and strided views take their results in place (gloo mis-reduces a strided
    slice); an expanded one, whose elements share memory, cannot take one and is refused."""
    matrix = (torch.arange(6.0).reshape(2, 3) + rank).t()
    dist.all_reduce(matrix)
    expected = sum(torch.arange(6.0).reshape(2, 3) + r for r in range(size)).t()
    check(torch.equal(matrix, expected), f"transposed all_reduce: {matrix}")
    rows = torch.zeros(4, 2)
    rows[:, 0] = rank + 1
    dist.all_reduce(rows[::2, 0])
    check(rows[:, 0].tolist() == [size * (size + 1) / 2, rank + 1] * 2, f"strided: {rows}")
    check(rows[:, 1].tolist() == [0.0] * 4, f"the other column changed: {rows}")
    try:
        dist.all_reduce(torch.ones(1).expand(3))
    except TypeError as error:
        check("share memory" in str(error), f"expanded: {error}")
    else:
        raise AssertionError("an all_reduce into an expanded tensor did not raise")


def _or(values):
    result = 0
    for value in values:
        result |= value
    return result


def _xor(values):
    result = 0
    for value in values:
        result ^= value
    return result


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


def init(init_file, rank, size):
    dist.init_process_group("gradsync", init_method="file://" + init_file, rank=rank,
                            world_size=size)


def point_to_point(rank, size):
    """send and recv between neighbours; a ring with batch_isend_irecv posted both ways round;
    isend and irecv of two tags received in the other order; a strided tensor; recv with no src
    refused."""
    right, left = (rank + 1) % size, (rank - 1) % size
    if rank % 2 == 0:
        dist.send(torch.full((3,), float(rank)), dst=right)
    else:
        got = torch.zeros(3)
        dist.recv(got, src=left)
        check(torch.equal(got, torch.full((3,), float(left))), f"recv from {left}: {got}")
    for sends_first in (True, False):
        out = torch.arange(100_000, dtype=torch.int8) + rank
        got = torch.zeros(100_000, dtype=torch.int8)
        ops = [dist.P2POp(dist.isend, out, right), dist.P2POp(dist.irecv, got, left)]
        for work in dist.batch_isend_irecv(ops if sends_first else ops[::-1]):
            work.wait()
        check(torch.equal(got, torch.arange(100_000, dtype=torch.int8) + left),
              f"the ring's bytes from {left} (sends first: {sends_first})")
    works = [dist.isend(torch.full((2,), 10.0 * rank + tag), dst=right, tag=tag) for tag in (1, 2)]
    by_tag = {tag: torch.zeros(2) for tag in (2, 1)}
    works += [dist.irecv(tensor, src=left, tag=tag) for tag, tensor in by_tag.items()]
    for work in works:
        work.wait()
    for tag, tensor in by_tag.items():
        check(torch.equal(tensor, torch.full((2,), 10.0 * left + tag)), f"tag {tag}: {tensor}")
    strided = torch.zeros(4, 6)[:, ::2]
    receive = dist.irecv(strided, src=left)
    dist.send(torch.arange(12.0).reshape(4, 3) * (rank + 1), dst=right)
    receive.wait()
    check(torch.equal(strided, torch.arange(12.0).reshape(4, 3) * (left + 1)),
          f"a strided recv: {strided}")
    try:
        dist.recv(torch.zeros(1))
        check(False, "recv from any source succeeded")
    except ValueError as error:
        check("give recv a src" in str(error), f"recv from any source: {error}")


def everything(rank, size, init_file):
    init(init_file, rank, size)
    collectives(rank, size)
    point_to_point(rank, size)
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


def each_group_sums_its_own(rank, size, group, offset):
    """An all_reduce on `group` of values no other group's op sums: rank r gives offset + r + 1."""
    tensor = torch.full((4,), float(offset + rank + 1))
    dist.all_reduce(tensor, group=group)
    expected = size * offset + size * (size + 1) // 2
    check(torch.equal(tensor, torch.full((4,), float(expected))),
          f"all_reduce of offset {offset}: {tensor}, not {expected}")


def groups(rank, size, init_file):
    init(init_file, rank, size)
    world = dist.distributed_c10d._get_default_group()
    other = dist.new_group()
    check(other.client.job == world.client.job and other.client.stream != world.client.stream,
          f"the new group's client is stream {other.client.stream!r} of job "
          f"{other.client.job!r}; the default group's {world.client.stream!r} of "
          f"{world.client.job!r}")
    for round in range(3):
        each_group_sums_its_own(rank, size, None, 1000 * round)
        each_group_sums_its_own(rank, size, other, 1000 * round + 100)
        tensor = torch.arange(3.0) + 10 * rank
        root = round % size
        dist.broadcast(tensor, src=root)
        check(torch.equal(tensor, torch.arange(3.0) + 10 * root), f"broadcast: {tensor}")
        gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(size)]
        dist.all_gather(gathered, torch.full((2,), 10 * rank + round, dtype=torch.int64),
                        group=other)
        check(all(torch.equal(g, torch.full((2,), 10 * r + round))
                  for r, g in enumerate(gathered)), f"all_gather: {gathered}")
    dist.destroy_process_group()


def groups_in_flight(rank, size, init_file):
    init(init_file, rank, size)
    other = dist.new_group()
    # Both groups' ops in flight at once, submitted in the same order on every rank.
    tensors, works = [], []
    for index in range(4):
        for group, offset in ((None, 0), (other, 100)):
            tensor = torch.full((1000,), float(offset + 10 * index + rank + 1))
            tensors.append((tensor, size * (offset + 10 * index) + size * (size + 1) // 2))
            works.append(dist.all_reduce(tensor, group=group, async_op=True))
    for work in works:
        work.wait()
    for tensor, expected in tensors:
        check(torch.equal(tensor, torch.full((1000,), float(expected))),
              f"async all_reduce: {tensor[:3]}..., not {expected}")
    dist.destroy_process_group()


def reinit(rank, size, init_file):
    init(init_file, rank, size)
    first = dist.distributed_c10d._get_default_group()
    first_job = first.client.job
    first_other = dist.new_group()
    each_group_sums_its_own(rank, size, None, 0)
    each_group_sums_its_own(rank, size, first_other, 100)
    dist.destroy_process_group()
    init(init_file + ".again", rank, size)
    second = dist.distributed_c10d._get_default_group()
    check(second.client.job != first_job, f"the second init's job is the first's: {first_job!r}")
    second_other = dist.new_group()
    for round in range(3):
        each_group_sums_its_own(rank, size, None, 1000 * round)
        each_group_sums_its_own(rank, size, second_other, 1000 * round + 100)
        tensor = torch.arange(3.0) + 10 * rank
        dist.broadcast(tensor, src=size - 1)
        check(torch.equal(tensor, torch.arange(3.0) + 10 * (size - 1)), f"broadcast: {tensor}")
    # The new init closed the first job's groups.
    for group in (first, first_other):
        try:
            group.client.allreduce(torch.ones(1))
        except gradsync.InvalidArgument as error:
            check("closed" in str(error), f"an op of the first job's group: {error}")
            continue
        raise AssertionError("an op of the first job's group ran after the second init")
    dist.destroy_process_group()


def subgroup_collectives(rank, members, group):
    """All-reduce, all-gather, broadcast and reduce over `group`, whose members are `members`
    (global ranks, ascending), as member `rank`."""
    tensor = torch.full((5,), float(rank + 1))
    dist.all_reduce(tensor, group=group)
    total = float(sum(member + 1 for member in members))
    check(torch.equal(tensor, torch.full((5,), total)), f"all_reduce over {members}: {tensor}")
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in members]
    dist.all_gather(gathered, torch.full((2,), 10 * rank, dtype=torch.int64), group=group)
    check(all(torch.equal(g, torch.full((2,), 10 * member))
              for member, g in zip(members, gathered)), f"all_gather over {members}: {gathered}")
    tensor = torch.arange(3.0) + 10 * rank
    dist.broadcast(tensor, src=members[-1], group=group)
    check(torch.equal(tensor, torch.arange(3.0) + 10 * members[-1]),
          f"broadcast from {members[-1]} over {members}: {tensor}")
    tensor = torch.full((4,), float(rank + 1))
    dist.reduce(tensor, dst=members[0], group=group)
    if rank == members[0]:
        check(torch.equal(tensor, torch.full((4,), total)), f"reduce over {members}: {tensor}")
    if len(members) > 1:
        # torch names the peer by its global rank; the group's first member sends to its last.
        if rank == members[0]:
            dist.send(torch.full((2,), 7.0 * rank), dst=members[-1], group=group)
        elif rank == members[-1]:
            got = torch.zeros(2)
            dist.recv(got, src=members[0], group=group)
            check(torch.equal(got, torch.full((2,), 7.0 * members[0])),
                  f"recv over {members}: {got}")


def subgroups(rank, size, init_file):
    init(init_file, rank, size)
    # Every process makes every group, in the same order, as torch wants.
    alone = dist.new_group([size - 1])
    neighbours = [list(range(first, min(first + 2, size))) for first in range(0, size, 2)]
    pairs = [dist.new_group(members) for members in neighbours]
    middle = dist.new_group([1, 2]) if size >= 4 else None
    if rank == size - 1:
        subgroup_collectives(rank, [rank], alone)
    for members, group in zip(neighbours, pairs):
        if rank in members:
            subgroup_collectives(rank, members, group)
    if middle is not None and rank in (1, 2):
        subgroup_collectives(rank, [1, 2], middle)
    each_group_sums_its_own(rank, size, None, 0)
    dist.destroy_process_group()


SCENARIOS = {"everything": everything, "groups": groups, "groups_in_flight": groups_in_flight,
             "reinit": reinit, "subgroups": subgroups}


def main():
    rank, size, init_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    scenario = sys.argv[4] if len(sys.argv) > 4 else "everything"
    SCENARIOS[scenario](rank, size, init_file)
    print("ok")


if __name__ == "__main__":
    main()
