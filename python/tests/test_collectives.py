"""Every collective on NumPy arrays of every dtype gradsync takes, against NumPy's own result,
on a group of three; the bad inputs the package refuses before anything is sent."""
import numpy as np
import pytest

import gradsync

NUMPY_DTYPES = [np.float16, np.float32, np.float64, np.complex64, np.complex128, np.int8, np.int16,
                np.int32, np.int64, np.uint8, np.bool_]
# Complex numbers have no order: min and max of them are refused (test_a_reduction_a_dtype...).
ALLREDUCE_CASES = [(dtype, op) for dtype in NUMPY_DTYPES for op in ["sum", "max", "min"]
                   if not (np.issubdtype(dtype, np.complexfloating) and op != "sum")]
COUNT = 1000  # not a multiple of 3: the chunks of the balanced partition differ by one


def contribution(rank, dtype, count=COUNT):
    """Rank r's values: small integers, exact in every dtype, so the sum is known."""
    return ((np.arange(count) + rank) % 7).astype(dtype)


def chunk(count, rank, size):
    """The balanced partition's chunk of `rank`: (offset, length)."""
    base, extra = divmod(count, size)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


@pytest.mark.parametrize("dtype, op", ALLREDUCE_CASES,
                         ids=[f"{np.dtype(d).name}-{op}" for d, op in ALLREDUCE_CASES])
def test_allreduce_matches_numpy(group3, dtype, op):
    # NumPy's sum of bools counts them; as bools again, that is "or", gradsync's (and torch's) sum.
    expected = getattr(np, {"sum": "sum", "max": "max", "min": "min"}[op])(
        [contribution(r, dtype) for r in range(group3.size)], axis=0).astype(dtype)

    def body(rank, client):
        data = contribution(rank, dtype)
        client.allreduce(data, op=op)
        return data

    for result in group3.on_every_rank(body):
        np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_reduce_scatter_leaves_each_rank_its_chunk_of_the_sum(group3, dtype):
    total = np.sum([contribution(r, dtype) for r in range(group3.size)], axis=0).astype(dtype)

    def body(rank, client):
        offset, length = chunk(COUNT, rank, group3.size)
        output = np.zeros(length, dtype=dtype)
        client.reduce_scatter(contribution(rank, dtype), output)
        return offset, output

    for offset, output in group3.on_every_rank(body):
        np.testing.assert_array_equal(output, total[offset:offset + len(output)])


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_allgather_concatenates_every_ranks_chunk(group3, dtype):
    whole = contribution(0, dtype)

    def body(rank, client):
        offset, length = chunk(COUNT, rank, group3.size)
        output = np.zeros(COUNT, dtype=dtype)
        client.allgather(whole[offset:offset + length].copy(), output)
        return output

    for output in group3.on_every_rank(body):
        np.testing.assert_array_equal(output, whole)


@pytest.mark.parametrize("root", [0, 2])
def test_broadcast_gives_every_rank_the_roots_values(group3, root):
    def body(rank, client):
        data = contribution(rank, np.float64)
        client.broadcast(data, root=root)
        return data

    for data in group3.on_every_rank(body):
        np.testing.assert_array_equal(data, contribution(root, np.float64))


def test_alltoall_sends_block_j_to_rank_j(group3):
    p, block = group3.size, 5

    def body(rank, client):
        sent = (100 * rank + np.arange(p * block)).astype(np.int64)
        received = np.zeros(p * block, dtype=np.int64)
        client.alltoall(sent, received)
        return received

    for rank, received in enumerate(group3.on_every_rank(body)):
        expected = np.concatenate(
            [100 * source + np.arange(rank * block, (rank + 1) * block) for source in range(p)])
        np.testing.assert_array_equal(received, expected)


def alltoallv_counts(source, destination):
    """Elements rank `source` sends rank `destination`: 0 to 4, a zero among them."""
    return (3 * source + destination) % 5


@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.complex128],
                         ids=lambda d: np.dtype(d).name)
def test_alltoall_with_counts_sends_each_rank_its_own_length(group3, dtype):
    p = group3.size

    def block(source, destination):
        return ((np.arange(alltoallv_counts(source, destination)) + 10 * source + destination)
                % 100).astype(dtype)

    def body(rank, client):
        sent = np.concatenate([block(rank, to) for to in range(p)])
        recv_counts = [alltoallv_counts(source, rank) for source in range(p)]
        received = np.zeros(sum(recv_counts), dtype=dtype)
        client.alltoall(sent, received, send_counts=[alltoallv_counts(rank, to) for to in range(p)],
                        recv_counts=recv_counts)
        return received

    for rank, received in enumerate(group3.on_every_rank(body)):
        np.testing.assert_array_equal(
            received, np.concatenate([block(source, rank) for source in range(p)]))


