// The type an op's values travel in between ranks (docs/architecture.md §4.4): the data type
// itself, or a 16-bit float for f32 and f64 sums. With a 16-bit wire every addition is still done
// in the data type; only what is sent is rounded, once per hop, and the sender keeps the rounded
// value, so every rank ends with the same bits.
#pragma once

#include "collective/status.h"
#include "collective/types.h"

namespace gradsync {

// OK if values of `type` may travel as `wire` in `collective` with `op`: `wire` == `type` always;
// bf16 or f16 for f32 and f64 in sum and avg all-reduce and reduce-scatter, and in all-gather.
// Otherwise an invalid-argument status that says why.
Status check_wire_type(Collective collective, DataType type, ReduceOp op, DataType wire);

// The unit roundoff of a 16-bit wire type: a value rounded to it is off by at most this fraction
// of its magnitude (2^-8 for bf16, 2^-11 for f16), overflow aside.
double unit_roundoff(DataType wire);

// The bound on each element's error when p ranks' `type` values are summed with `wire` on the
// wire, as a fraction of the sum of their magnitudes (docs/clients.md, "Semantics"): at most p
// roundings to the wire type and p + 1 roundings of the data type, (1 + u)^p (1 + eps)^(p + 1) - 1.
double wire_error_bound(DataType wire, DataType type, int p);

}  // namespace gradsync
