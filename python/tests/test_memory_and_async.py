"""Shared memory without copies, async ops overlapping compute, and torch CPU tensors."""
import sys
import threading
import time

import numpy as np
import pytest

import gradsync


def test_an_op_in_place_on_shared_memory_copies_nothing(group3):
    count = 1 << 18

    def body(rank, client):
        data = client.allocate_array((count,), np.float32)
        data[:] = rank + 1
        address = data.__array_interface__["data"][0]
        before = client.bytes_copied
        client.allreduce(data)
        assert client.bytes_copied == before
        assert data.__array_interface__["data"][0] == address
        # Private memory goes through the copy path: in and out.
        private = np.full(count, float(rank), dtype=np.float32)
        client.allreduce(private)
        assert client.bytes_copied == before + 2 * private.nbytes
        return data, private

    for data, private in group3.on_every_rank(body):
        np.testing.assert_array_equal(data, np.full(count, 6.0, dtype=np.float32))
        np.testing.assert_array_equal(private, np.full(count, 3.0, dtype=np.float32))


def test_a_shared_tensor_is_a_buffer_numpy_views_without_a_copy(group3):
    shared = group3.clients[0].allocate(64)
    view = np.frombuffer(shared, dtype=np.uint8)
    view[:] = 7
    assert shared.nbytes >= 64
    assert view.__array_interface__["data"][0] == shared.address
    assert np.frombuffer(shared, dtype=np.uint8)[0] == 7


def test_async_ops_overlap_compute_and_call_back_when_done(group3):
    count = 1 << 20

    def body(rank, client):
        data = np.full(count, float(rank), dtype=np.float64)
        done = threading.Event()
        work = client.allreduce_async(data)
        work.add_done_callback(lambda finished: done.set())
        busy = np.sqrt(np.arange(count, dtype=np.float64)).sum()  # compute meanwhile
        work.wait()
        assert done.wait(timeout=30)
        assert work.done() and work.exception() is None
        assert work.algorithm in ("tree", "hypercube", "ring", "halving_doubling")
        return data, busy

    for data, busy in group3.on_every_rank(body):
        np.testing.assert_array_equal(data, np.full(count, 3.0))
        assert busy > 0


def waiting_thread(work):
    """A thread inside work.wait(), which cannot return before the op's other ranks submit."""
    thread = threading.Thread(target=work.wait, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident)
        if frame is not None and frame.f_code is gradsync.Work.wait.__code__:
            time.sleep(0.05)  # past wait()'s first lines, into the client library's wait
            return thread
        time.sleep(0.001)
    raise AssertionError("the thread did not start waiting within 10 s")


def test_a_callback_is_added_at_once_while_another_thread_waits(group2):
    first, second = group2.clients
    work = first.allreduce_async(np.ones(4, dtype=np.float32))
    waiter = waiting_thread(work)
    seen = []
    called = threading.Event()

    def callback(finished):
        seen.append(finished)
        called.set()

    adder = threading.Thread(target=work.add_done_callback, args=(callback,), daemon=True)
    adder.start()
    adder.join(timeout=10)
    added_while_waiting = not adder.is_alive()
    pending = (work.done(), work.exception(), called.is_set())
    second.allreduce(np.ones(4, dtype=np.float32))  # rank 1's part: now the op ends
    assert called.wait(timeout=30)
    waiter.join(timeout=30)
    assert added_while_waiting, "add_done_callback waited for the other thread's wait()"
    assert pending == (False, None, False)
    assert seen == [work] and work.done() and work.exception() is None


def test_torch_cpu_tensors_of_every_dtype_including_bfloat16(group3):
    import torch

    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32,
              torch.int64, torch.uint8]

    def body(rank, client):
        results = []
        for dtype in dtypes:
            tensor = (torch.arange(100) % 5 + rank).to(dtype)
            client.allreduce(tensor)
            results.append(tensor)
        return results

    for results in group3.on_every_rank(body):
        for dtype, tensor in zip(dtypes, results):
            expected = (3 * (torch.arange(100) % 5) + 3).to(dtype)
            assert torch.equal(tensor, expected), dtype


def test_torch_tensors_gradsync_cannot_take_are_type_errors(group3):
    import torch

    client = group3.clients[0]
    with pytest.raises(TypeError, match="share memory"):
        client.allreduce(torch.zeros(1).expand(4))
    with pytest.raises(TypeError, match="has dtype complex32"):
        client.allreduce(torch.zeros(4, dtype=torch.complex32))
