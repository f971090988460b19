"""16-bit wire types from Python: an f32 sum sent as bf16 or f16 adds in f32, every rank ends with
the same bits within the documented bound, and values that cancel keep what summing in bf16 (as
torch's own bf16 hook does) loses. Refused combinations raise before or at the daemon."""
import numpy as np
import pytest
import torch

import gradsync

UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def inexact(rank, count):
    """Values of both signs from 2^-4 to 2^4 that no 16-bit type holds exactly."""
    generator = np.random.default_rng(1000 + rank)
    return (generator.uniform(-1, 1, count) * 2.0 ** generator.integers(-4, 5, count)).astype(
        np.float32)


@pytest.mark.parametrize("wire", ["bf16", "f16"])
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_every_rank_gets_the_same_bits_within_the_bound(group3, wire, op):
    p, count = group3.size, 100_003
    inputs = [inexact(rank, count) for rank in range(p)]

    def body(rank, client):
        data = inputs[rank].copy()
        client.allreduce(data, op=op, wire=wire)
        return data

    results = group3.on_every_rank(body)
    for result in results[1:]:
        np.testing.assert_array_equal(result.view(np.uint32), results[0].view(np.uint32))
    exact = np.sum(np.array(inputs, dtype=np.float64), axis=0)
    magnitudes = np.sum(np.abs(np.array(inputs, dtype=np.float64)), axis=0)
    divisor = p if op == "avg" else 1
    gamma = (1 + UNIT_ROUNDOFF[wire]) ** p * (1 + 2.0 ** -24) ** (p + 1) - 1
    error = np.abs(results[0] - exact / divisor)
    assert np.all(error <= gamma * magnitudes / divisor), error.max()
    if op == "avg":
        return
    # A sum is representable in the wire type: it is what every rank was sent.
    as_wire = torch.from_numpy(results[0]).to(torch.bfloat16 if wire == "bf16" else torch.float16)
    np.testing.assert_array_equal(as_wire.float().numpy(), results[0])


def test_values_that_cancel_keep_what_summing_in_bf16_loses(group2):
    # Each rank owns half of the ring's result: there its own value, 1 + 0.6 * 2^-7 (not a bf16),
    # meets the other rank's -1. Rounding every value to bf16 first and summing in bf16, as
    # torch's bf16 hook does, turns 0.6 * 2^-7 into 2^-7; adding in f32 keeps it to 2^-9.
    half = 4096
    inexact_value, exact_value = np.float32(1 + 0.6 * 2.0 ** -7), np.float32(-1.0)
    inputs = [np.concatenate([np.full(half, inexact_value), np.full(half, exact_value)]),
              np.concatenate([np.full(half, exact_value), np.full(half, inexact_value)])]

    def body(rank, client):
        data = inputs[rank].copy()
        client.allreduce(data, wire="bf16", algorithm="ring")
        return data

    result = group2.on_every_rank(body)[0]
    exact = np.float64(inexact_value) + np.float64(exact_value)
    summed_in_bf16 = (torch.from_numpy(inputs[0]).bfloat16() +
                      torch.from_numpy(inputs[1]).bfloat16()).float().numpy()
    gradsync_error = np.abs(result - exact).max() / abs(exact)
    bf16_error = np.abs(summed_in_bf16 - exact).max() / abs(exact)
    assert bf16_error > 0.5
    assert gradsync_error < 2.0 ** -8, gradsync_error


def test_a_wire_type_gradsync_cannot_use_is_refused(group2):
    with pytest.raises(ValueError, match="wire must be 'bf16' or 'f16'"):
        group2.clients[0].allreduce(np.ones(4, dtype=np.float32), wire="f32")

    def body(rank, client):
        with pytest.raises(gradsync.InvalidArgument, match="only f32 and f64 narrow"):
            client.allreduce(np.ones(4, dtype=np.int32), wire="bf16")
        with pytest.raises(gradsync.InvalidArgument, match="max is not a sum"):
            client.allreduce(np.ones(4, dtype=np.float32), op="max", wire="bf16")
        # The daemon is still serving.
        data = np.ones(4, dtype=np.float32)
        client.allreduce(data, wire="bf16")
        return data

    for result in group2.on_every_rank(body):
        np.testing.assert_array_equal(result, np.full(4, 2.0, dtype=np.float32))
