"""The contiguous copies through which an op reads and writes non-contiguous NumPy arrays and torch
tensors (a transposed or strided view), for gradsync.Client: the client library takes C-contiguous
memory only."""
from __future__ import annotations

from typing import Any, Callable

from gradsync._typing import Tensor


class Staging:
    """The contiguous copies through which one op reads and writes non-contiguous tensors (a
    transposed or strided view): what the op reads is copied in before it is sent, what it writes
    is copied back once it has succeeded. It keeps the copies alive while the op runs, and tells
    `count` of every byte it copies (Client.bytes_copied)."""

    def __init__(self, count: Callable[[int], None]) -> None:
        self._count = count
        self._staged: list[Any] = []
        self._written: list[tuple[Any, Any]] = []  # (the caller's tensor, its contiguous copy)

    @property
    def writes_back(self) -> bool:
        return bool(self._written)

    def read(self, tensor: Tensor) -> Tensor:
        """`tensor` itself if contiguous, else a contiguous copy of it."""
        if _is_contiguous(tensor):
            return tensor
        staged = _contiguous_copy(tensor)
        self._staged.append(staged)
        self._count(_nbytes(staged))
        return staged

    def write(self, tensor: Tensor, read_too: bool = False) -> Tensor:
        """`tensor` itself if contiguous, else a contiguous buffer (holding its values if
        `read_too`) that write_back() copies into it. Raises TypeError for a tensor that cannot
        take a result: read-only, or with elements that share memory (an expanded view)."""
        if _is_contiguous(tensor):
            return tensor
        _check_writable(tensor)
        staged: Tensor = self.read(tensor) if read_too else _contiguous_empty(tensor)
        self._written.append((tensor, staged))
        return staged

    def update(self, tensor: Tensor) -> Tensor:
        """As write(), for an op that reads the tensor and writes its result into it."""
        return self.write(tensor, read_too=True)

    def write_back(self) -> None:
        for tensor, staged in self._written:
            if hasattr(tensor, "copy_"):
                tensor.copy_(staged)
            else:
                tensor[...] = staged
            self._count(_nbytes(staged))
        self._staged, self._written = [], []


def _is_contiguous(tensor: Tensor) -> bool:
    """True for what the client library takes as it is: C-contiguous memory, or anything that is
    neither a NumPy array nor a torch tensor (the library names what is wrong with it)."""
    if hasattr(tensor, "is_contiguous"):
        return bool(tensor.is_contiguous())
    flags = getattr(tensor, "flags", None)
    return flags is None or bool(flags.c_contiguous)


def _contiguous_copy(tensor: Tensor) -> Tensor:
    if hasattr(tensor, "contiguous"):
        return tensor.contiguous()
    import numpy

    return numpy.ascontiguousarray(tensor)


def _contiguous_empty(tensor: Any) -> Any:
    if hasattr(tensor, "contiguous"):
        import torch

        return torch.empty(tensor.shape, dtype=tensor.dtype)
    import numpy

    return numpy.empty(tensor.shape, dtype=tensor.dtype)


def _nbytes(tensor: Any) -> int:
    if hasattr(tensor, "element_size"):
        return int(tensor.numel() * tensor.element_size())
    return int(tensor.nbytes)


def _check_writable(tensor: Tensor) -> None:
    """Raises TypeError, before anything is sent, for a non-contiguous tensor that a result cannot
    be written back into."""
    flags = getattr(tensor, "flags", None)
    if flags is not None and not flags.writeable:
        raise TypeError("the tensor is read-only; the op writes its result into it")
    if hasattr(tensor, "stride") and any(
            stride == 0 and size > 1 for stride, size in zip(tensor.stride(), tensor.shape)):
        raise TypeError("several elements of the tensor share memory (an expanded view); the "
                        "op cannot write a result into it")
