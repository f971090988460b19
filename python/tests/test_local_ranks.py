"""Daemons that serve two local ranks each: the ranks are global and host-major, and a collective
is over every rank of every host."""
import numpy as np


def test_ranks_are_global_and_every_local_rank_is_in_the_sum(hosts2x2):
    def body(rank, client):
        assert (client.rank, client.world_size) == (rank, 4)
        assert (client.local_rank, client.local_world_size) == (rank % 2, 2)
        data = np.full(1000, rank + 1, dtype=np.float32)
        client.allreduce(data)
        gathered = np.zeros(4, dtype=np.int64)
        client.allgather(np.array([rank * 10], dtype=np.int64), gathered)
        return data, gathered

    for data, gathered in hosts2x2.on_every_rank(body):
        assert np.array_equal(data, np.full(1000, 10, dtype=np.float32))
        assert gathered.tolist() == [0, 10, 20, 30]
