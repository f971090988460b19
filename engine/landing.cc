#include "engine/landing.h"

#include <algorithm>
#include <cstring>

#include "collective/reduce_kernels.h"

namespace gradsync::engine {

std::uint64_t ValueFormat::on_the_wire(std::uint64_t data_bytes) const {
  if (!wire) return data_bytes;
  return data_bytes / element_size * gradsync::element_size(*wire);
}

void land(const ValueFormat& format, RecvAction action, const std::vector<Piece>& pieces,
          const std::byte* received, std::vector<std::byte>& widened) {
  for (const Piece& piece : pieces) {
    const std::size_t count = piece.length / format.element_size;
    const std::byte* values = received;
    if (format.wire && action == RecvAction::copy) {
      widen_from_wire(format.dtype, *format.wire, piece.address, received, count);
    } else if (format.wire) {
      widened.resize(std::max(widened.size(), piece.length));
      widen_from_wire(format.dtype, *format.wire, widened.data(), received, count);
      values = widened.data();
    }
    if (action == RecvAction::copy) {
      if (!format.wire) std::memcpy(piece.address, values, piece.length);
    } else {
      const bool local_first = action == RecvAction::reduce_local_first;
      reduce(format.dtype, format.op, piece.address, local_first ? piece.address : values,
             local_first ? values : piece.address, count);
    }
    received += format.on_the_wire(piece.length);
  }
}

void narrow(const ValueFormat& format, const std::vector<Piece>& pieces, std::byte* narrowed) {
  for (const Piece& piece : pieces) {
    const std::size_t count = piece.length / format.element_size;
    narrow_for_wire(format.dtype, *format.wire, narrowed, piece.address, count);
    narrowed += format.on_the_wire(piece.length);
  }
}

void round_to_wire(const ValueFormat& format, std::byte* values, std::uint64_t length,
                   std::uint64_t step, std::vector<std::byte>& narrowed) {
  step = std::min(step, length);
  narrowed.resize(format.on_the_wire(step));
  for (std::uint64_t offset = 0; offset < length; offset += step) {
    narrow(format, {{values + offset, std::min(step, length - offset)}}, narrowed.data());
  }
}

}  // namespace gradsync::engine
