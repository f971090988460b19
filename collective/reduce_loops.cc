// The reduce loops, compiled once per instruction-set level (see CMakeLists.txt): each build
// defines GRADSYNC_KERNEL_ISA, the namespace its entry points live in, and reduce_kernels.cc picks
// the best one the processor supports. Every level performs the same IEEE operations in the same
// order, so ranks on different processors still end with the same bits.
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>

#include "collective/half_float.h"
#include "collective/reduce_kernel_variants.h"

namespace gradsync::GRADSYNC_KERNEL_ISA {
namespace {

// How an element is stored and which type its arithmetic runs in.
template <typename T>
struct Native {
  using Storage = T;
  using Compute = T;
  static T widen(T value) { return value; }
  static T narrow(T value) { return value; }
};

struct Half {
  using Storage = std::uint16_t;
  using Compute = float;
  static float widen(std::uint16_t value) { return f16_to_f32(value); }
  static std::uint16_t narrow(float value) { return f32_to_f16(value); }
};

// 0 is false, anything else true; results are 0 or 1.
struct Boolean {
  using Storage = std::uint8_t;
  using Compute = std::uint8_t;
  static std::uint8_t widen(std::uint8_t value) { return value != 0 ? 1 : 0; }
  static std::uint8_t narrow(std::uint8_t value) { return value; }
};

struct BFloat {
  using Storage = std::uint16_t;
  using Compute = float;
  static float widen(std::uint16_t value) { return bf16_to_f32(value); }
  static std::uint16_t narrow(float value) { return f32_to_bf16(value); }
};

// The interface hands over raw bytes with no alignment or object-type guarantee; a fixed-size
// memcpy is well defined for any address and still compiles to plain unaligned vector accesses.
template <typename T>
T load(const std::byte* from) {
  T value;
  std::memcpy(&value, from, sizeof value);
  return value;
}

template <typename T>
void store(std::byte* to, T value) {
  std::memcpy(to, &value, sizeof value);
}

template <typename T>
inline constexpr bool kIsComplex = false;
template <typename T>
inline constexpr bool kIsComplex<std::complex<T>> = true;

// Signed overflow is UB, unsigned arithmetic wraps: compute in an unsigned type at least as wide
// as int, since narrower ones are promoted to int first (and 0xffff * 0xffff overflows int).
template <typename T, typename Arithmetic>
T wrapping(T lhs, T rhs, Arithmetic arithmetic) {
  using Unsigned = std::make_unsigned_t<std::common_type_t<T, int>>;
  return static_cast<T>(arithmetic(static_cast<Unsigned>(lhs), static_cast<Unsigned>(rhs)));
}

template <typename T>
using FloatBits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;

// A NaN operand makes the result a quiet NaN with lhs's payload if lhs is NaN, else rhs's. The
// hardware does not fix this when both are NaN: x86 returns the first source operand's payload,
// and the compiler may swap the operands of a commutative operation differently at each
// instruction-set level. Selecting explicitly keeps every rank's bits equal.
template <typename T>
T with_nan_rule(T lhs, T rhs, FloatBits<T> result) {
  using Bits = FloatBits<T>;
  constexpr Bits kQuietBit = Bits{1} << (std::numeric_limits<T>::digits - 2);
  const Bits quiet_nan =
      (std::isnan(lhs) ? std::bit_cast<Bits>(lhs) : std::bit_cast<Bits>(rhs)) | kQuietBit;
  return std::bit_cast<T>(std::isunordered(lhs, rhs) ? quiet_nan : result);
}

// IEEE 754-2019 minimum/maximum, with the NaN rule above. Operands that compare equal differ at
// most in the sign of zero, and merging their bits settles that: AND gives +0 for max, OR gives -0
// for min. The result is selected on the bits after quiet comparisons only, because GCC does not
// if-convert a select whose arm needs a floating-point operation that may trap (it sinks, say, a
// NaN-making lhs + rhs into that arm), and the loop would stay scalar.
template <typename T, typename MergeBits>
T ieee_min_max(T lhs, T rhs, bool lhs_wins, MergeBits merge_bits) {
  using Bits = FloatBits<T>;
  const Bits lhs_bits = std::bit_cast<Bits>(lhs);
  const Bits rhs_bits = std::bit_cast<Bits>(rhs);
  Bits result = lhs_wins ? lhs_bits : rhs_bits;
  result = lhs == rhs ? static_cast<Bits>(merge_bits(lhs_bits, rhs_bits)) : result;
  return with_nan_rule(lhs, rhs, result);
}

// Sum and product: the IEEE result, except that NaN operands follow the NaN rule above (a NaN that
// the operation itself creates, as inf − inf, is the hardware's default NaN on every level).
template <typename T, typename Arithmetic>
T ieee_arithmetic(T lhs, T rhs, Arithmetic arithmetic) {
  return with_nan_rule(lhs, rhs, std::bit_cast<FloatBits<T>>(static_cast<T>(arithmetic(lhs, rhs))));
}

// A NaN that a complex product makes is the type's default quiet NaN: which operand's payload the
// hardware would pass on depends on how the compiler ordered the operands.
template <typename T>
T without_payload(T value) {
  return std::isnan(value) ? std::numeric_limits<T>::quiet_NaN() : value;
}

struct Sum {
  template <typename T>
  T operator()(T lhs, T rhs) const {
    if constexpr (std::is_integral_v<T>) {
      return wrapping(lhs, rhs, std::plus<>{});
    } else if constexpr (kIsComplex<T>) {
      return T((*this)(lhs.real(), rhs.real()), (*this)(lhs.imag(), rhs.imag()));
    } else {
      return ieee_arithmetic(lhs, rhs, std::plus<>{});
    }
  }
};

struct Prod {
  template <typename T>
  T operator()(T lhs, T rhs) const {
    if constexpr (std::is_integral_v<T>) {
      return wrapping(lhs, rhs, std::multiplies<>{});
    } else if constexpr (kIsComplex<T>) {
      // The textbook product, each operation rounded (no C Annex G recovery of infinities), so
      // that every instruction-set level computes the same bits.
      const auto a = lhs.real(), b = lhs.imag(), c = rhs.real(), d = rhs.imag();
      return T(without_payload(a * c - b * d), without_payload(a * d + b * c));
    } else {
      return ieee_arithmetic(lhs, rhs, std::multiplies<>{});
    }
  }
};

// The bitwise operators, on integers (and bool, stored as 0 or 1).
struct BitAnd {
  template <typename T>
  requires std::is_integral_v<T> T operator()(T lhs, T rhs) const {
    return static_cast<T>(lhs & rhs);
  }
};

struct BitOr {
  template <typename T>
  requires std::is_integral_v<T> T operator()(T lhs, T rhs) const {
    return static_cast<T>(lhs | rhs);
  }
};

struct BitXor {
  template <typename T>
  requires std::is_integral_v<T> T operator()(T lhs, T rhs) const {
    return static_cast<T>(lhs ^ rhs);
  }
};

struct Min {
  template <typename T>
  requires(!kIsComplex<T>) T operator()(T lhs, T rhs) const {
    if constexpr (std::is_integral_v<T>) {
      return rhs < lhs ? rhs : lhs;
    } else {
      return ieee_min_max(lhs, rhs, std::isless(lhs, rhs), std::bit_or<>{});
    }
  }
};

struct Max {
  template <typename T>
  requires(!kIsComplex<T>) T operator()(T lhs, T rhs) const {
    if constexpr (std::is_integral_v<T>) {
      return lhs < rhs ? rhs : lhs;
    } else {
      return ieee_min_max(lhs, rhs, std::isgreater(lhs, rhs), std::bit_and<>{});
    }
  }
};

template <typename Visitor>
void visit_element(DataType type, Visitor&& visitor) {
  switch (type) {
    case DataType::f32:
      return visitor(Native<float>{});
    case DataType::f64:
      return visitor(Native<double>{});
    case DataType::f16:
      return visitor(Half{});
    case DataType::bf16:
      return visitor(BFloat{});
    case DataType::i32:
      return visitor(Native<std::int32_t>{});
    case DataType::i64:
      return visitor(Native<std::int64_t>{});
    case DataType::u8:
      return visitor(Native<std::uint8_t>{});
    case DataType::i8:
      return visitor(Native<std::int8_t>{});
    case DataType::i16:
      return visitor(Native<std::int16_t>{});
    case DataType::boolean:
      return visitor(Boolean{});
    case DataType::c64:
      return visitor(Native<std::complex<float>>{});
    case DataType::c128:
      return visitor(Native<std::complex<double>>{});
  }
  std::abort();
}

template <typename Visitor>
void visit_op(ReduceOp op, Visitor&& visitor) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return visitor(Sum{});
    case ReduceOp::prod:
      return visitor(Prod{});
    case ReduceOp::min:
      return visitor(Min{});
    case ReduceOp::max:
      return visitor(Max{});
    case ReduceOp::band:
      return visitor(BitAnd{});
    case ReduceOp::bor:
      return visitor(BitOr{});
    case ReduceOp::bxor:
      return visitor(BitXor{});
  }
  std::abort();
}

