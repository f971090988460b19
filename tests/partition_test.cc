#include "collective/partition.h"

#include <gtest/gtest.h>

namespace gradsync {
namespace {

TEST(BalancedChunk, CoversTheRangeInOrderWithLengthsWithinOne) {
  for (std::uint64_t count : {0, 1, 2, 3, 7, 63, 64, 65, 1000, 4099}) {
    for (std::uint64_t parts : {1, 2, 3, 4, 5, 7, 8, 16, 17, 64, 100}) {
      std::uint64_t next = 0;
      std::uint64_t shortest = count;
      std::uint64_t longest = 0;
      for (std::uint64_t i = 0; i < parts; ++i) {
        const Chunk chunk = balanced_chunk(count, parts, i);
        EXPECT_EQ(chunk.offset, next) << count << " into " << parts << ", chunk " << i;
        next = chunk.end();
        shortest = std::min(shortest, chunk.count);
        longest = std::max(longest, chunk.count);
      }
      EXPECT_EQ(next, count) << count << " into " << parts;
      EXPECT_LE(longest - shortest, 1u) << count << " into " << parts;
    }
  }
}

TEST(BalancedChunk, LongerChunksComeFirst) {
  // 10 into 4: 3, 3, 2, 2.
  EXPECT_EQ(balanced_chunk(10, 4, 0), (Chunk{0, 3}));
  EXPECT_EQ(balanced_chunk(10, 4, 1), (Chunk{3, 3}));
  EXPECT_EQ(balanced_chunk(10, 4, 2), (Chunk{6, 2}));
  EXPECT_EQ(balanced_chunk(10, 4, 3), (Chunk{8, 2}));
}

TEST(BalancedChunk, FewerElementsThanPartsLeavesTrailingChunksEmpty) {
  EXPECT_EQ(balanced_chunk(2, 5, 1), (Chunk{1, 1}));
  EXPECT_EQ(balanced_chunk(2, 5, 2), (Chunk{2, 0}));
  EXPECT_EQ(balanced_chunk(2, 5, 4), (Chunk{2, 0}));
  EXPECT_EQ(balanced_chunk(0, 3, 0), (Chunk{0, 0}));
}

TEST(BalancedChunk, SplitsASubRange) {
  EXPECT_EQ(balanced_chunk(Chunk{100, 5}, 2, 0), (Chunk{100, 3}));
  EXPECT_EQ(balanced_chunk(Chunk{100, 5}, 2, 1), (Chunk{103, 2}));
}

TEST(BalancedChunkDeathTest, RejectsZeroPartsAndAnIndexOutOfRange) {
  EXPECT_DEATH(balanced_chunk(10, 0, 0), "parts > 0u");
  EXPECT_DEATH(balanced_chunk(10, 4, 4), "index < parts \\(4 vs 4\\)");
}

}  // namespace
}  // namespace gradsync
