"""gradsync from Python: collectives on NumPy arrays and torch CPU tensors through the local
gradsync daemon.

    import numpy as np, gradsync
    client = gradsync.Client()                 # GRADSYNC_SOCKET, or GRADSYNC_SOCKETS[LOCAL_RANK]
    gradient = np.ones(1 << 20, dtype=np.float32)
    client.allreduce(gradient)                 # in place: the sum over every rank
    shared = client.allocate_array((1 << 20,), np.float32)   # the daemon's memory: no copies
    work = client.allreduce_async(shared, op="avg")
    work.wait()
    client.allreduce(gradient, op="avg", wire="bf16")   # half the bytes; every addition in f32

Every op takes C-contiguous, writable CPU memory of dtype float16, bfloat16 (torch only),
float32, float64, complex64, complex128, int8, int16, int32, int64, uint8 or bool; anything else
is a TypeError before anything is sent. Reductions: sum, avg, min, max, prod, and the bitwise
band, bor and bxor on integers and bool (bool: sum and max are "or", prod and min "and"); complex
values take sum, avg and prod. A
failed op raises the gradsync.Error subclass of its code (Mismatch, PeerLost, DeadlineExceeded,
...) with the daemon's message; DeadlineExceeded is also a TimeoutError, InvalidArgument also a
ValueError.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional, Sequence, TypeVar, Union
from typing import overload

from gradsync import _gradsync
from gradsync._gradsync import (
    Aborted,
    DeadlineExceeded,
    Error,
    GroupChanged,
    Internal,
    InvalidArgument,
    Mismatch,
    OpOptions,
    PeerLost,
    ProtocolError,
    SharedTensor,
    Unauthenticated,
)
from gradsync._staging import Staging
from gradsync._typing import AlgorithmName, DaemonStatus, NumpyElement, ReduceOpName, Tensor
from gradsync._typing import WireName
from gradsync._work import Work

if TYPE_CHECKING:
    import numpy.typing

__all__ = [
    "Client", "Work", "SharedTensor", "socket_from_environment", "Error", "InvalidArgument",
    "Mismatch", "PeerLost", "DeadlineExceeded", "ProtocolError", "Aborted", "Unauthenticated",
    "GroupChanged", "Internal",
]

_Element = TypeVar("_Element", bound=NumpyElement)
_Shape = Union[int, Sequence[int]]


def socket_from_environment() -> str:
    """The daemon socket this process should use: GRADSYNC_SOCKET, else entry LOCAL_RANK (default
    0) of the comma-separated GRADSYNC_SOCKETS that `gradsync local` exports.

    Raises InvalidArgument (a ValueError too) when neither is set, or when LOCAL_RANK has no
    entry in GRADSYNC_SOCKETS; ValueError when LOCAL_RANK is not a number."""
    return _daemon_from_environment()[0]


def _daemon_from_environment() -> tuple[str, Optional[int]]:
    """The daemon socket, and which of that daemon's local ranks this process is: LOCAL_RANK
    itself (None: the client library reads it) for a host's daemon named by GRADSYNC_SOCKET; for
    GRADSYNC_SOCKETS, which lists a daemon that serves several local ranks once for each, how many
    entries before this process's name the same daemon."""
    if os.environ.get("GRADSYNC_SOCKET"):
        return os.environ["GRADSYNC_SOCKET"], None
    sockets = [s for s in os.environ.get("GRADSYNC_SOCKETS", "").split(",") if s]
    if not sockets:
        raise InvalidArgument("no daemon socket: set GRADSYNC_SOCKET, or run under "
                              "`gradsync local`, which sets GRADSYNC_SOCKETS")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not 0 <= local_rank < len(sockets):
        raise InvalidArgument(f"LOCAL_RANK {local_rank} has no entry in GRADSYNC_SOCKETS "
                              f"({len(sockets)} sockets)")
    return sockets[local_rank], sockets[:local_rank].count(sockets[local_rank])


