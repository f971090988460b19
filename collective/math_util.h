// Small integer helpers the builders share.
#pragma once

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

}  // namespace gradsync
