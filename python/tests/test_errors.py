"""Every failure a training script can meet comes as the gradsync.Error subclass of its code,
with the daemon's message; the group carries on after those that do not end it."""

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
    def next_op(rank, client):
        data = np.ones(4, dtype=np.float32)
        client.allreduce(data)
        return data

    for data in group2.on_every_rank(next_op):
        np.testing.assert_array_equal(data, np.full(4, 2.0, dtype=np.float32))


def test_an_op_the_other_ranks_never_submit_exceeds_its_deadline(group2):
    with pytest.raises(gradsync.DeadlineExceeded):
        group2.clients[0].allreduce(np.zeros(4, dtype=np.float32), timeout=0.5)


def test_a_second_submitting_client_of_a_rank_is_invalid_argument(group2):
    group2.on_every_rank(lambda rank, client: client.barrier())
    second = gradsync.Client(group2.sockets[0])
    with pytest.raises(gradsync.InvalidArgument, match="already has a submitting client"):
        second.allreduce(np.zeros(4, dtype=np.float32))
    assert issubclass(gradsync.InvalidArgument, gradsync.Error)


def test_a_daemon_that_is_gone_is_peer_lost(group2):
    client = group2.clients[0]
    group2.stop()
    with pytest.raises(gradsync.PeerLost):
        client.allreduce(np.zeros(4, dtype=np.float32), timeout=5)


def test_no_socket_in_the_environment_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("GRADSYNC_SOCKET", raising=False)
    monkeypatch.delenv("GRADSYNC_SOCKETS", raising=False)
    with pytest.raises(gradsync.InvalidArgument, match="no daemon socket"):
        gradsync.Client()
    monkeypatch.setenv("GRADSYNC_SOCKETS", "/a.sock,/b.sock")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(gradsync.InvalidArgument, match="LOCAL_RANK 2 has no entry"):
        gradsync.Client()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert gradsync.socket_from_environment() == "/b.sock"