template <typename Element, typename Op>
void reduce_elements(std::byte* out, const std::byte* lhs, const std::byte* rhs,
                     std::size_t count) {
  using Storage = typename Element::Storage;
  constexpr Op op;
  // `out` may equal `lhs` or `rhs`: each element is read before the store to the same index, a
  // dependence GCC's runtime alias check accepts, so in-place calls take the vector path too.
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t offset = i * sizeof(Storage);
    const auto combined = op(Element::widen(load<Storage>(lhs + offset)),
                             Element::widen(load<Storage>(rhs + offset)));
    store(out + offset, Element::narrow(combined));
  }
}

template <typename Element>
void divide_elements(std::byte* data, std::size_t count, int world_size) {
  using Storage = typename Element::Storage;
  using Compute = typename Element::Compute;
  // Integers divide in at least int so that a u8 sum is not divided by world_size mod 256; a
  // complex number divides each part by a real.
  using Divisor = decltype([] {
    if constexpr (std::is_integral_v<Compute>)
      return std::common_type_t<Compute, int>{};
    else if constexpr (kIsComplex<Compute>)
      return typename Compute::value_type{};
    else
      return Compute{};
  }());
  const auto divisor = static_cast<Divisor>(world_size);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t offset = i * sizeof(Storage);
    const auto quotient = Element::widen(load<Storage>(data + offset)) / divisor;
    store(data + offset, Element::narrow(static_cast<Compute>(quotient)));
  }
}

