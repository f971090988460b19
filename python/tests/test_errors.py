"""Every failure a training script can meet comes as the gradsync.Error subclass of its code,
with the daemon's message; the group carries on after those that do not end it."""

import os
import signal
import time

import numpy as np
import pytest

import gradsync


def test_ranks_that_disagree_get_a_mismatch_naming_both(group2):
    def body(rank, client):
        with pytest.raises(gradsync.Mismatch) as raised:
            client.allreduce(np.zeros(10 + rank, dtype=np.float32))
        return str(raised.value)

    for message in group2.on_every_rank(body):
        assert "allreduce of 10 f32" in message and "allreduce of 11 f32" in message, message
    # Both ranks go on with the next op.
    group2.expect_every_rank_serves()


def test_an_op_the_other_ranks_never_submit_exceeds_its_deadline_a_timeout_error(group2):
    with pytest.raises(TimeoutError) as raised:
        group2.clients[0].allreduce(np.zeros(4, dtype=np.float32), timeout=0.5)
    assert isinstance(raised.value, gradsync.DeadlineExceeded)
    assert isinstance(raised.value, gradsync.Error)


def test_a_second_submitting_client_of_a_stream_is_invalid_argument_a_value_error(group2):
    group2.on_every_rank(lambda rank, client: client.barrier())
    second = gradsync.Client(group2.sockets[0], stream=group2.clients[0].stream)
    with pytest.raises(ValueError, match="already has a submitting client of stream") as raised:
        second.allreduce(np.zeros(4, dtype=np.float32))
    assert isinstance(raised.value, gradsync.InvalidArgument)
    assert isinstance(raised.value, gradsync.Error)


def test_a_daemon_that_is_gone_is_peer_lost(group2):
    client = group2.clients[0]
    group2.stop()
    with pytest.raises(gradsync.PeerLost):
        client.allreduce(np.zeros(4, dtype=np.float32), timeout=5)


def test_no_socket_in_the_environment_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("GRADSYNC_SOCKET", raising=False)
    monkeypatch.delenv("GRADSYNC_SOCKETS", raising=False)
    with pytest.raises(ValueError, match="no daemon socket") as raised:
        gradsync.Client()
    assert isinstance(raised.value, gradsync.InvalidArgument)
    monkeypatch.setenv("GRADSYNC_SOCKETS", "/a.sock,/b.sock")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(gradsync.InvalidArgument, match="LOCAL_RANK 2 has no entry"):
        gradsync.Client()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert gradsync.socket_from_environment() == "/b.sock"


def worker_pid(socket):
    """The pid of the gradsyncd worker that serves `socket`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:
            continue
        if b"worker" in argv and socket.encode() in argv:
            return int(entry)
    raise AssertionError(f"no worker serves {socket}")


def test_a_stalled_rank_rejoins_and_later_ops_say_the_group_changed(group2):
    """Rank 1's daemon stopped past the heartbeat timeout (3 s): rank 0's op fails naming it;
    once it resumes the group forms generation 2, an op fails with GroupChanged until the client
    takes note of it with group(), and then ops succeed."""
    pid = worker_pid(group2.sockets[1])
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(gradsync.PeerLost, match="rank 1"):
            group2.clients[0].allreduce(np.zeros(4, dtype=np.float32), timeout=20)
    finally:
        os.kill(pid, signal.SIGCONT)

    def until_it_serves(rank, client):
        changed = False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            data = np.ones(4, dtype=np.float32)
            try:
                client.allreduce(data)
                return changed, client.generation, data
            except gradsync.GroupChanged:
                changed = True
                client.group()
            except gradsync.Error:
                time.sleep(0.01)  # the next generation is still forming
        raise AssertionError(f"rank {rank} was not served again within 30 s")

    for changed, generation, data in group2.on_every_rank(until_it_serves):
        assert changed and generation == 2
        np.testing.assert_array_equal(data, np.full(4, 2.0, dtype=np.float32))