def test_alltoall_counts_that_disagree_raise_on_every_rank_naming_the_pair(group3):
    def body(rank, client):
        recv_counts = [2, 2, 2] if rank != 1 else [2, 2, 3]
        with pytest.raises(gradsync.Error, match="rank 2 sends 2 elements to rank 1, which "
                                                 "expects 3"):
            client.alltoall(np.zeros(6, dtype=np.float32), np.zeros(sum(recv_counts),
                                                                     dtype=np.float32),
                            send_counts=[2, 2, 2], recv_counts=recv_counts)

    group3.on_every_rank(body)
    group3.expect_every_rank_serves()


def test_alltoall_counts_that_do_not_add_up_to_the_tensors_are_refused(group3):
    client = group3.clients[0]
    with pytest.raises(ValueError, match="send counts add up to 5 for an input of 6"):
        client.alltoall(np.zeros(6), np.zeros(6), send_counts=[1, 2, 2], recv_counts=[2, 2, 2])
    with pytest.raises(ValueError, match="both send_counts and recv_counts"):
        client.alltoall(np.zeros(6), np.zeros(6), send_counts=[2, 2, 2])


def test_average_and_barrier(group3):
    def body(rank, client):
        data = np.full(10, float(rank), dtype=np.float32)
        client.barrier()
        client.allreduce(data, op="avg")
        return data

    for data in group3.on_every_rank(body):
        np.testing.assert_allclose(data, np.full(10, 1.0, dtype=np.float32))


@pytest.mark.parametrize("root", [0, 2])
def test_reduce_gather_and_scatter_give_the_root_its_result_and_leave_the_others_alone(group3,
                                                                                      root):
    def body(rank, client):
        tensor = contribution(rank, np.float64)
        client.reduce(tensor, root=root, op="max")
        # COUNT is not a multiple of 3: every rank names the output, which only the root's is.
        offset, length = chunk(COUNT, rank, group3.size)
        gathered = np.full(COUNT, -1, dtype=np.int32)
        client.gather(np.arange(offset, offset + length, dtype=np.int32), gathered, root=root)
        # Chunks of one size: the others need not name the root's side.
        received = np.zeros(4, dtype=np.int16)
        whole = np.arange(4 * group3.size, dtype=np.int16) if rank == root else None
        client.scatter(whole, received, root=root)
        equal = np.zeros(2 * group3.size, dtype=np.complex64)
        client.gather(np.full(2, rank + 1j, dtype=np.complex64),
                      equal if rank == root else None, root=root)
        return tensor, gathered, received, equal

    maximum = np.max([contribution(r, np.float64) for r in range(group3.size)], axis=0)
    for rank, (tensor, gathered, received, equal) in enumerate(group3.on_every_rank(body)):
        if rank == root:
            np.testing.assert_array_equal(tensor, maximum)
            np.testing.assert_array_equal(gathered, np.arange(COUNT, dtype=np.int32))
            np.testing.assert_array_equal(
                equal, np.repeat(np.arange(group3.size) + 1j, 2).astype(np.complex64))
        else:
            np.testing.assert_array_equal(tensor, contribution(rank, np.float64))
            np.testing.assert_array_equal(gathered, np.full(COUNT, -1, dtype=np.int32))
        np.testing.assert_array_equal(received, np.arange(4 * rank, 4 * rank + 4))


def test_a_root_without_its_side_of_a_gather_or_scatter_is_refused_before_anything_is_sent(
        group3):
    client = group3.clients[0]
    with pytest.raises(ValueError, match=r"the root \(rank 0\) needs the output"):
        client.gather(np.zeros(2, np.float32), None, root=0)
    with pytest.raises(ValueError, match=r"the root \(rank 0\) needs the input"):
        client.scatter(None, np.zeros(2, np.float32), root=0)
    with pytest.raises(TypeError, match="the input is f32 and the output f64"):
        client.gather(np.zeros(2, np.float32), np.zeros(6, np.float64), root=0)
    # Nothing was sent: the group still runs the next op.
    test_average_and_barrier(group3)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64, np.uint8, np.bool_],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["band", "bor", "bxor"])
