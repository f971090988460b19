// Element-wise reduction kernels, one per (data type, operator).
//
// Semantics, the same on every rank so that results are bitwise reproducible:
// - out[i] = lhs[i] (op) rhs[i]; `out` may alias `lhs` or `rhs` exactly (in-place reduction).
//   Schedules fix the operand order, so a non-commutative corner (NaN payloads, signed zeros)
//   still yields the same bits on every rank.
// - Floats follow IEEE 754: sum and prod propagate NaN and inf; min and max propagate NaN and order
//   -0 below +0. A NaN operand yields a quiet NaN with lhs's payload if lhs is NaN, else rhs's.
// - f16 and bf16 are widened to f32, combined, and rounded back once (round to nearest even).
// - Integers wrap around (two's complement for i32/i64, modulo 256 for u8); no overflow is UB.
// - avg combines like sum; finalize_average() then divides once by the number of ranks
//   (integers: the wrapped sum divided by p, truncated toward zero); world_size must be ≥ 1.
#pragma once

#include <cstddef>

#include "collective/types.h"

namespace gradsync {

void reduce(DataType type, ReduceOp op, std::byte* out, const std::byte* lhs, const std::byte* rhs,
            std::size_t count);

// Applies the one-time scaling of ReduceOp::avg; a no-op for every other operator.
void finalize_average(DataType type, ReduceOp op, std::byte* data, std::size_t count,
                      int world_size);

// A 16-bit wire type for f32 or f64 values (collective/wire_type.h says which pairs are allowed).
// narrow_for_wire writes `count` values of `data` rounded to `wire` (to nearest, ties to even;
// an f64 as if directly) into `wire_out`, and replaces each value in `data` by its rounded value,
// so that the sender keeps exactly what its peers receive. widen_from_wire converts back, exactly.
void narrow_for_wire(DataType type, DataType wire, std::byte* wire_out, std::byte* data,
                     std::size_t count);
void widen_from_wire(DataType type, DataType wire, std::byte* data_out, const std::byte* wire_in,
                     std::size_t count);

}  // namespace gradsync
