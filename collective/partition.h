// Balanced partitioning: n elements into k contiguous chunks whose lengths differ by at most one.
//
// The first n % k chunks get one extra element, so chunk i starts at i*(n/k) + min(i, n%k).
// n = 0 and n < k are legal: the trailing chunks are then empty. Because the longest chunk sets the
// time of every ring step, no split may be more uneven than this.
#pragma once

#include <cstdint>

namespace gradsync {

struct Chunk {
  std::uint64_t offset = 0;  // in elements
  std::uint64_t count = 0;   // in elements

  std::uint64_t end() const { return offset + count; }
  friend bool operator==(const Chunk&, const Chunk&) = default;
};

// Chunk `index` of `count` elements split into `parts` balanced chunks.
Chunk balanced_chunk(std::uint64_t count, std::uint64_t parts, std::uint64_t index);

// Chunk `index` of the sub-range `range` split into `parts` balanced chunks.
Chunk balanced_chunk(Chunk range, std::uint64_t parts, std::uint64_t index);

}  // namespace gradsync
