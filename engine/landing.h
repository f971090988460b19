// How an op's values move between its buffers and the wire: a received payload copied or reduced
// into place (in the operand order the schedule names), widened from the wire type it travelled
// in, and a segment narrowed to that type when it is sent. Besides the schedule's local copies and
// the final averaging, this is the one place where an op's values change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "collective/schedule.h"
#include "collective/types.h"
#include "engine/segment_queues.h"

namespace gradsync::engine {

// How one op's values are stored, combined and sent.
struct ValueFormat {
  DataType dtype = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  std::size_t element_size = 4;
  std::optional<DataType> wire;  // set when values travel narrowed to a 16-bit type

  // How many bytes `data_bytes` of the op's values take on the wire.
  std::uint64_t on_the_wire(std::uint64_t data_bytes) const;
};

// Lands a payload that arrived as `received` (in the wire type, if any) in `pieces`: copies it, or
// combines it with what is there as `action` says. `widened` is room the widening may use.
void land(const ValueFormat& format, RecvAction action, const std::vector<Piece>& pieces,
          const std::byte* received, std::vector<std::byte>& widened);

// Rounds the values of `pieces` to the wire type in place, writing the narrowed values back to
// back to `narrowed` (format.on_the_wire of the pieces' length): the sender keeps exactly what its
// peers receive.
void narrow(const ValueFormat& format, const std::vector<Piece>& pieces, std::byte* narrowed);

// Rounds `length` bytes of values at `values` to the wire type in place, `step` bytes at a time
// through `narrowed`, where this rank keeps a value that its peers were sent rounded.
void round_to_wire(const ValueFormat& format, std::byte* values, std::uint64_t length,
                   std::uint64_t step, std::vector<std::byte>& narrowed);

}  // namespace gradsync::engine
