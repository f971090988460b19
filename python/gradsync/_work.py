"""Work: an op in flight, as gradsync.Client's *_async methods return it."""
from __future__ import annotations

import threading
from typing import Callable, Optional, Sequence

from gradsync import _gradsync
from gradsync._gradsync import Error
from gradsync._staging import Staging
from gradsync._typing import Tensor


class Work:
    """An op in flight, as the *_async methods return it. The memory the op reads and writes
    stays alive until it is done."""

    def __init__(self, handle: _gradsync.Handle, tensors: Sequence[Tensor],
                 staging: Optional[Staging] = None) -> None:
        self._handle = handle
        self._tensors: Optional[Sequence[Tensor]] = tensors
        self._staging = staging
        # Guards the fields below. It is never held while the op is waited for: a thread that
        # waits must not keep add_done_callback or done() waiting with it.
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._error: Optional[Error] = None
        self._callbacks: list[Callable[[Work], object]] = []

    def wait(self) -> Work:
        """Blocks (without the GIL) until the op is done, runs the callbacks that are still to
        run, and returns this Work.

        Raises the gradsync.Error subclass the op failed with (Mismatch, PeerLost,
        DeadlineExceeded, GroupChanged, ...), at every call; and whatever a callback raises."""
        if not self._finished.is_set():
            # Several threads may wait at once: the client library answers each the same.
            try:
                self._handle.wait()
            except Error as error:
                self._finish(error)
            else:
                self._finish(None)
        if self._error is not None:
            raise self._error
        return self

    def done(self) -> bool:
        """True once this process has seen the op end: a wait() returned or raised, or the
        thread that add_done_callback starts saw it end. The client library cannot yet be asked
        without waiting, so an op that ended while nobody waited for it still reads False."""
        return self._finished.is_set()

    def exception(self) -> Optional[Error]:
        """The error the op failed with, once it is done; None if it succeeded or is not done.
        Never waits, never raises."""
        return self._error

    @property
    def algorithm(self) -> str:
        """The algorithm the daemon ran the op with ("ring", "tree", ...), once it is done."""
        return self._handle.algorithm

    def add_done_callback(self, callback: Callable[[Work], object]) -> None:
        """Calls callback(self) once the op is done: at once, on this thread, if it is done
        already; otherwise on the thread whose wait() sees it end (the first callback starts a
        thread of its own that waits). Raises nothing itself; what the callback raises goes to
        the thread that runs it."""
        with self._lock:
            if not self._finished.is_set():
                self._callbacks.append(callback)
                if len(self._callbacks) == 1:
                    threading.Thread(target=self._wait_quietly, daemon=True).start()
                return
        callback(self)

    def _finish(self, error: Optional[Error]) -> None:
        """Records how the op ended, lets go of its memory and runs the callbacks, once: the
        first waiter to get here does it."""
        with self._lock:
            if self._finished.is_set():
                return
            if error is None and self._staging is not None:
                self._staging.write_back()
            self._error = error
            self._tensors = None
            self._staging = None
            self._finished.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def _wait_quietly(self) -> None:
        try:
            self.wait()
        except Error:
            pass  # the callback sees it through exception()
