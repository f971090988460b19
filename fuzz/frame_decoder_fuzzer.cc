// The data-plane frame decoder on arbitrary 88-byte headers: it never crashes, and whatever it
// accepts encodes back to the same bytes and describes itself.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gradsync::engine;
  if (size < kFrameHeaderBytes) return 0;
  EncodedHeader bytes;
  std::memcpy(bytes.data(), data, kFrameHeaderBytes);
  FrameHeader header;
  if (!decode(bytes, header).ok()) return 0;
  if (encode(header) != bytes) __builtin_trap();
  (void)header.descriptor.to_string();
  (void)header.op.to_string();
  return 0;
}
