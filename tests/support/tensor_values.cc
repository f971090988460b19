#include "support/tensor_values.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>

#include "collective/reduce_kernels.h"

namespace gradsync::testing {

namespace {

// Small integers (and ±2^k for prod) keep every partial result exact in f16 and bf16, whatever
// subset of ranks a schedule combines first: sums stay within ±3p ≤ 192, and at most one rank in
// eight contributes 2 (or 0.5) to a product, so with p ≤ 64 any partial product stays within 2^±8.
double float_value(ReduceOp op, int rank, std::uint64_t i) {
  const auto k = static_cast<std::uint64_t>(rank) + i;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return static_cast<double>(k % 7) - 3.0;
    case ReduceOp::prod: {
      static constexpr double kFactors[] = {2.0, 1.0, -1.0, 1.0, 0.5, 1.0, 1.0, 1.0};
      return kFactors[k % 8];
    }
    case ReduceOp::min:
    case ReduceOp::max:
      return static_cast<double>((7 * static_cast<std::uint64_t>(rank) + i) % 11) - 5.0;
  }
  throw std::logic_error("unknown op");
}

// Integers may wrap: modular arithmetic gives one answer in any order.
std::int64_t integer_value(ReduceOp op, int rank, std::uint64_t i) {
  const auto r = static_cast<std::int64_t>(rank);
  const auto j = static_cast<std::int64_t>(i);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return r * 1000003 + j * 7 - 5000;
    case ReduceOp::prod:
      return ((r + j) % 3 + 1) * ((r + j) % 5 == 0 ? -1 : 1);
    case ReduceOp::min:
    case ReduceOp::max:
      return (7 * r + j) % 11 - 5;
  }
  throw std::logic_error("unknown op");
}

std::uint16_t exact_bf16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0xFFFF) != 0) throw std::logic_error("value is not exact in bf16");
  return static_cast<std::uint16_t>(bits >> 16);
}

template <typename T>
void put(Bytes& bytes, std::uint64_t i, T value) {
  std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
}

template <typename T>
T get(const Bytes& bytes, std::uint64_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

// Stores an exactly representable float value as `type`.
void put_float(Bytes& bytes, DataType type, std::uint64_t i, double value) {
  switch (type) {
    case DataType::f32:
      put(bytes, i, static_cast<float>(value));
      return;
    case DataType::f64:
      put(bytes, i, value);
      return;
    case DataType::f16:
      put(bytes, i, static_cast<_Float16>(value));
      return;
    case DataType::bf16:
      put(bytes, i, exact_bf16(static_cast<float>(value)));
      return;
    default:
      throw std::logic_error("not a float type");
  }
}

template <typename T>
T integer_reduction(ReduceOp op, int world_size, std::uint64_t i) {
  using U = std::make_unsigned_t<T>;
  U accumulated = static_cast<U>(static_cast<T>(integer_value(op, 0, i)));
  for (int r = 1; r < world_size; ++r) {
    const T value = static_cast<T>(integer_value(op, r, i));
    const T current = static_cast<T>(accumulated);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        accumulated = static_cast<U>(accumulated + static_cast<U>(value));
        break;
      case ReduceOp::prod:
        accumulated = static_cast<U>(accumulated * static_cast<U>(value));
        break;
      case ReduceOp::min:
        accumulated = static_cast<U>(std::min(current, value));
        break;
      case ReduceOp::max:
        accumulated = static_cast<U>(std::max(current, value));
        break;
    }
  }
  return static_cast<T>(accumulated);
}

double float_reduction(ReduceOp op, int world_size, std::uint64_t i) {
  double accumulated = float_value(op, 0, i);
  for (int r = 1; r < world_size; ++r) {
    const double value = float_value(op, r, i);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        accumulated += value;
        break;
      case ReduceOp::prod:
        accumulated *= value;
        break;
      case ReduceOp::min:
        accumulated = std::min(accumulated, value);
        break;
      case ReduceOp::max:
        accumulated = std::max(accumulated, value);
        break;
    }
  }
  return accumulated;
}

template <typename T>
void put_integer_reduction(Bytes& bytes, ReduceOp op, int world_size, std::uint64_t i) {
  put(bytes, i, integer_reduction<T>(op, world_size, i));
}

}  // namespace

Bytes contribution(DataType type, ReduceOp op, int rank, std::uint64_t count) {
  Bytes bytes(count * element_size(type));
  for (std::uint64_t i = 0; i < count; ++i) {
    switch (type) {
      case DataType::i32:
        put(bytes, i, static_cast<std::int32_t>(integer_value(op, rank, i)));
        break;
      case DataType::i64:
        put(bytes, i, integer_value(op, rank, i));
        break;
      case DataType::u8:
        put(bytes, i, static_cast<std::uint8_t>(integer_value(op, rank, i)));
        break;
      default:
        put_float(bytes, type, i, float_value(op, rank, i));
        break;
    }
  }
  return bytes;
}

Bytes expected_reduction(DataType type, ReduceOp op, int world_size, std::uint64_t count) {
  Bytes bytes(count * element_size(type));
  for (std::uint64_t i = 0; i < count; ++i) {
    switch (type) {
      case DataType::i32:
        put_integer_reduction<std::int32_t>(bytes, op, world_size, i);
        break;
      case DataType::i64:
        put_integer_reduction<std::int64_t>(bytes, op, world_size, i);
        break;
      case DataType::u8:
        put_integer_reduction<std::uint8_t>(bytes, op, world_size, i);
        break;
      default:
        put_float(bytes, type, i, float_reduction(op, world_size, i));
        break;
    }
  }
  // The exact sum divided once: the one step whose rounding belongs to the kernels' definition.
  finalize_average(type, op, bytes.data(), count, world_size);
  return bytes;
}

Bytes pattern(int rank, int tag, std::uint64_t bytes) {
  Bytes result(bytes);
  for (std::uint64_t k = 0; k < bytes; ++k) {
    result[k] = static_cast<std::byte>((static_cast<std::uint64_t>(rank) * 131 +
                                        static_cast<std::uint64_t>(tag) * 29 + k * 7 + 1) %
                                       251);
  }
  return result;
}

}  // namespace gradsync::testing