class Client:
    """A connection to the local gradsync daemon: one op stream of one training job on one rank.
    Ops pair across ranks by (job, stream, place in the stream); see docs/clients.md, "Jobs".

    Every collective takes CPU memory: a NumPy array or a torch tensor. A non-contiguous one (a
    transposed or strided view) is staged through a contiguous copy, and the result is copied
    back once the op has succeeded; those copies count in bytes_copied. The blocking
    form returns once the result is in place; the _async form returns a Work. Keywords of every
    op: `algorithm` ("auto": the group's algorithm table chooses), `timeout` (seconds; None: the
    daemon's default) and `name` (shows in the daemon's log). `wire` ("bf16" or "f16"; all-reduce,
    reduce-scatter and all-gather only): an f32/f64 sum or avg sends its values in 16 bits and adds
    them in the tensor's own type.

    What every op raises, before anything is sent: TypeError for memory gradsync cannot take
    (another dtype, read-only, an expanded view, on a GPU, inputs of two dtypes) and ValueError for
    an unknown op, algorithm or wire type, or an output of the wrong size. Once sent, a failed
    op raises the gradsync.Error subclass of its code with the daemon's message: Mismatch (the
    ranks submitted different ops), PeerLost (a member or the daemon is gone), DeadlineExceeded
    (its timeout passed), GroupChanged (the group re-formed: call group()), Aborted,
    InvalidArgument (e.g. a wire type the op cannot use), ProtocolError, Internal. An _async op
    raises those from Work.wait() instead."""

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = None,
                 local_rank: Optional[int] = None, job: Optional[str] = None,
                 stream: Optional[str] = None, members: Optional[Sequence[int]] = None) -> None:
        """Connects to the daemon at `socket` (None: socket_from_environment()) as its local rank
        `local_rank` (None: as the environment says; see docs/clusters.md, "Local ranks"), waiting
        up to `timeout` seconds (None: 30) for the daemon to appear and answer.

        `job` names the training job (None: GRADSYNC_JOB, else what torchrun or Slurm says, else
        a job of this process alone); every process of a job names the same, each run its own.
        `stream` names the op stream within the job (None: "0" for the process's first open
        client of the job on this daemon and local rank, "1" for a second, and so on).
        `members` makes the stream a subgroup's (docs/clients.md, "Subgroups"): the global ranks
        its ops run over, in the order that makes them its ranks 0, 1, ...; every member's client
        of the stream names the same list. rank and world_size are then the subgroup's, and roots
        are subgroup ranks. None: every rank of the group.

        Raises what socket_from_environment() raises when `socket` is None; DeadlineExceeded
        (a TimeoutError too) when no daemon answers in time; Unauthenticated when this user may
        not use the socket; InvalidArgument when the daemon serves no such local rank, the
        stream has a client on this rank already, a name is not printable ASCII of at most 256
        bytes, LOCAL_RANK is not a local rank, or `members` is no subgroup (a rank twice or not
        in the group, a host's members apart) or leaves this rank out; ProtocolError when what
        answers is not a gradsync daemon."""
        if socket is None:
            socket, from_environment = _daemon_from_environment()
            local_rank = from_environment if local_rank is None else local_rank
        self.socket: str = socket
        self._client = _gradsync.Client(self.socket, timeout, local_rank, job or "", stream or "",
                                        list(members or []))
        self._staged_bytes = 0  # copied for non-contiguous tensors (Staging)

    def close(self) -> None:
        """Ends the connection: its stream ends on every rank (an op of it that another rank
        runs and that waits for this one fails there at once); later calls raise InvalidArgument.
        Its ops in flight must have been waited for."""
        self._client.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()

    @property
    def job(self) -> str:
        """The training job this client's ops belong to."""
        return self._client.job

    @property
    def stream(self) -> str:
        """The job's op stream this client submits."""
        return self._client.stream

    @property
    def rank(self) -> int:
        """Global: the ranks of the hosts before this one's, plus this client's local rank; a
        subgroup's client: its place in `members`."""
        return self._client.rank

    @property
    def members(self) -> list[int]:
        """The subgroup's global ranks, in its order; empty: every rank of the group."""
        return list(self._client.members)

    @property
    def world_size(self) -> int:
        return self._client.world_size

    @property
    def local_rank(self) -> int:
        return self._client.local_rank

    @property
    def local_world_size(self) -> int:
        """How many ranks this client's daemon serves."""
        return self._client.local_world_size

    @property
    def generation(self) -> int:
        """The group's generation whose membership this client last took note of."""
        return self._client.generation

    def group(self, timeout: float = _gradsync.DEFAULT_GROUP_TIMEOUT) -> None:
        """Takes note of the group as it is now, waiting while its next generation forms: after a
        member was lost, ops fail with GroupChanged until this is called; then rank and
        world_size say the new ones.

        Raises DeadlineExceeded when no generation forms within `timeout` seconds, PeerLost when
        the daemon is gone."""
        self._client.group(timeout)

    @property
    def bytes_copied(self) -> int:
        """Bytes copied so far between callers' memory and the daemon's, and through the
        contiguous copies of non-contiguous tensors; ops in place on the memory of allocate() add
        nothing."""
        return self._client.bytes_copied + self._staged_bytes

    def plan(self) -> str:
        """The group's plan as `gradsync plan` describes it: the network and the algorithm
        table. Raises DeadlineExceeded or PeerLost when the daemon does not answer."""
        return self._client.plan_text()

    def status(self) -> DaemonStatus:
        """This daemon's view of itself and the group, as `gradsync status` shows it. Raises
        DeadlineExceeded or PeerLost when the daemon does not answer."""
        return self._client.status()

    def allocate(self, nbytes: int) -> SharedTensor:
        """`nbytes` of the daemon's shared memory, as a SharedTensor: numpy.frombuffer and
        torch.frombuffer view it, and in-place ops on such a view copy nothing. Raises PeerLost
        when the daemon is gone, Internal when the memory cannot be made."""
        return self._client.allocate(int(nbytes))

    @overload
    def allocate_array(self, shape: _Shape,
                       dtype: type[_Element]) -> numpy.typing.NDArray[_Element]: ...

    @overload
    def allocate_array(self, shape: _Shape,
                       dtype: numpy.typing.DTypeLike) -> numpy.typing.NDArray[Any]: ...

    def allocate_array(self, shape: _Shape,
                       dtype: numpy.typing.DTypeLike) -> numpy.typing.NDArray[Any]:
        """A NumPy array of `shape` and `dtype` in the daemon's shared memory. Raises TypeError
        for what numpy.dtype does not take, and what allocate() raises."""
        import numpy

        element = numpy.dtype(dtype)
        count = int(numpy.prod(shape, dtype=numpy.int64))
        shared = self.allocate(max(count * element.itemsize, 1))
        # A SharedTensor exports a buffer, which this typeshed (before PEP 688) cannot say.
        array: numpy.typing.NDArray[Any] = numpy.frombuffer(  # type: ignore[call-overload]
            shared, dtype=element, count=count)
        return array.reshape(shape)

    def bind_thread_beside_daemon(self) -> bool:
        """Runs the calling thread on the daemon's CPUs where the daemon is bound to some (as
        `gradsync local` binds its workers): a thread that sleeps and wakes on every op then
        wakes where its daemon does. A daemon that spins between ops (--spin-us) gets its CPUs
        to itself: the thread goes to the others, if it may use some. False, changing nothing,
        where that would not narrow. Raises nothing."""
        return self._client.bind_thread_beside_daemon()

    def allreduce(self, tensor: Tensor, op: ReduceOpName = "sum", *,
                  algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                  name: str = "", wire: Optional[WireName] = None) -> None:
        """In place: `tensor` holds this rank's values and receives the reduction. Raises as
        every op does (see Client)."""
        self.allreduce_async(tensor, op, algorithm=algorithm, timeout=timeout, name=name,
                             wire=wire).wait()

    def reduce_scatter(self, input: Tensor, output: Tensor, op: ReduceOpName = "sum", *,
                       algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                       name: str = "", wire: Optional[WireName] = None) -> None:
        """`input` holds every element; `output` receives this rank's chunk of the balanced
        partition (the first count % p ranks one element more). Raises as every op does (see
        Client); ValueError when `output` is not that chunk's size."""
        self.reduce_scatter_async(input, output, op, algorithm=algorithm, timeout=timeout,
                                  name=name, wire=wire).wait()

    def allgather(self, input: Tensor, output: Tensor, *, algorithm: AlgorithmName = "auto",
                  timeout: Optional[float] = None, name: str = "",
                  wire: Optional[WireName] = None) -> None:
        """`input` is this rank's chunk of the balanced partition of `output`'s elements. Raises
        as every op does (see Client); ValueError when `input` is not that chunk's size."""
        self.allgather_async(input, output, algorithm=algorithm, timeout=timeout, name=name,
                             wire=wire).wait()

    def broadcast(self, tensor: Tensor, root: int = 0, *, algorithm: AlgorithmName = "auto",
                  timeout: Optional[float] = None, name: str = "") -> None:
        """In place: `tensor` receives rank `root`'s values. Raises as every op does (see
        Client)."""
        self.broadcast_async(tensor, root, algorithm=algorithm, timeout=timeout, name=name).wait()

    def alltoall(self, input: Tensor, output: Tensor, *, algorithm: AlgorithmName = "auto",
                 timeout: Optional[float] = None, name: str = "",
                 send_counts: Optional[Sequence[int]] = None,
                 recv_counts: Optional[Sequence[int]] = None) -> None:
        """`input` is world_size blocks, block j for rank j; `output` receives block i from
        rank i. The blocks are equal, or with send_counts and recv_counts (elements, one per
        rank) as long as those say: rank i's send_counts[j] must be rank j's recv_counts[i], or
        every rank raises Error naming the pairs. Raises as every op does (see Client);
        ValueError when the tensors do not match the blocks."""
        self.alltoall_async(input, output, algorithm=algorithm, timeout=timeout, name=name,
                            send_counts=send_counts, recv_counts=recv_counts).wait()

    def reduce(self, tensor: Tensor, root: int = 0, op: ReduceOpName = "sum", *,
               algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
               name: str = "") -> None:
        """In place on rank `root`: `tensor` receives the reduction of every rank's; the other
        ranks' tensors are left as they were. Raises as every op does (see Client)."""
        self.reduce_async(tensor, root, op, algorithm=algorithm, timeout=timeout,
                          name=name).wait()

    def gather(self, input: Tensor, output: Optional[Tensor] = None, root: int = 0, *,
               algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
               name: str = "") -> None:
        """`input` is this rank's chunk of the balanced partition of `output`'s elements; on rank
        `root`, `output` receives every rank's chunk in rank order. The other ranks' `output` is
        not written, and may be None where every rank's chunk has the same size. Raises as every
        op does (see Client); ValueError when `input` is not that chunk's size or the root has no
        `output`."""
        self.gather_async(input, output, root, algorithm=algorithm, timeout=timeout,
                          name=name).wait()

    def scatter(self, input: Optional[Tensor], output: Tensor, root: int = 0, *,
                algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                name: str = "") -> None:
        """On rank `root`, `input` holds every element; `output` receives this rank's chunk of
        their balanced partition. The other ranks' `input` is not read, and may be None where
        every rank's chunk has the same size. Raises as every op does (see Client); ValueError
        when `output` is not that chunk's size or the root has no `input`."""
        self.scatter_async(input, output, root, algorithm=algorithm, timeout=timeout,
                           name=name).wait()

    def barrier(self, *, algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                name: str = "") -> None:
        """Returns once every rank has called it. Raises as every op does (see Client)."""
        self._client.barrier(_options("sum", algorithm, timeout, name, None))

    def send(self, tensor: Tensor, dst: int, tag: int = 0, *, timeout: Optional[float] = None,
             name: str = "") -> None:
        """Sends `tensor` to rank `dst` (of this client's stream: a subgroup's rank), matched in
        order with dst's recv from this rank of the same tag (0 to 2**31 - 1), whose tensor must
        have as many elements of the same dtype; returns once its bytes are out. Raises as every
        op does (see Client): Mismatch when the two sizes differ, Aborted when dst's client
        leaves first."""
        self.send_async(tensor, dst, tag, timeout=timeout, name=name).wait()

    def recv(self, tensor: Tensor, src: int, tag: int = 0, *, timeout: Optional[float] = None,
             name: str = "") -> None:
        """`tensor` receives rank `src`'s send to this rank of the same tag. Raises as send."""
        self.recv_async(tensor, src, tag, timeout=timeout, name=name).wait()

    def send_async(self, tensor: Tensor, dst: int, tag: int = 0, *,
                   timeout: Optional[float] = None, name: str = "") -> Work:
        """As send, returning a Work at once. Every send and receive in flight moves at once,
        whatever order they were posted in: a ring of them cannot deadlock."""
        staging = self._staging()
        handle = self._client.send(staging.read(tensor), dst, tag,
                                   _options("sum", "auto", timeout, name, None))
        return self._work(handle, [tensor], staging)

    def recv_async(self, tensor: Tensor, src: int, tag: int = 0, *,
                   timeout: Optional[float] = None, name: str = "") -> Work:
        """As recv, returning a Work at once (see send_async)."""
        staging = self._staging()
        handle = self._client.receive(staging.write(tensor), src, tag,
                                      _options("sum", "auto", timeout, name, None))
        return self._work(handle, [tensor], staging)

    def allreduce_async(self, tensor: Tensor, op: ReduceOpName = "sum", *,
                        algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                        name: str = "", wire: Optional[WireName] = None) -> Work:
        """As allreduce, returning a Work at once: the op's failure comes from its wait()."""
        options = _options(op, algorithm, timeout, name, wire)
        staging = self._staging()
        handle = self._client.allreduce(staging.update(tensor), options)
        return self._work(handle, [tensor], staging)

    def reduce_scatter_async(self, input: Tensor, output: Tensor, op: ReduceOpName = "sum", *,
                             algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                             name: str = "", wire: Optional[WireName] = None) -> Work:
        """As reduce_scatter, returning a Work at once: the op's failure comes from its wait()."""
        options = _options(op, algorithm, timeout, name, wire)
        staging = self._staging()
        handle = self._client.reduce_scatter(staging.read(input), staging.write(output), options)
        return self._work(handle, [input, output], staging)

    def allgather_async(self, input: Tensor, output: Tensor, *,
                        algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                        name: str = "", wire: Optional[WireName] = None) -> Work:
        """As allgather, returning a Work at once: the op's failure comes from its wait()."""
        options = _options("sum", algorithm, timeout, name, wire)
        staging = self._staging()
        handle = self._client.allgather(staging.read(input), staging.write(output), options)
        return self._work(handle, [input, output], staging)

    def broadcast_async(self, tensor: Tensor, root: int = 0, *,
                        algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                        name: str = "") -> Work:
        """As broadcast, returning a Work at once: the op's failure comes from its wait()."""
        options = _options("sum", algorithm, timeout, name, None, root)
        staging = self._staging()
        handle = self._client.broadcast(staging.update(tensor), options)
        return self._work(handle, [tensor], staging)

    def alltoall_async(self, input: Tensor, output: Tensor, *,
                       algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                       name: str = "", send_counts: Optional[Sequence[int]] = None,
                       recv_counts: Optional[Sequence[int]] = None) -> Work:
        """As alltoall, returning a Work once every rank's counts are known (counts that
        disagree raise here): the op's failure comes from its wait()."""
        if (send_counts is None) != (recv_counts is None):
            raise ValueError("alltoall takes both send_counts and recv_counts, or neither")
        options = _options("sum", algorithm, timeout, name, None)
        staging = self._staging()
        if send_counts is None or recv_counts is None:
            handle = self._client.alltoall(staging.read(input), staging.write(output), options)
        else:
            handle = self._client.alltoallv(staging.read(input), list(send_counts),
                                            staging.write(output), list(recv_counts), options)
        return self._work(handle, [input, output], staging)

    def reduce_async(self, tensor: Tensor, root: int = 0, op: ReduceOpName = "sum", *,
                     algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                     name: str = "") -> Work:
        """As reduce, returning a Work at once: the op's failure comes from its wait()."""
        options = _options(op, algorithm, timeout, name, None, root)
        staging = self._staging()
        handle = self._client.reduce(staging.update(tensor), options)
        return self._work(handle, [tensor], staging)

    def gather_async(self, input: Tensor, output: Optional[Tensor] = None, root: int = 0, *,
                     algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                     name: str = "") -> Work:
        """As gather, returning a Work at once: the op's failure comes from its wait()."""
        options = _options("sum", algorithm, timeout, name, None, root)
        staging = self._staging()
        staged_output = None if output is None else staging.write(output)
        handle = self._client.gather(staging.read(input), staged_output, options)
        return self._work(handle, [input] if output is None else [input, output], staging)

    def scatter_async(self, input: Optional[Tensor], output: Tensor, root: int = 0, *,
                      algorithm: AlgorithmName = "auto", timeout: Optional[float] = None,
                      name: str = "") -> Work:
        """As scatter, returning a Work at once: the op's failure comes from its wait()."""
        options = _options("sum", algorithm, timeout, name, None, root)
        staging = self._staging()
        staged_input = None if input is None else staging.read(input)
        handle = self._client.scatter(staged_input, staging.write(output), options)
        return self._work(handle, [output] if input is None else [input, output], staging)

    def _staging(self) -> Staging:
        def count(copied: int) -> None:
            self._staged_bytes += copied

        return Staging(count)

    @staticmethod
    def _work(handle: _gradsync.Handle, tensors: list[Tensor], staging: Staging) -> Work:
        """The Work of an op just submitted, which writes back what `staging` holds once done."""
        return Work(handle, tensors, staging if staging.writes_back else None)


_DEFAULT_OPTIONS: dict[str, OpOptions] = {}


def _options(op: ReduceOpName, algorithm: AlgorithmName, timeout: Optional[float], name: str,
             wire: Optional[WireName], root: int = 0) -> OpOptions:
    """The OpOptions of one op; the plain ones are made once, since an op's own cost is a few
    microseconds."""
    if algorithm != "auto" or timeout is not None or name or wire is not None or root != 0:
        return OpOptions(op=op, algorithm=algorithm, timeout=timeout or 0.0, name=name,
                         root=root, wire=wire or "")
    if op not in _DEFAULT_OPTIONS:
        _DEFAULT_OPTIONS[op] = OpOptions(op=op)
    return _DEFAULT_OPTIONS[op]
