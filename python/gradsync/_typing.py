"""The types gradsync's signatures share: the memory an op takes, the names of its options, and
what status() returns. NumPy and torch are named here for the type checker only: importing
gradsync imports neither."""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias, TypedDict, Union

if TYPE_CHECKING:
    import numpy
    import numpy.typing
    import torch

# The NumPy element types gradsync takes (bfloat16 comes from torch, which has it).
NumpyElement: TypeAlias = Union[
    "numpy.float16", "numpy.float32", "numpy.float64", "numpy.complex64", "numpy.complex128",
    "numpy.int8", "numpy.int16", "numpy.int32", "numpy.int64", "numpy.uint8", "numpy.bool_"
]

# What an op reads and writes: C-contiguous CPU memory. The element type of a torch tensor and
# the contiguity of either are checked when the op is called (a TypeError).
Tensor: TypeAlias = Union["numpy.typing.NDArray[NumpyElement]", "torch.Tensor"]

ReduceOpName: TypeAlias = Literal["sum", "avg", "min", "max", "prod", "band", "bor", "bxor"]
AlgorithmName: TypeAlias = Literal[
    "auto", "ring", "tree", "hypercube", "halving_doubling", "direct", "bruck", "dissemination"
]
WireName: TypeAlias = Literal["bf16", "f16"]


class DaemonStatus(TypedDict):
    """A daemon's view of itself and its group, as `gradsync status` shows it."""

    rank: int
    world_size: int
    generation: int
    data_addresses: list[str]  # by rank
    clients: int  # connections open now, the asking one included
    job: str  # the job the daemon serves; empty: none
    submitter_pid: int  # that job's first client there; 0: none
    ops_served: int  # failed ones included
    ops_failed: int
    heartbeat_age_ms: float  # since the coordinator's socket last took a heartbeat
    coordinator: str  # "connected", or why not
    uptime_s: float  # since the daemon started serving clients