def test_bitwise_reductions_match_numpy(group3, dtype, op):
    values = [((np.arange(COUNT) * 37 + 11 * rank) % 251).astype(dtype)
              for rank in range(group3.size)]
    ufunc = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
    expected = ufunc.reduce(values, axis=0)

    def body(rank, client):
        data = values[rank].copy()
        client.allreduce(data, op=op)
        return data

    for result in group3.on_every_rank(body):
        np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("dtype, op, reason", [
    (np.complex64, "max", "complex numbers have no order for min and max"),
    (np.float32, "band", "the bitwise operators take integers and bool only"),
    (np.bool_, "avg", "bool values have no average"),
])
def test_a_reduction_a_dtype_does_not_take_is_refused_and_the_group_serves_on(group3, dtype, op,
                                                                             reason):
    def body(rank, client):
        with pytest.raises(gradsync.InvalidArgument, match=reason):
            client.allreduce(np.zeros(4, dtype=dtype), op=op)

    group3.on_every_rank(body)
    test_average_and_barrier(group3)


@pytest.mark.parametrize("bad, message", [
    (np.zeros(4, dtype=np.uint16), "has dtype uint16"),
    ([1.0, 2.0], "is a list"),
])
def test_what_gradsync_cannot_take_is_a_type_error_before_anything_is_sent(group3, bad,
                                                                            message):
    with pytest.raises(TypeError, match=message):
        group3.clients[0].allreduce(bad)
    read_only = np.zeros(4, dtype=np.float32)
    read_only.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        group3.clients[0].allreduce(read_only)
    with pytest.raises(TypeError, match="must have one dtype"):
        group3.clients[0].allgather(np.zeros(4, np.float32), np.zeros(12, np.float64))
    with pytest.raises(ValueError, match="unknown reduce op"):
        group3.clients[0].allreduce(np.zeros(4, np.float32), op="median")


def test_non_contiguous_arrays_are_staged_through_contiguous_copies_and_counted(group3):
    # A column (strided) reduced in place, a transposed input and a strided output of an
    # all-gather: every rank's result must land in the caller's own view, never in a copy of it.
    def body(rank, client):
        matrix = np.arange(12, dtype=np.float32).reshape(4, 3) + rank
        column = matrix[:, 1]
        before = client.bytes_copied
        client.allreduce(column)
        staged = client.bytes_copied - before
        transposed = (np.arange(6, dtype=np.int64).reshape(2, 3) + 10 * rank).T
        gathered = np.zeros(2 * 6, dtype=np.int64)[::2]
        # The balanced chunk of rank r is 2 elements of 6 at p = 3.
        client.allgather(transposed.reshape(-1)[2 * rank:2 * rank + 2], gathered)
        return matrix, staged, gathered

    total = sum(np.arange(12, dtype=np.float32).reshape(4, 3)[:, 1] + r for r in range(3))
    for rank, (matrix, staged, gathered) in enumerate(group3.on_every_rank(body)):
        np.testing.assert_array_equal(matrix[:, 1], total)
        np.testing.assert_array_equal(matrix[:, 0], np.arange(0, 12, 3) + rank)  # untouched
        # In, and back; the library copies the staged 16 bytes into the daemon's region and out.
        assert staged == 4 * 16, staged
        expected = np.concatenate([(np.arange(6).reshape(2, 3) + 10 * r).T.reshape(-1)
                                   [2 * r:2 * r + 2] for r in range(3)])
        np.testing.assert_array_equal(gathered, expected)


def test_a_non_contiguous_tensor_a_result_cannot_be_written_into_is_refused(group3):
    read_only = np.zeros((4, 4), dtype=np.float32)[:, 1]
    read_only.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        group3.clients[0].allreduce(read_only)
    # Nothing was sent: the group still runs the next op.
    test_average_and_barrier(group3)


def test_a_wrongly_sized_output_is_refused_before_anything_is_sent(group3):
    with pytest.raises(ValueError, match="rank 0's chunk of 1000 elements is 334"):
        group3.clients[0].reduce_scatter(np.zeros(1000, np.float32), np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="rank 0's chunk of 12 elements is 4"):
        group3.clients[0].allgather(np.zeros(3, np.float32), np.zeros(12, np.float32))
    # Nothing was sent: the group still runs the next op.
    test_average_and_barrier(group3)
