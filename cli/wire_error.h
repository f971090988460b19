// What a 16-bit wire costs in accuracy, measured: one all-reduce of values in [-1, 1) that the
// wire type cannot hold exactly, against their exact sum.
#pragma once

#include <cstdint>

#include "client/gradsync_client.h"

namespace gradsync::cli {

// Runs one all-reduce of `count` values of `type` (f32 or f64) with `op` (sum or avg), sent as
// `wire`; every rank calls it. Returns, on rank 0, the largest |result - exact| over the elements
// as a fraction of the sum of the element's magnitudes (the terms of the documented bound,
// wire_error_bound), and 0 on the other ranks. Throws ClientError as the op does.
double measure_wire_error(Client& client, DataType type, ReduceOp op, DataType wire,
                          std::uint64_t count);

}  // namespace gradsync::cli
