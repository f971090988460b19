// Small integer helpers the builders share.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradsync {

// ⌈log₂ value⌉ for value ≥ 1: the number of rounds of a binomial tree over `value` ranks.
inline int ceil_log2(int value) {
  int rounds = 0;
  while ((1 << rounds) < value) ++rounds;
  return rounds;
}

// The largest power of two that is ≤ value, for value ≥ 1.
inline int floor_power_of_two(int value) {
  int power = 1;
  while (power * 2 <= value) power *= 2;
  return power;
}

// value mod modulus in [0, modulus), also for negative value.
inline int positive_mod(int value, int modulus) { return ((value % modulus) + modulus) % modulus; }

// FNV-1a of `size` bytes: a tag that is the same on every host and build, unlike std::hash.
inline std::uint64_t fnv1a(const void* bytes, std::size_t size) {
  std::uint64_t tag = 0xcbf29ce484222325ull;
  for (std::size_t index = 0; index < size; ++index) {
    tag ^= static_cast<const unsigned char*>(bytes)[index];
    tag *= 0x100000001b3ull;
  }
  return tag;
}

}  // namespace gradsync
