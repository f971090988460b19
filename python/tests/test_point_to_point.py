"""Point-to-point messages from Python (docs/clients.md, "Point to point"): a ring of every dtype,
async sends and receives posted either way round, a strided tensor, and the bad arguments and
sizes that disagree, each refused with a clear error, the daemons serving on."""
import numpy as np
import pytest

import gradsync

DTYPES = [np.float32, np.float64, np.complex64, np.int8, np.int16, np.int64, np.uint8, np.bool_]


def values(rank, dtype, count=1000):
    return ((np.arange(count) + rank) % 5).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_ring_of_blocking_sends_and_receives_reaches_every_rank(group3, dtype):
    def body(rank, client):
        right, left = (rank + 1) % client.world_size, (rank - 1) % client.world_size
        got = np.zeros(1000, dtype=dtype)
        if rank % 2 == 0:  # the evens send first, the odds receive first: no rank waits forever
            client.send(values(rank, dtype), right)
            client.recv(got, left)
        else:
            client.recv(got, left)
            client.send(values(rank, dtype), right)
        return left, got

    for left, got in group3.on_every_rank(body):
        np.testing.assert_array_equal(got, values(left, dtype))


@pytest.mark.parametrize("sends_first", [True, False])
def test_async_messages_complete_whichever_is_posted_first(group3, sends_first):
    count = 3 << 20  # 12 MiB of f32 each way: more than the sockets between two ranks hold

    def body(rank, client):
        right, left = (rank + 1) % client.world_size, (rank - 1) % client.world_size
        out = np.full(count, float(rank), dtype=np.float32)
        got = np.zeros(count, dtype=np.float32)
        posts = [lambda: client.send_async(out, right, tag=4),
                 lambda: client.recv_async(got, left, tag=4)]
        works = [post() for post in (posts if sends_first else posts[::-1])]
        for work in works:
            work.wait()
        return left, got

    for left, got in group3.on_every_rank(body):
        assert np.all(got == float(left))


def test_a_strided_receive_is_written_back_and_its_bytes_counted(group2):
    def body(rank, client):
        if rank == 0:
            client.send(np.arange(12, dtype=np.int32), 1)
            return None
        whole = np.zeros((4, 6), dtype=np.int32)
        copied_before = client.bytes_copied
        client.recv(whole[:, ::2], 0)
        return whole, client.bytes_copied - copied_before

    _, (whole, copied) = group2.on_every_rank(body)
    np.testing.assert_array_equal(whole[:, ::2], np.arange(12, dtype=np.int32).reshape(4, 3))
    assert np.all(whole[:, 1::2] == 0)
    assert copied >= 2 * 12 * 4  # staged: out of the region, then into the strided view


def test_sizes_that_differ_fail_on_both_ranks_naming_both(group2):
    def body(rank, client):
        with pytest.raises(gradsync.Mismatch, match="rank 0 sends 4 f32, rank 1 receives 8 f32"):
            if rank == 0:
                client.send(np.ones(4, dtype=np.float32), 1)
            else:
                client.recv(np.zeros(8, dtype=np.float32), 0)

    group2.on_every_rank(body)
    group2.expect_every_rank_serves()


@pytest.mark.parametrize("peer, tag, message", [
    (2, 0, "rank 2 is not a rank of a group of 2"),
    (0, 0, "cannot send to itself"),
    (1, -1, "tag -1 is out of range"),
    (1, 2**31, "tag 2147483648 is out of range"),
])
def test_bad_arguments_are_refused_and_the_daemons_serve_on(group2, peer, tag, message):
    with pytest.raises(gradsync.InvalidArgument, match=message):
        group2.clients[0].send(np.ones(4, dtype=np.float32), peer, tag)
    group2.expect_every_rank_serves()


def test_a_message_nobody_matches_times_out_saying_what_it_waited_for(group2):
    with pytest.raises(gradsync.DeadlineExceeded, match="rank 1 has not posted the receive"):
        group2.clients[0].send(np.ones(4, dtype=np.float32), 1, timeout=0.5)
    group2.expect_every_rank_serves()
