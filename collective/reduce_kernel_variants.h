// The reduce kernels of each instruction-set level, for the dispatcher in reduce_kernels.cc and for
// the test that checks every level against the others. Callers use reduce_kernels.h.
#pragma once

#include <cstddef>

#include "collective/types.h"

namespace gradsync {

#define GRADSYNC_DECLARE_KERNELS(isa)                                                      \
  namespace isa {                                                                          \
  void reduce(DataType type, ReduceOp op, std::byte* out, const std::byte* lhs,            \
              const std::byte* rhs, std::size_t count);                                    \
  void finalize_average(DataType type, ReduceOp op, std::byte* data, std::size_t count,    \
                        int world_size);                                                   \
  void narrow_for_wire(DataType type, DataType wire, std::byte* wire_out, std::byte* data, \
                       std::size_t count);                                                 \
  void widen_from_wire(DataType type, DataType wire, std::byte* data_out,                  \
                       const std::byte* wire_in, std::size_t count);                       \
  }

GRADSYNC_DECLARE_KERNELS(baseline)
#if defined(__x86_64__)
GRADSYNC_DECLARE_KERNELS(x86_64_v3)  // AVX2, FMA, F16C
#endif

#undef GRADSYNC_DECLARE_KERNELS

}  // namespace gradsync
