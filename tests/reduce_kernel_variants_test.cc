// Ranks may run on processors of different instruction-set levels; every level's kernels must
// produce the same bits as the baseline's, or ranks would drift apart.
#include "collective/reduce_kernel_variants.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace gradsync {
namespace {

#if defined(__x86_64__)

// Names the first differing element with its operands, so that a failure says what diverged.
std::string first_difference(const std::vector<std::byte>& actual,
                             const std::vector<std::byte>& expected,
                             const std::vector<std::byte>& lhs, const std::vector<std::byte>& rhs,
                             std::size_t size) {
  for (std::size_t i = 0; i < actual.size(); i += size) {
    if (!std::equal(actual.begin() + i, actual.begin() + i + size, expected.begin() + i)) {
      const auto hex = [&](const std::vector<std::byte>& bytes) {
        std::string text = "0x";
        for (std::size_t k = size; k-- > 0;) {
          char digits[3];
          std::snprintf(digits, sizeof digits, "%02x", static_cast<unsigned>(bytes[i + k]));
          text += digits;
        }
        return text;
      };
      return "element " + std::to_string(i / size) + ": lhs " + hex(lhs) + ", rhs " + hex(rhs) +
             ": x86-64-v3 gives " + hex(actual) + ", baseline " + hex(expected);
    }
  }
  return "no difference";
}

std::vector<std::byte> random_bytes(std::size_t size, std::mt19937_64& random) {
  std::vector<std::byte> bytes(size);
  for (auto& byte : bytes) byte = static_cast<std::byte>(random());
  return bytes;
}

TEST(ReduceKernelVariants, X86_64_V3AgreesBitwiseWithBaseline) {
  if (!__builtin_cpu_supports("x86-64-v3")) GTEST_SKIP() << "this processor lacks x86-64-v3";
  std::mt19937_64 random(42);
  constexpr std::size_t kCount = 10007;  // random bit patterns: NaNs, infs, subnormals included
  for (DataType type : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!why_op_cannot_reduce(type, op).empty()) continue;
      const std::size_t bytes = kCount * element_size(type);
      const auto lhs = random_bytes(bytes, random);
      const auto rhs = random_bytes(bytes, random);
      std::vector<std::byte> expected(bytes);
      std::vector<std::byte> actual(bytes);
      baseline::reduce(type, op, expected.data(), lhs.data(), rhs.data(), kCount);
      x86_64_v3::reduce(type, op, actual.data(), lhs.data(), rhs.data(), kCount);
      ASSERT_TRUE(actual == expected)
          << name(type) << " " << name(op) << ", "
          << first_difference(actual, expected, lhs, rhs, element_size(type));
      baseline::finalize_average(type, op, expected.data(), kCount, 7);
      x86_64_v3::finalize_average(type, op, actual.data(), kCount, 7);
      ASSERT_TRUE(actual == expected) << name(type) << " " << name(op) << " finalized";
    }
  }
}

#endif

}  // namespace
}  // namespace gradsync
