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
float32, float64, int32, int64 or uint8; anything else is a TypeError before anything is sent. A
failed op raises the gradsync.Error subclass of its code (Mismatch, PeerLost, DeadlineExceeded,
...) with the daemon's message.
"""
import os
import threading

from gradsync._gradsync import (  # noqa: F401 (the exception classes are the package's API)
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
from gradsync import _gradsync

__all__ = [
    "Client", "Work", "SharedTensor", "socket_from_environment", "Error", "InvalidArgument",
    "Mismatch", "PeerLost", "DeadlineExceeded", "ProtocolError", "Aborted", "Unauthenticated",
    "GroupChanged", "Internal",
]

def socket_from_environment():
    """The daemon socket this process should use: GRADSYNC_SOCKET, else entry LOCAL_RANK (default
    0) of the comma-separated GRADSYNC_SOCKETS that `gradsync local` exports."""
    return _daemon_from_environment()[0]


def _daemon_from_environment():
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


class Work:
    """An op in flight. wait() blocks (without the GIL) until it is done and raises if it failed;
    add_done_callback(fn) calls fn(work) once it is done, on a thread of its own unless it is
    done already. The tensors of the op stay alive until it is done."""

    def __init__(self, handle, tensors):
        self._handle = handle
        self._tensors = tensors
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._error = None
        self._callbacks = []

    def wait(self):
        with self._lock:
            if not self._done.is_set():
                try:
                    self._handle.wait()
                except Error as error:
                    self._error = error
                self._tensors = None
                self._done.set()
        for callback in self._take_callbacks():
            callback(self)
        if self._error is not None:
            raise self._error
        return self

    def done(self):
        return self._done.is_set()

    def exception(self):
        """The error the op failed with, once it is done; None if it succeeded."""
        return self._error

    @property
    def algorithm(self):
        return self._handle.algorithm

    def add_done_callback(self, callback):
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                if len(self._callbacks) == 1:
                    threading.Thread(target=self._wait_quietly, daemon=True).start()
                return
        callback(self)

    def _wait_quietly(self):
        try:
            self.wait()
        except Error:
            pass  # the callback sees it through exception()

    def _take_callbacks(self):
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        return callbacks


class Client:
    """A connection to the local gradsync daemon: one rank's op stream."""

    def __init__(self, socket=None, timeout=None, local_rank=None):
        """Connects within `timeout` seconds (None: the client library's default) as the daemon's
        local rank `local_rank` (None: as the environment says; see README "Local ranks")."""
        if socket is None:
            socket, from_environment = _daemon_from_environment()
            local_rank = from_environment if local_rank is None else local_rank
        self.socket = socket
        self._client = _gradsync.Client(self.socket, timeout, local_rank)

    @property
    def rank(self):
        """Global: the ranks of the hosts before this one's, plus this client's local rank."""
        return self._client.rank

    @property
    def world_size(self):
        return self._client.world_size

    @property
    def local_rank(self):
        return self._client.local_rank

    @property
    def local_world_size(self):
        """How many ranks this client's daemon serves."""
        return self._client.local_world_size

    @property
    def generation(self):
        """The group's generation whose membership this client last took note of."""
        return self._client.generation

    def group(self, timeout=60.0):
        """Takes note of the group as it is now, waiting while its next generation forms: after a
        member was lost, ops fail with GroupChanged until this is called; then rank and
        world_size say the new ones."""
        self._client.group(timeout)

    @property
    def bytes_copied(self):
        """Bytes copied so far between callers' memory and the daemon's; ops in place on the
        memory of allocate() add nothing."""
        return self._client.bytes_copied

    def plan(self):
        """The group's plan as `gradsync plan` describes it: the network and the algorithm
        table."""
        return self._client.plan_text()

    def status(self):
        """This daemon's view of itself and the group, as `gradsync status` shows it."""
        return self._client.status()

    def allocate(self, nbytes):
        """`nbytes` of the daemon's shared memory, as a SharedTensor: numpy.frombuffer and
        torch.frombuffer view it, and in-place ops on such a view copy nothing."""
        return self._client.allocate(int(nbytes))

    def allocate_array(self, shape, dtype):
        """A NumPy array of `shape` and `dtype` in the daemon's shared memory."""
        import numpy

        dtype = numpy.dtype(dtype)
        count = int(numpy.prod(shape, dtype=numpy.int64))
        shared = self.allocate(max(count * dtype.itemsize, 1))
        return numpy.frombuffer(shared, dtype=dtype, count=count).reshape(shape)

    def bind_thread_beside_daemon(self):
        """Runs the calling thread on the daemon's CPUs where the daemon is bound to some (as
        `gradsync local` binds its workers): a thread that sleeps and wakes on every op then
        wakes where its daemon does. A daemon that spins between ops (--spin-us) gets its CPUs
        to itself: the thread goes to the others, if it may use some. False, changing nothing,
        where that would not narrow."""
        return self._client.bind_thread_beside_daemon()

    # Every collective takes C-contiguous CPU memory: a NumPy array, or a torch tensor. The
    # blocking form returns once the result is in place; the _async form returns a Work.
    def allreduce(self, tensor, op="sum", **options):
        """In place: `tensor` holds this rank's values and receives the reduction."""
        self._client.allreduce(tensor, _options(op, options)).wait()

    def reduce_scatter(self, input, output, op="sum", **options):
        """`input` holds every element; `output` receives this rank's chunk of the balanced
        partition (the first count % p ranks one element more)."""
        self._client.reduce_scatter(input, output, _options(op, options)).wait()

    def allgather(self, input, output, **options):
        """`input` is this rank's chunk of the balanced partition of `output`'s elements."""
        self._client.allgather(input, output, _options("sum", options)).wait()

    def broadcast(self, tensor, root=0, **options):
        self._client.broadcast(tensor, _options("sum", dict(options, root=root))).wait()

    def alltoall(self, input, output, **options):
        """`input` is world_size blocks, block j for rank j; `output` receives block i from
        rank i."""
        self._client.alltoall(input, output, _options("sum", options)).wait()

    def barrier(self, **options):
        self._client.barrier(_options("sum", options))

    def allreduce_async(self, tensor, op="sum", **options):
        return Work(self._client.allreduce(tensor, _options(op, options)), [tensor])

    def reduce_scatter_async(self, input, output, op="sum", **options):
        return Work(self._client.reduce_scatter(input, output, _options(op, options)),
                    [input, output])

    def allgather_async(self, input, output, **options):
        return Work(self._client.allgather(input, output, _options("sum", options)),
                    [input, output])

    def broadcast_async(self, tensor, root=0, **options):
        return Work(self._client.broadcast(tensor, _options("sum", dict(options, root=root))),
                    [tensor])

    def alltoall_async(self, input, output, **options):
        return Work(self._client.alltoall(input, output, _options("sum", options)),
                    [input, output])


_DEFAULT_OPTIONS = {}


def _options(op, options):
    """OpOptions for `op` and the keywords algorithm, timeout (seconds), name, root and wire
    ("bf16" or "f16": an f32/f64 sum or avg sends its values in 16 bits and adds them in the
    tensor's own type); the plain ones are made once, since an op's own cost is a few
    microseconds."""
    if options:
        return OpOptions(op=op, **options)
    if op not in _DEFAULT_OPTIONS:
        _DEFAULT_OPTIONS[op] = OpOptions(op=op)
    return _DEFAULT_OPTIONS[op]
