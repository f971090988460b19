"""torch.distributed over gradsync: a process-group backend named "gradsync".

    import torch.distributed as dist
    import gradsync.torch  # registers the backend
    dist.init_process_group("gradsync")            # RANK, WORLD_SIZE, MASTER_ADDR/PORT as for gloo
    model = torch.nn.parallel.DistributedDataParallel(model)   # unchanged

Each process talks to its host's daemon (GRADSYNC_SOCKET, else GRADSYNC_SOCKETS[LOCAL_RANK]);
torch's rank must be the daemon's rank, which a clear error says otherwise. Tensors go through
the daemon's shared memory; the ops of one process run in the order it calls them, each a torch
Future completed from one thread per process group. Supported: all_reduce and reduce (sum, avg,
min, max, product, band, bor, bxor), broadcast, all_gather, gather, scatter, reduce_scatter,
all_to_all_single with any splits, all_to_all, barrier, send and recv from a given rank (with them
isend, irecv and batch_isend_irecv), and what DDP calls of them (with gather and scatter,
gather_object and scatter_object_list too), on every dtype of CPU tensors, contiguous or not.

Each init_process_group is a gradsync job of its own, named through torch's store (rank 0 makes
the name, every rank reads it), and each process group of it (new_group of every rank) an op
stream of that job: groups' ops never pair with each other's, nor with another run's
(docs/clients.md, "Jobs").
"""
import atexit
import collections
import os
import queue
import threading
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Callable, Generic, Optional, Sequence, TypeVar

import torch
import torch.distributed as dist
# GradBucket as torch.distributed has it: DDP refuses a hook whose annotations are not its own.
from torch._C._distributed_c10d import GradBucket
from torch.distributed.distributed_c10d import (
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ProcessGroup,
    ReduceOp,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
    Store,
    Work,
)

import gradsync
from gradsync._typing import ReduceOpName, WireName

# No `from __future__ import annotations` here: DDP compares a hook's annotations with torch's
# classes. A name only the type checker knows is quoted (torch's stub says AllGatherOptions for
# torch's AllgatherOptions).
if TYPE_CHECKING:
    from torch._C._distributed_c10d import AllGatherOptions

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")  # what a torch Work's future holds once the op is done
_Tensors = list[torch.Tensor]

# Keyed by object: torch 1.13's stub gives the ops no type.
_REDUCE_OPS: dict[object, ReduceOpName] = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",  # type: ignore[attr-defined]  # torch 1.13's stub lacks AVG
    dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max", dist.ReduceOp.PRODUCT: "prod",
    dist.ReduceOp.BAND: "band", dist.ReduceOp.BOR: "bor", dist.ReduceOp.BXOR: "bxor",
}


def _reduce_op(op: ReduceOp) -> ReduceOpName:
    """gradsync's name of torch's reduce op. Raises ValueError for one gradsync has not."""
    for known, name in _REDUCE_OPS.items():
        if op == known:
            return name
    raise ValueError("gradsync reduces with sum, avg, min, max, product, band, bor and bxor; not "
                     + str(op))


def _single(items: Sequence[_Item], what: str) -> _Item:
    """The one tensor (or list) of a collective's argument. Raises ValueError for more or none."""
    if len(items) != 1:
        raise ValueError(f"gradsync's {what} takes one tensor per process, got {len(items)}")
    return items[0]


class _Work(Work, Generic[_Result]):
    """A torch Work over a torch future whose wait() raises the op's error. (Torch 1.13's
    _create_work_from_future makes one whose wait() returns quietly on a failed future: a failed
    all_reduce, and DDP's gradient sync, would carry on with whatever the tensor held.)"""

    def __init__(self, future: torch.futures.Future[_Result]) -> None:
        super().__init__()
        self._future = future

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        """Blocks until the op is done; raises the gradsync.Error (or other exception) it failed
        with."""
        self._future.wait()
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def get_future(self) -> torch.futures.Future[_Result]:
        return self._future