// A double narrowed to float rounding to odd: narrowing that float to 16 bits then rounds as if
// from the double itself (float keeps more than two bits beyond any 16-bit format), where
// rounding to nearest twice could be off by one 16-bit ulp.
inline float to_float_rounding_to_odd(double value) {
  const float nearest = static_cast<float>(value);
  const bool inexact = static_cast<double>(nearest) != value && !std::isnan(value);
  const bool even = (std::bit_cast<std::uint32_t>(nearest) & 1u) == 0;
  const float toward_value = std::nextafter(nearest, value > static_cast<double>(nearest)
                                                         ? std::numeric_limits<float>::infinity()
                                                         : -std::numeric_limits<float>::infinity());
  return inexact && even ? toward_value : nearest;
}

inline float to_float(float value) { return value; }
inline float to_float(double value) { return to_float_rounding_to_odd(value); }

template <typename Wire, typename Data>
void narrow_elements(std::byte* wire_out, std::byte* data, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const auto narrowed = Wire::narrow(to_float(load<Data>(data + i * sizeof(Data))));
    store(wire_out + i * sizeof narrowed, narrowed);
    store(data + i * sizeof(Data), static_cast<Data>(Wire::widen(narrowed)));
  }
}

template <typename Wire, typename Data>
void widen_elements(std::byte* data_out, const std::byte* wire_in, std::size_t count) {
  using Storage = typename Wire::Storage;
  for (std::size_t i = 0; i < count; ++i) {
    const auto widened = Wire::widen(load<Storage>(wire_in + i * sizeof(Storage)));
    store(data_out + i * sizeof(Data), static_cast<Data>(widened));
  }
}

// Calls visitor(Wire{}, Data{}) for a pair that wire_type.h allows.
template <typename Visitor>
void visit_wire_pair(DataType type, DataType wire, Visitor&& visitor) {
  const auto with_data = [&]<typename Wire>(Wire) {
    if (type == DataType::f32) return visitor(Wire{}, float{});
    if (type == DataType::f64) return visitor(Wire{}, double{});
    std::abort();
  };
  if (wire == DataType::bf16) return with_data(BFloat{});
  if (wire == DataType::f16) return with_data(Half{});
  std::abort();
}

}  // namespace

void narrow_for_wire(DataType type, DataType wire, std::byte* wire_out, std::byte* data,
                     std::size_t count) {
  visit_wire_pair(type, wire, [&]<typename Wire, typename Data>(Wire, Data) {
    narrow_elements<Wire, Data>(wire_out, data, count);
  });
}

void widen_from_wire(DataType type, DataType wire, std::byte* data_out, const std::byte* wire_in,
                     std::size_t count) {
  visit_wire_pair(type, wire, [&]<typename Wire, typename Data>(Wire, Data) {
    widen_elements<Wire, Data>(data_out, wire_in, count);
  });
}

void reduce(DataType type, ReduceOp op, std::byte* out, const std::byte* lhs, const std::byte* rhs,
            std::size_t count) {
  // On 0 and 1, sum (or) is max and product (and) is min; the bitwise operators are themselves.
  if (type == DataType::boolean && op == ReduceOp::sum) op = ReduceOp::max;
  if (type == DataType::boolean && op == ReduceOp::prod) op = ReduceOp::min;
  visit_element(type, [&]<typename Element>(Element) {
    visit_op(op, [&]<typename Op>(Op) {
      using Compute = typename Element::Compute;
      // why_op_cannot_reduce() refuses the other pairs before an op starts.
      if constexpr (std::is_invocable_v<Op, Compute, Compute>) {
        reduce_elements<Element, Op>(out, lhs, rhs, count);
      } else {
        std::abort();
      }
    });
  });
}

void finalize_average(DataType type, ReduceOp op, std::byte* data, std::size_t count,
                      int world_size) {
  if (op != ReduceOp::avg) return;
  // Dividing by zero or a negative rank count is a caller bug; integer division by zero would be
  // UB, so fail loudly instead.
  if (world_size < 1) std::abort();
  visit_element(
      type, [&]<typename Element>(Element) { divide_elements<Element>(data, count, world_size); });
}

}  // namespace gradsync::GRADSYNC_KERNEL_ISA
