#include "collective/partition.h"

#include <algorithm>

#include "collective/check.h"

namespace gradsync {

Chunk balanced_chunk(std::uint64_t count, std::uint64_t parts, std::uint64_t index) {
  GRADSYNC_CHECK_GT(parts, 0u);
  GRADSYNC_CHECK_LT(index, parts);
  const std::uint64_t base = count / parts;
  const std::uint64_t extra = count % parts;
  return Chunk{index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

Chunk balanced_chunk(Chunk range, std::uint64_t parts, std::uint64_t index) {
  Chunk chunk = balanced_chunk(range.count, parts, index);
  chunk.offset += range.offset;
  return chunk;
}

}  // namespace gradsync
