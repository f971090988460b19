// Throughput of the in-place sum kernel at 64 MiB per operand, far beyond the caches, and of the
// conversions to and from a 16-bit wire type, next to a memcpy of the same size as the
// memory-bandwidth yardstick.
//
// Bytes processed counts the input bytes read per call: both operands (2 x 64 MiB) for a
// reduction, the f32 values (64 MiB) for a narrowing (which also writes them back rounded, and
// 32 MiB of 16-bit values), the 16-bit values (32 MiB) for a widening, the source (64 MiB) for
// memcpy.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collective/reduce_kernels.h"
#include "collective/types.h"

namespace {

using gradsync::DataType;

constexpr std::size_t kOperandBytes = std::size_t{64} << 20;

std::vector<std::byte> repeated(const void* element, std::size_t element_size) {
  std::vector<std::byte> buffer(kOperandBytes);
  for (std::size_t offset = 0; offset < kOperandBytes; offset += element_size) {
    std::memcpy(buffer.data() + offset, element, element_size);
  }
  return buffer;
}

// The accumulator holds `one` and the other operand zeros, so every iteration reduces the same
// ordinary, normal values however many iterations run.
template <typename Bits>
void bm_sum_in_place(benchmark::State& state, DataType type, Bits one) {
  std::vector<std::byte> accumulator = repeated(&one, sizeof one);
  const std::vector<std::byte> zeros(kOperandBytes);
  const std::size_t count = kOperandBytes / gradsync::element_size(type);
  for (auto _ : state) {
    gradsync::reduce(type, gradsync::ReduceOp::sum, accumulator.data(), accumulator.data(),
                     zeros.data(), count);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * kOperandBytes);
}

void bm_narrow_f32(benchmark::State& state, DataType wire) {
  const float value = 1.2345678f;
  std::vector<std::byte> values = repeated(&value, sizeof value);
  std::vector<std::byte> narrowed(kOperandBytes / 2);
  const std::size_t count = kOperandBytes / sizeof value;
  for (auto _ : state) {
    gradsync::narrow_for_wire(DataType::f32, wire, narrowed.data(), values.data(), count);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * kOperandBytes);
}

void bm_widen_f32(benchmark::State& state, DataType wire, std::uint16_t one) {
  const std::vector<std::byte> narrowed = repeated(&one, sizeof one);
  std::vector<std::byte> values(kOperandBytes * 2);
  const std::size_t count = kOperandBytes / sizeof one;
  for (auto _ : state) {
    gradsync::widen_from_wire(DataType::f32, wire, values.data(), narrowed.data(), count);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * kOperandBytes);
}

void bm_memcpy(benchmark::State& state) {
  const std::vector<std::byte> source(kOperandBytes, std::byte{1});
  std::vector<std::byte> destination(kOperandBytes);
  for (auto _ : state) {
    std::memcpy(destination.data(), source.data(), kOperandBytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * kOperandBytes);
}

BENCHMARK_CAPTURE(bm_sum_in_place, f32, DataType::f32, std::uint32_t{0x3f800000})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_sum_in_place, bf16, DataType::bf16, std::uint16_t{0x3f80})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_sum_in_place, f16, DataType::f16, std::uint16_t{0x3c00})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_narrow_f32, to_bf16, DataType::bf16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_narrow_f32, to_f16, DataType::f16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_widen_f32, from_bf16, DataType::bf16, std::uint16_t{0x3f80})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_widen_f32, from_f16, DataType::f16, std::uint16_t{0x3c00})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(bm_memcpy)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
