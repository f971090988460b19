"""Subgroups (docs/clients.md, "Subgroups"): a client whose stream runs over some ranks has the
subgroup's rank and size, and its ops involve its members only; a list that is no subgroup, or
that leaves the client out, is refused with the reason."""
import re

import numpy as np
import pytest

import gradsync


def test_a_subgroup_of_the_last_rank_alone_runs_beside_the_whole_group(group2):
    alone = gradsync.Client(group2.sockets[1], job=group2.clients[1].job, stream="alone",
                            members=[1])
    assert (alone.rank, alone.world_size, alone.members) == (0, 1, [1])
    data = np.full(6, 7.0, dtype=np.float32)
    alone.allreduce(data)
    assert np.array_equal(data, np.full(6, 7.0, dtype=np.float32))

    def body(rank, client):
        whole = np.full(4, float(rank + 1), dtype=np.float32)
        client.allreduce(whole)
        return whole
    for whole in group2.on_every_rank(body):
        assert np.array_equal(whole, np.full(4, 3.0, dtype=np.float32))
    alone.close()


def test_a_reversed_subgroup_numbers_its_ranks_by_its_order(group2):
    def body(rank, client):
        reversed_pair = gradsync.Client(group2.sockets[rank], job=client.job, stream="reversed",
                                        members=[1, 0])
        assert reversed_pair.rank == 1 - rank
        output = np.zeros(4, dtype=np.int32)
        reversed_pair.allgather(np.full(2, rank, dtype=np.int32), output)
        reversed_pair.close()
        return output
    for output in group2.on_every_rank(body):
        assert list(output) == [1, 1, 0, 0]


@pytest.mark.parametrize("members, rank, reason", [
    ([0, 2], 0, "rank 2 is not a rank of a group of 2"),
    ([1, 1], 1, "rank 1 is named twice"),
    ([], None, None),
    ([1], 0, "rank 0 is not a member of subgroup [1]"),
])
def test_a_list_that_is_no_subgroup_or_leaves_the_client_out_is_refused(group2, members, rank,
                                                                         reason):
    if reason is None:
        # An empty list is the whole group.
        client = gradsync.Client(group2.sockets[0], job="refusals", stream="whole",
                                 members=members)
        assert client.world_size == 2 and client.members == []
        client.close()
        return
    with pytest.raises(gradsync.InvalidArgument, match=re.escape(reason)):
        gradsync.Client(group2.sockets[rank], job="refusals", stream="bad", members=members)
