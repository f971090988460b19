#include "support/tensor_values.h"

#include <algorithm>
#include <bit>
#include <complex>
#include <cstring>
#include <stdexcept>
#include <string>

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
    default:
      break;
  }
  throw std::logic_error("no float values for " + std::string(name(op)));
}

// Complex values: sums of small integers in each part; for products, positive reals (2 or 0.5 from
// at most one rank in eight), times i on rank i % 3, so that every partial product is exact and
// no part is a zero whose sign would depend on the order of the products.
std::complex<double> complex_value(ReduceOp op, int rank, std::uint64_t i) {
  if (op != ReduceOp::prod) return {float_value(op, rank, i), float_value(op, rank, i + 3)};
  static constexpr double kFactors[] = {2.0, 1.0, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0};
  const double factor = kFactors[(static_cast<std::uint64_t>(rank) + i) % 8];
  return static_cast<std::uint64_t>(rank) == i % 3 ? std::complex<double>(0, factor)
                                                   : std::complex<double>(factor, 0);
}

// torch's bool: any byte but 0 is true (these are 0 to 3), and the result is 0 or 1.
std::uint8_t bool_value(ReduceOp op, int rank, std::uint64_t i) {
  const auto k = static_cast<std::uint64_t>(rank) + i;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::max:
    case ReduceOp::bor:
      return k % 5 == 0 ? static_cast<std::uint8_t>(1 + rank % 3) : 0;
    case ReduceOp::prod:
    case ReduceOp::min:
    case ReduceOp::band:
      return k % 7 == 0 ? 0 : static_cast<std::uint8_t>(1 + rank % 3);
    case ReduceOp::bxor:
      return static_cast<std::uint8_t>((3 * static_cast<std::uint64_t>(rank) + i) % 2);
    default:
      break;
  }
  throw std::logic_error("no bool values for " + std::string(name(op)));
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
    // Bit patterns whose and, or and xor over the ranks keep some bits and clear others.
    case ReduceOp::band:
      return ~(std::int64_t{1} << ((r + j) % 63));
    case ReduceOp::bor:
      return std::int64_t{1} << ((3 * r + j) % 63);
    case ReduceOp::bxor:
      return static_cast<std::int64_t>(static_cast<std::uint64_t>(r + 1) * 0x9E3779B97F4A7C1u +
                                       i * 0x85EBCA77u);
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
  // At least as wide as int, which narrower types are promoted to (0xffff * 0xffff overflows it).
  using U = std::make_unsigned_t<std::common_type_t<T, int>>;
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
      case ReduceOp::band:
        accumulated = static_cast<U>(accumulated & static_cast<U>(value));
        break;
      case ReduceOp::bor:
        accumulated = static_cast<U>(accumulated | static_cast<U>(value));
        break;
      case ReduceOp::bxor:
        accumulated = static_cast<U>(accumulated ^ static_cast<U>(value));
        break;
    }
  }
  return static_cast<T>(accumulated);
}

std::uint8_t bool_reduction(ReduceOp op, int world_size, std::uint64_t i) {
  bool accumulated = bool_value(op, 0, i) != 0;
  for (int r = 1; r < world_size; ++r) {
    const bool value = bool_value(op, r, i) != 0;
    if (op == ReduceOp::bxor) {
      accumulated = accumulated != value;
    } else if (op == ReduceOp::sum || op == ReduceOp::max || op == ReduceOp::bor) {
      accumulated = accumulated || value;
    } else {
      accumulated = accumulated && value;
    }
  }
  return accumulated ? 1 : 0;
}

std::complex<double> complex_reduction(ReduceOp op, int world_size, std::uint64_t i) {
  std::complex<double> accumulated = complex_value(op, 0, i);
  for (int r = 1; r < world_size; ++r) {
    const std::complex<double> value = complex_value(op, r, i);
    if (op == ReduceOp::prod) {
      accumulated = {accumulated.real() * value.real() - accumulated.imag() * value.imag(),
                     accumulated.real() * value.imag() + accumulated.imag() * value.real()};
    } else {
      accumulated += value;
    }
  }
  return accumulated;
}

// Stores an exactly representable complex value as `type`.
void put_complex(Bytes& bytes, DataType type, std::uint64_t i, std::complex<double> value) {
  if (type == DataType::c64) {
    put(bytes, i, std::complex<float>(value));
  } else {
    put(bytes, i, value);
  }
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
      default:
        throw std::logic_error("no float reduction by " + std::string(name(op)));
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
      case DataType::i8:
        put(bytes, i, static_cast<std::int8_t>(integer_value(op, rank, i)));
        break;
      case DataType::i16:
        put(bytes, i, static_cast<std::int16_t>(integer_value(op, rank, i)));
        break;
      case DataType::boolean:
        put(bytes, i, bool_value(op, rank, i));
        break;
      case DataType::c64:
      case DataType::c128:
        put_complex(bytes, type, i, complex_value(op, rank, i));
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
      case DataType::i8:
        put_integer_reduction<std::int8_t>(bytes, op, world_size, i);
        break;
      case DataType::i16:
        put_integer_reduction<std::int16_t>(bytes, op, world_size, i);
        break;
      case DataType::boolean:
        put(bytes, i, bool_reduction(op, world_size, i));
        break;
      case DataType::c64:
      case DataType::c128:
        put_complex(bytes, type, i, complex_reduction(op, world_size, i));
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
