#include "cli/wire_error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace gradsync::cli {

namespace {

// Rank r's element i: a multiple of 2^-23 in [-1, 1), exact in f32 and f64 (so their sum over up
// to 2^29 ranks is exact in f64), and rarely a bf16 or f16 value.
double test_value(int rank, std::uint64_t i) {
  std::uint64_t z = (static_cast<std::uint64_t>(rank) << 40) ^ i;  // splitmix64
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return std::ldexp(static_cast<double>(z >> 40), -23) - 1.0;
}

}  // namespace

double measure_wire_error(Client& client, DataType type, ReduceOp op, DataType wire,
                          std::uint64_t count) {
  const int rank = client.rank();
  const int p = client.world_size();
  const bool doubles = type == DataType::f64;
  std::vector<double> as_f64(doubles ? count : 0);
  std::vector<float> as_f32(doubles ? 0 : count);
  for (std::uint64_t i = 0; i < count; ++i) {
    if (doubles) {
      as_f64[i] = test_value(rank, i);
    } else {
      as_f32[i] = static_cast<float>(test_value(rank, i));
    }
  }
  OpOptions options;
  options.op = op;
  options.wire = wire;
  client.allreduce(doubles ? static_cast<void*>(as_f64.data()) : as_f32.data(), count, type,
                   options);
  if (rank != 0) return 0;
  double worst = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    double exact = 0;
    double magnitude = 0;
    for (int r = 0; r < p; ++r) {
      const double x = test_value(r, i);
      exact += x;
      magnitude += std::abs(x);
    }
    if (op == ReduceOp::avg) {
      exact /= p;
      magnitude /= p;
    }
    const double got = doubles ? as_f64[i] : as_f32[i];
    if (magnitude > 0) worst = std::max(worst, std::abs(got - exact) / magnitude);
  }
  return worst;
}

}  // namespace gradsync::cli
