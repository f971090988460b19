// Closed-form tensors for collective tests (docs/architecture.md §15): rank r contributes values
// derived from r, chosen so that the exact reduction is known in advance and is representable in
// every data type, whatever order a schedule combines the ranks in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collective/types.h"

namespace gradsync::testing {

using Bytes = std::vector<std::byte>;

// The tensor rank `rank` contributes to a reduction: `count` elements of `type`.
Bytes contribution(DataType type, ReduceOp op, int rank, std::uint64_t count);

// The exact result of reducing every rank's contribution() with `op` (avg: the sum divided once by
// world_size, by the kernels' documented rule).
Bytes expected_reduction(DataType type, ReduceOp op, int world_size, std::uint64_t count);

// Distinct bytes for data-movement tests: byte k of the tensor that `rank` owns under `tag`.
Bytes pattern(int rank, int tag, std::uint64_t bytes);

}  // namespace gradsync::testing