class _MessageWork(Work):
    """A send's or a receive's torch Work, waited for on the thread that waits: unlike a
    collective's, it may complete before ops submitted earlier (a receive posted first in a ring
    completes after the send posted next), so it does not wait in the completer's line."""

    def __init__(self, work: gradsync.Work, tensors: _Tensors) -> None:
        super().__init__()
        self._work = work
        self._tensors = tensors

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        """Blocks until the message is done; raises the gradsync.Error it failed with."""
        self._work.wait()
        return True

    def is_completed(self) -> bool:
        return self._work.done()

    def get_future(self) -> torch.futures.Future[_Tensors]:
        future: torch.futures.Future[_Tensors] = torch.futures.Future()

        def complete(work: gradsync.Work) -> None:
            error = work.exception()
            if error is not None:
                future.set_exception(error)  # type: ignore[arg-type]  # torch 1.13's stub: T
            else:
                future.set_result(self._tensors)

        self._work.add_done_callback(complete)
        return future


class _Completer:
    """One thread that waits for a process group's ops in the order they were submitted (the
    order they complete in: one op stream) and completes their torch futures."""

    def __init__(self, client: gradsync.Client) -> None:
        self._client = client
        # Each op's completion, in order; None ends the thread.
        self._pending: queue.SimpleQueue[Optional[Callable[[], None]]] = queue.SimpleQueue()
        # A Work that C++ (DDP's reducer) holds has lost its Python half once Python holds no
        # reference to it, and its wait() would then block forever in torch's base class: the
        # last works are kept, far more than the buckets that DDP waits for in one step.
        self._recent: collections.deque[Work] = collections.deque(maxlen=4096)
        self._thread = threading.Thread(target=self._run, name="gradsync-completer", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def close(self) -> None:
        """Ends the thread before the interpreter ends: a thread that comes back from the client
        library while Python finalizes is killed on its way (std::terminate, exit status 1)."""
        self._pending.put(None)
        self._thread.join(timeout=60)

    def submit(self, work: gradsync.Work, result: _Result,
               finish: Optional[Callable[[], object]] = None) -> _Work[_Result]:
        """A torch Work whose future gets `result` once `work` is done and `finish()` has run,
        or the exception that either raised."""
        future: torch.futures.Future[_Result] = torch.futures.Future()

        def complete() -> None:
            try:
                work.wait()
                if finish is not None:
                    finish()
                future.set_result(result)
            except Exception as error:  # noqa: B902 (handed to whoever waits on the future)
                future.set_exception(error)  # type: ignore[arg-type]  # torch 1.13's stub: T

        self._pending.put(complete)
        handle = _Work(future)
        self._recent.append(handle)
        return handle

    def _run(self) -> None:
        # This thread sleeps and wakes on every op: beside the daemon, not the training thread,
        # whose CPU mask its later threads (torch's pool, data loaders) would inherit.
        self._client.bind_thread_beside_daemon()
        while True:
            complete = self._pending.get()
            if complete is None:
                return
            complete()


class ProcessGroupGradsync(ProcessGroup):
    """A torch.distributed process group whose collectives run on the local gradsync daemon.
    Each collective returns at once; its Work's wait() raises the op's gradsync.Error. Raises
    ValueError, before anything is sent, for what gradsync does not do (several tensors per
    process, a reduce op other than sum, avg, min, max and product, unequal all-to-all splits)."""

    # Torch calls a backend's collectives as (tensors, options); its stub declares instead the
    # forms a user calls, which these do not match: hence the `type: ignore[override]`s.

    def __init__(self, rank: int, size: int, client: Optional[gradsync.Client] = None) -> None:
        """Raises RuntimeError when the daemon's rank or group size is not torch's, and what
        gradsync.Client() raises when `client` is None."""
        super().__init__(rank, size)  # type: ignore[call-arg,no-untyped-call]  # stub: ()
        self.client = client or gradsync.Client()
        if (self.client.rank, self.client.world_size) != (rank, size):
            daemons = f"{self.client.rank} of {self.client.world_size} ({self.client.socket})"
            self.client.close()
            raise RuntimeError(
                f"torch's rank {rank} of {size} talks to a gradsync daemon of rank {daemons}; give "
                "each process the socket of the daemon whose rank is its own (GRADSYNC_SOCKET, "
                "or GRADSYNC_SOCKETS in rank order with LOCAL_RANK)")
        self._completer = _Completer(self.client)

    def close(self) -> None:
        """Waits for the group's ops, then ends its stream on every rank."""
        self._completer.close()
        self.client.close()

    def getBackendName(self) -> str:
        return "gradsync"

    def _done(self, work: gradsync.Work, result: _Result,
              finish: Optional[Callable[[], object]] = None) -> _Work[_Result]:
        return self._completer.submit(work, result, finish)

    def allreduce(  # type: ignore[override]
            self, tensors: _Tensors, opts: Optional[AllreduceOptions] = None) -> _Work[_Tensors]:
        tensor = _single(tensors, "all_reduce")
        op = _reduce_op(opts.reduceOp) if opts is not None else "sum"
        return self._done(self.client.allreduce_async(tensor, op=op), tensors)

    def broadcast(  # type: ignore[override]
            self, tensors: _Tensors, opts: BroadcastOptions) -> _Work[_Tensors]:
        tensor = _single(tensors, "broadcast")
        return self._done(self.client.broadcast_async(tensor, root=opts.rootRank), tensors)

    def allgather(  # type: ignore[override]
            self, output_lists: list[_Tensors], input_tensors: _Tensors,
            opts: "Optional[AllGatherOptions]" = None) -> _Work[list[_Tensors]]:
        tensor = _single(input_tensors, "all_gather")
        outputs = _single(output_lists, "all_gather")
        gathered = torch.empty(self.size() * tensor.numel(), dtype=tensor.dtype)
        work = self.client.allgather_async(tensor, gathered)

        def scatter_back() -> None:
            for output, part in zip(outputs, gathered.chunk(self.size())):
                output.copy_(part.view_as(output))

        return self._done(work, output_lists, scatter_back)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor,
                        opts: "Optional[AllGatherOptions]" = None) -> _Work[_Tensors]:
        return self._done(self.client.allgather_async(input, output), [output])

    def reduce_scatter(  # type: ignore[override]
            self, outputs: _Tensors, input_lists: list[_Tensors],
            opts: ReduceScatterOptions) -> _Work[_Tensors]:
        output = _single(outputs, "reduce_scatter")
        inputs = _single(input_lists, "reduce_scatter")
        whole = torch.cat([tensor.reshape(-1) for tensor in inputs])
        flat = torch.empty(output.numel(), dtype=output.dtype)
        work = self.client.reduce_scatter_async(whole, flat, op=_reduce_op(opts.reduceOp))
        return self._done(work, outputs, lambda: output.copy_(flat.view_as(output)))

    def _reduce_scatter_base(  # type: ignore[override]
            self, output: torch.Tensor, input: torch.Tensor,
            opts: ReduceScatterOptions) -> _Work[_Tensors]:
        return self._done(self.client.reduce_scatter_async(
            input, output, op=_reduce_op(opts.reduceOp)), [output])

    def alltoall_base(  # type: ignore[override]
            self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list[int],
            input_split_sizes: list[int], opts: AllToAllOptions) -> _Work[_Tensors]:
        if not output_split_sizes and not input_split_sizes:
            return self._done(self.client.alltoall_async(input, output), [output])
        # torch's splits count rows of dimension 0; an empty list splits it equally.
        work = self.client.alltoall_async(
            input, output, send_counts=self._elements_of_rows(input, input_split_sizes),
            recv_counts=self._elements_of_rows(output, output_split_sizes))
        return self._done(work, [output])

    def alltoall(  # type: ignore[override]
            self, output_tensors: _Tensors, input_tensors: _Tensors,
            opts: AllToAllOptions) -> _Work[_Tensors]:
        if len(output_tensors) != self.size() or len(input_tensors) != self.size():
            raise ValueError(f"gradsync's all_to_all takes {self.size()} input and output "
                             f"tensors, one per rank; got {len(input_tensors)} and "
                             f"{len(output_tensors)}")
        whole = torch.cat([tensor.reshape(-1) for tensor in input_tensors])
        received = torch.empty(sum(tensor.numel() for tensor in output_tensors),
                               dtype=whole.dtype)
        work = self.client.alltoall_async(
            whole, received, send_counts=[tensor.numel() for tensor in input_tensors],
            recv_counts=[tensor.numel() for tensor in output_tensors])

        def scatter_back() -> None:
            at = 0
            for output in output_tensors:
                output.copy_(received[at:at + output.numel()].view_as(output))
                at += output.numel()

        return self._done(work, output_tensors, scatter_back)

    def _elements_of_rows(self, tensor: torch.Tensor, split_sizes: list[int]) -> list[int]:
        rows = tensor.size(0) if tensor.dim() > 0 else 1
        if not split_sizes:
            if rows % self.size() != 0:
                raise ValueError(f"all_to_all_single splits {rows} rows equally only into a "
                                 f"multiple of {self.size()}")
            split_sizes = [rows // self.size()] * self.size()
        if len(split_sizes) != self.size() or sum(split_sizes) != rows:
            raise ValueError(f"all_to_all_single's splits {list(split_sizes)} must be "
                             f"{self.size()} counts of rows adding up to {rows}")
        per_row = tensor.numel() // rows if rows > 0 else 0
        return [count * per_row for count in split_sizes]

    def reduce(  # type: ignore[override]
            self, tensors: _Tensors, opts: ReduceOptions) -> _Work[_Tensors]:
        tensor = _single(tensors, "reduce")
        return self._done(self.client.reduce_async(tensor, root=opts.rootRank,
                                                   op=_reduce_op(opts.reduceOp)), tensors)

    def gather(  # type: ignore[override]
            self, output_lists: list[_Tensors], input_tensors: _Tensors,
            opts: GatherOptions) -> _Work[list[_Tensors]]:
        # torch hands the root its gather list and the other ranks none.
        tensor = _single(input_tensors, "gather")
        if self.rank() != opts.rootRank:
            return self._done(self.client.gather_async(tensor, None, root=opts.rootRank),
                              output_lists)
        outputs = _single(output_lists, "gather")
        gathered = torch.empty(self.size() * tensor.numel(), dtype=tensor.dtype)
        work = self.client.gather_async(tensor, gathered, root=opts.rootRank)

        def scatter_back() -> None:
            for output, part in zip(outputs, gathered.chunk(self.size())):
                output.copy_(part.view_as(output))

        return self._done(work, output_lists, scatter_back)

    def scatter(  # type: ignore[override]
            self, output_tensors: _Tensors, input_lists: list[_Tensors],
            opts: ScatterOptions) -> _Work[_Tensors]:
        # torch hands the root its scatter list and the other ranks none.
        output = _single(output_tensors, "scatter")
        whole = None
        if self.rank() == opts.rootRank:
            whole = torch.cat([tensor.reshape(-1) for tensor in _single(input_lists, "scatter")])
        return self._done(self.client.scatter_async(whole, output, root=opts.rootRank),
                          output_tensors)

    def send(
            self, tensors: _Tensors, dstRank: int, tag: int) -> Work:  # noqa: N803 (torch's)
        tensor = _single(tensors, "send")
        return _MessageWork(self.client.send_async(tensor, dstRank, tag), tensors)

    def recv(
            self, tensors: _Tensors, srcRank: int, tag: int) -> Work:  # noqa: N803 (torch's)
        tensor = _single(tensors, "recv")
        return _MessageWork(self.client.recv_async(tensor, srcRank, tag), tensors)

    def recv_anysource(
            self, tensors: _Tensors, tag: int) -> Work:
        raise ValueError("gradsync matches each receive with one sender's sends: give recv a src")

    def barrier(self, opts: Optional[BarrierOptions] = None) -> _Work[_Tensors]:
        return self._done(self.client.allreduce_async(torch.zeros(1)), [])


# The process groups of the job this process runs now, the default group's first.
_job_groups: list[ProcessGroupGradsync] = []


def _create(store: Store, rank: int, world_size: int,
            timeout: timedelta) -> ProcessGroupGradsync:
    if not dist.is_initialized():
        # A new default group is a new job: the last one's groups end here (after
        # destroy_process_group, torch keeps no reference to them, but their clients are open).
        for group in _job_groups:
            group.close()
        _job_groups.clear()
        job = _job_of_this_init(store, rank, world_size)
    else:
        job = _job_groups[0].client.job
    # torch numbers the groups of a run in the order every process makes them.
    name = getattr(dist.distributed_c10d, "_group_count", len(_job_groups) + 1) - 1
    group = ProcessGroupGradsync(
        rank, world_size,
        gradsync.Client(job=job, stream=f"torch group {name}",
                        members=_members(store, rank, world_size)))
    _job_groups.append(group)
    return group


def _members(store: Store, rank: int, world_size: int) -> Optional[list[int]]:
    """For new_group(ranks): the group's members as gradsync's ranks, by their rank in the group;
    torch hands the backend only that rank and the group's own store, on which each member says
    its global rank. None for the default group and for a group of every rank."""
    if not _job_groups:
        return None
    store.set(f"gradsync/member/{rank}", str(_job_groups[0].client.rank))
    members = [int(store.get(f"gradsync/member/{member}")) for member in range(world_size)]
    return None if members == list(range(_job_groups[0].client.world_size)) else members


def _job_of_this_init(store: Store, rank: int, world_size: int) -> str:
    """The job's name, the same on every rank of this init_process_group: rank 0 makes it and the
    store shares it. Every rank counts its arrival on the store, so the n-th init on a store
    reads the n-th name: a store used again after destroy_process_group names a new job."""
    arrival = store.add("gradsync/inits", 1)
    key = f"gradsync/job/{(arrival - 1) // world_size}"
    if rank == 0:
        prefix = os.environ.get("GRADSYNC_JOB") or "torch"
        store.set(key, f"{prefix} {uuid.uuid4().hex[:16]}")
    return store.get(key).decode()


def allreduce_avg_hook(process_group: object,
                       bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: the bucket's gradients averaged over every rank by gradsync
    (model.register_comm_hook(group, allreduce_avg_hook)), whatever the group's backend. Raises
    TypeError when `process_group` is not the gradsync process group; the future carries the
    op's gradsync.Error."""
    return _averaged(process_group, bucket, "allreduce_avg_hook")


def bf16_wire_hook(process_group: object,
                   bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """As allreduce_avg_hook, with the gradients sent as bfloat16: half the bytes of f32, and,
    unlike torch's bf16_compress_hook (which Debian's CPU-only torch refuses, and which sums in
    bfloat16), every addition done in f32: each value is rounded only when it is sent (docs/clients.md,
    "Semantics", bounds the error). Not named like torch's hook: DDP rejects that name without
    CUDA."""
    return _averaged(process_group, bucket, "bf16_wire_hook", wire="bf16")


def f16_wire_hook(process_group: object,
                  bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """As bf16_wire_hook, with IEEE float16 on the wire: more precision than bfloat16, less
    range (magnitudes past 65504 become inf)."""
    return _averaged(process_group, bucket, "f16_wire_hook", wire="f16")


def _averaged(process_group: object, bucket: GradBucket, hook: str,
              wire: Optional[WireName] = None) -> torch.futures.Future[torch.Tensor]:
    if not isinstance(process_group, ProcessGroupGradsync):
        raise TypeError(f"{hook} needs the gradsync process group as its state")
    tensor = bucket.buffer()
    work = process_group.client.allreduce_async(tensor, op="avg", wire=wire)
    return process_group._done(work, [tensor]).get_future().then(
        lambda future: future.value()[0])


if "GRADSYNC" not in dist.Backend._plugins:
    dist.Backend.register_backend("gradsync", _create)  # type: ignore[no-untyped-call]
