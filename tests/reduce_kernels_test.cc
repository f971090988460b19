// Checks the reduce kernels and the 16-bit float conversions against scalar references written
// independently of the code under test: f16 through GCC's _Float16 (libgcc's soft-float
// conversions), bf16 by picking the nearer of its two neighbouring bf16 values in double
// arithmetic, and every operator by computing in double (or a wider integer) and rounding once to
// the element type. That is also what the kernels must produce: they compute f16 and bf16 in f32
// and then round, and for +, * and / an intermediate with at least 2p + 2 significant bits makes
// the second rounding innocuous (f32 has 24; f16 needs 24, bf16 18; the references' double
// intermediate has 53 where f32 needs 50).
#include "collective/reduce_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "collective/half_float.h"
#include "collective/types.h"

namespace {

using gradsync::DataType;
using gradsync::ReduceOp;
using Bytes = std::vector<std::byte>;

__extension__ using Int128 = __int128;
__extension__ using UInt128 = unsigned __int128;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- References ----

float ref_f16_to_f32(std::uint16_t bits) {
  _Float16 half;
  std::memcpy(&half, &bits, sizeof half);
  return static_cast<float>(half);
}

// Converting straight from double rounds once, unlike going through float.
template <typename T>
std::uint16_t ref_f16_from(T value) {
  const auto half = static_cast<_Float16>(value);
  std::uint16_t bits;
  std::memcpy(&bits, &half, sizeof bits);
  return bits;
}

double ref_bf16_to_double(std::uint16_t bits) {
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  const int exponent = (bits >> 7) & 0xff;
  const int mantissa = bits & 0x7f;
  if (exponent == 0xff) return mantissa != 0 ? kNaN : sign * kInf;
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

// The nearer of the two bf16 values around `value`, ties to the even one; overflow gives inf.
std::uint16_t ref_bf16_from_double(double value) {
  if (std::isnan(value)) return 0x7fc0;
  const std::uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::fabs(value);
  if (magnitude == 0) return sign;
  if (std::isinf(magnitude)) return sign | 0x7f80;
  int exponent;
  std::frexp(magnitude, &exponent);  // magnitude in [2^(exponent - 1), 2^exponent)
  // bf16 keeps 8 significant bits; below 2^-126 the spacing stays that of the subnormals.
  const double ulp = std::ldexp(1.0, std::max(exponent - 1, -126) - 7);
  const double steps = std::floor(magnitude / ulp);
  const double lower = steps * ulp;
  const double upper = lower + ulp;
  const double below = magnitude - lower;
  const double above = upper - magnitude;
  const bool take_upper = above < below || (above == below && std::fmod(steps, 2.0) != 0.0);
  const double rounded = take_upper ? upper : lower;
  if (rounded >= std::ldexp(1.0, 128)) return sign | 0x7f80;
  // Every bf16 value is a float whose low 16 bits are zero.
  return sign | static_cast<std::uint16_t>(
                    std::bit_cast<std::uint32_t>(static_cast<float>(rounded)) >> 16);
}

// Elements are handled as their bit pattern, zero-extended.
std::uint64_t get_bits(DataType type, const std::byte* data, std::size_t index) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, data + index * gradsync::element_size(type),
              gradsync::element_size(type));  // little-endian
  return bits;
}

void set_bits(DataType type, std::byte* data, std::size_t index, std::uint64_t bits) {
  std::memcpy(data + index * gradsync::element_size(type), &bits, gradsync::element_size(type));
}

double decode_float(DataType type, std::uint64_t bits) {
  switch (type) {
    case DataType::f32:
      return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    case DataType::f64:
      return std::bit_cast<double>(bits);
    case DataType::f16:
      return ref_f16_to_f32(static_cast<std::uint16_t>(bits));
    case DataType::bf16:
      return ref_bf16_to_double(static_cast<std::uint16_t>(bits));
    default:
      ADD_FAILURE() << "not a float type";
      return 0;
  }
}

std::uint64_t encode_float(DataType type, double value) {
  switch (type) {
    case DataType::f32:
      return std::bit_cast<std::uint32_t>(static_cast<float>(value));
    case DataType::f64:
      return std::bit_cast<std::uint64_t>(value);
    case DataType::f16:
      return ref_f16_from(value);
    case DataType::bf16:
      return ref_bf16_from_double(value);
    default:
      ADD_FAILURE() << "not a float type";
      return 0;
  }
}

std::uint64_t quiet_bit(DataType type) {
  switch (type) {
    case DataType::f32:
      return std::uint64_t{1} << 22;
    case DataType::f64:
      return std::uint64_t{1} << 51;
    case DataType::f16:
      return std::uint64_t{1} << 9;
    case DataType::bf16:
      return std::uint64_t{1} << 6;
    default:
      return 0;
  }
}

double ref_float_op(ReduceOp op, double lhs, double rhs) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return lhs + rhs;
    case ReduceOp::prod:
      return lhs * rhs;
    case ReduceOp::min:
      if (std::isnan(lhs) || std::isnan(rhs)) return kNaN;
      if (lhs == 0 && rhs == 0) return std::signbit(lhs) || std::signbit(rhs) ? -0.0 : 0.0;
      return lhs < rhs ? lhs : rhs;
    case ReduceOp::max:
      if (std::isnan(lhs) || std::isnan(rhs)) return kNaN;
      if (lhs == 0 && rhs == 0) return std::signbit(lhs) && std::signbit(rhs) ? -0.0 : 0.0;
      return lhs > rhs ? lhs : rhs;
    default:
      ADD_FAILURE() << "floats have no " << gradsync::name(op);
  }
  return kNaN;
}

// Integer operators computed exactly in a wider type, then reduced modulo 2^bits.
Int128 ref_integer_op(ReduceOp op, Int128 lhs, Int128 rhs) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return lhs + rhs;
    case ReduceOp::prod:
      return lhs * rhs;
    case ReduceOp::min:
      return lhs < rhs ? lhs : rhs;
    case ReduceOp::max:
      return lhs > rhs ? lhs : rhs;
    case ReduceOp::band:
      return lhs & rhs;
    case ReduceOp::bor:
      return lhs | rhs;
    case ReduceOp::bxor:
      return lhs ^ rhs;
  }
  return 0;
}

// torch's bool semantics: any byte other than 0 is true; sum and max are "or", product and min
// "and".
std::uint64_t ref_bool_op(ReduceOp op, std::uint64_t lhs_bits, std::uint64_t rhs_bits) {
  const bool lhs = lhs_bits != 0;
  const bool rhs = rhs_bits != 0;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::max:
    case ReduceOp::bor:
      return lhs || rhs;
    case ReduceOp::prod:
    case ReduceOp::min:
    case ReduceOp::band:
      return lhs && rhs;
    case ReduceOp::bxor:
      return lhs != rhs;
    case ReduceOp::avg:
      break;
  }
  ADD_FAILURE() << "bool has no " << gradsync::name(op);
  return 0;
}

Int128 decode_integer(DataType type, std::uint64_t bits) {
  switch (type) {
    case DataType::i32:
      return static_cast<std::int32_t>(static_cast<std::uint32_t>(bits));
    case DataType::i64:
      return static_cast<std::int64_t>(bits);
    case DataType::i8:
      return static_cast<std::int8_t>(static_cast<std::uint8_t>(bits));
    case DataType::i16:
      return static_cast<std::int16_t>(static_cast<std::uint16_t>(bits));
    default:
      return static_cast<Int128>(bits);  // u8
  }
}

std::uint64_t encode_integer(DataType type, Int128 value) {
  const auto wide = static_cast<UInt128>(value);  // two's complement
  const unsigned bits = static_cast<unsigned>(8 * gradsync::element_size(type));
  const UInt128 mask = (static_cast<UInt128>(1) << bits) - 1;
  return static_cast<std::uint64_t>(wide & mask);
}

std::uint64_t ref_combine(DataType type, ReduceOp op, std::uint64_t lhs, std::uint64_t rhs) {
  if (type == DataType::boolean) return ref_bool_op(op, lhs, rhs);
  if (gradsync::is_floating_point(type)) {
    return encode_float(type, ref_float_op(op, decode_float(type, lhs), decode_float(type, rhs)));
  }
  return encode_integer(type,
                        ref_integer_op(op, decode_integer(type, lhs), decode_integer(type, rhs)));
}

std::uint64_t ref_average(DataType type, std::uint64_t bits, int world_size) {
  if (gradsync::is_floating_point(type)) {
    return encode_float(type, decode_float(type, bits) / world_size);
  }
  return encode_integer(type, decode_integer(type, bits) / world_size);  // truncates toward zero
}

// Same bits, except that NaN only has to be a quiet NaN.
testing::AssertionResult same_elements(DataType type, const Bytes& expected, const Bytes& actual,
                                       std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t want = get_bits(type, expected.data(), i);
    const std::uint64_t got = get_bits(type, actual.data(), i);
    const bool want_nan = gradsync::is_floating_point(type) && std::isnan(decode_float(type, want));
    const bool ok = want_nan ? std::isnan(decode_float(type, got)) && (got & quiet_bit(type)) != 0
                             : got == want;
    if (!ok) {
      return testing::AssertionFailure()
             << gradsync::name(type) << " element " << i << ": expected bits 0x" << std::hex << want
             << (want_nan ? " (any quiet NaN)" : "") << ", got 0x" << got;
    }
  }
  return testing::AssertionSuccess();
}

// ---- Inputs ----

std::uint64_t random_float_bits(DataType type, std::mt19937_64& rng) {
  const double specials[] = {0.0,  -0.0, kInf,  -kInf, kNaN, -kNaN, 1.0,
                             -1.0, 1e-7, -3e-8, 65504, 3e38, 1e-40};
  switch (rng() % 8) {
    case 0:
      return encode_float(type, specials[rng() % std::size(specials)]);
    case 1:
    case 2:
      return rng();  // any pattern: subnormals, NaN payloads, huge magnitudes
    default: {
      std::normal_distribution<double> normal;
      std::uniform_int_distribution<int> scale(-12, 12);
      return encode_float(type, std::ldexp(normal(rng), scale(rng)));
    }
  }
}

std::uint64_t random_integer_bits(std::mt19937_64& rng) {
  if (rng() % 4 == 0) return static_cast<std::uint64_t>(static_cast<std::int64_t>(rng() % 21) - 10);
  return rng();
}

Bytes random_elements(DataType type, std::size_t count, std::mt19937_64& rng) {
  Bytes data(count * gradsync::element_size(type));
  for (std::size_t i = 0; i < count; ++i) {
    set_bits(type, data.data(), i,
             gradsync::is_floating_point(type) ? random_float_bits(type, rng)
                                               : random_integer_bits(rng));
  }
  return data;
}

Bytes expected_reduction(DataType type, ReduceOp op, const Bytes& lhs, const Bytes& rhs,
                         std::size_t count) {
  Bytes expected(count * gradsync::element_size(type));
  for (std::size_t i = 0; i < count; ++i) {
    set_bits(type, expected.data(), i,
             ref_combine(type, op, get_bits(type, lhs.data(), i), get_bits(type, rhs.data(), i)));
  }
  return expected;
}

// ---- Conversions ----

TEST(HalfFloat, F16ToF32AllBitPatternsMatchFloat16) {
  for (std::uint32_t half = 0; half <= 0xffff; ++half) {
    const auto bits = static_cast<std::uint16_t>(half);
    const float want = ref_f16_to_f32(bits);
    const float got = gradsync::f16_to_f32(bits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << half;
      ASSERT_NE(std::bit_cast<std::uint32_t>(got) & 0x00400000u, 0u)
          << "not quiet " << std::hex << half;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << half;
    } else {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
          << std::hex << half;
    }
  }
}

std::vector<float> f16_conversion_inputs() {
  std::vector<float> inputs = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               -std::numeric_limits<float>::quiet_NaN(),
                               std::bit_cast<float>(0x7f800001u),  // signaling NaN
                               std::bit_cast<float>(0xff802000u),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               65504.0f,    // largest f16
                               65519.996f,  // just below 65520, the midpoint between 65504 and 2^16
                               65520.0f,    // halfway: ties to even, which is inf
                               65536.0f,
                               0x1p-14f,      // smallest normal f16
                               0x1p-24f,      // smallest subnormal f16
                               0x1p-25f,      // halfway to zero: ties to even, which is 0
                               0x1.8p-25f,    // rounds up to 2^-24
                               0x1.8p-24f,    // halfway between 1 and 2 times 2^-24: 2
                               0x1.ff8p-15f,  // largest subnormal f16
                               0x1.ffcp-15f,  // halfway to the smallest normal
                               1.0f + 0x1p-11f,
                               1.0f + 0x1.8p-10f};
  // Every midpoint between adjacent finite f16 values, and the floats on either side of it.
  for (std::uint32_t half = 0; half < 0x7bff; ++half) {
    const double midpoint = (static_cast<double>(ref_f16_to_f32(static_cast<std::uint16_t>(half))) +
                             ref_f16_to_f32(static_cast<std::uint16_t>(half + 1))) /
                            2;
    const auto exact = static_cast<float>(midpoint);
    for (float value : {exact, std::nextafter(exact, 0.0f), std::nextafter(exact, 1e9f)}) {
      inputs.push_back(value);
      inputs.push_back(-value);
    }
  }
  std::mt19937_64 rng(16);
  for (int i = 0; i < 300000; ++i) {
    inputs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  }
  return inputs;
}

TEST(HalfFloat, F32ToF16MatchesFloat16Cast) {
  for (float value : f16_conversion_inputs()) {
    const std::uint16_t want = ref_f16_from(value);
    const std::uint16_t got = gradsync::f32_to_f16(value);
    const auto bits = std::bit_cast<std::uint32_t>(value);
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(ref_f16_to_f32(got))) << std::hex << bits;
      ASSERT_NE(got & 0x0200u, 0u) << "not quiet " << std::hex << bits;
    } else {
      ASSERT_EQ(got, want) << std::hex << bits;
    }
  }
}

TEST(HalfFloat, Bf16ToF32AllBitPatterns) {
  for (std::uint32_t bfloat = 0; bfloat <= 0xffff; ++bfloat) {
    const auto bits = static_cast<std::uint16_t>(bfloat);
    const double want = ref_bf16_to_double(bits);
    const float got = gradsync::bf16_to_f32(bits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bfloat;
      ASSERT_NE(std::bit_cast<std::uint32_t>(got) & 0x00400000u, 0u)
          << "not quiet " << std::hex << bfloat;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << bfloat;
    }
    ASSERT_EQ(std::signbit(got), (bfloat & 0x8000) != 0) << std::hex << bfloat;
  }
}

TEST(HalfFloat, F32ToBf16RoundsToNearestEven) {
  std::vector<float> inputs = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::max(),  // rounds up to inf
                               std::bit_cast<float>(0x7f7f7fffu),  // just below: stays finite
                               std::bit_cast<float>(0x7f7f8000u),  // halfway, odd: to inf
                               std::numeric_limits<float>::denorm_min(),
                               std::bit_cast<float>(0x00008000u),  // subnormal tie, even: 0
                               std::bit_cast<float>(0x00018000u),  // subnormal tie, odd: up
                               1.0f + 0x1p-8f,                     // tie, even: 1
                               1.0f + 0x1.8p-7f};                  // tie, odd: up
  for (std::uint32_t upper = 0; upper < 0x7f80; ++upper) {
    for (std::uint32_t lower : {0x7fffu, 0x8000u, 0x8001u}) {
      inputs.push_back(std::bit_cast<float>((upper << 16) | lower));
      inputs.push_back(std::bit_cast<float>(0x80000000u | (upper << 16) | lower));
    }
  }
  std::mt19937_64 rng(1616);
  for (int i = 0; i < 300000; ++i) {
    inputs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  }
  for (float value : inputs) {
    const std::uint16_t got = gradsync::f32_to_bf16(value);
    const auto bits = std::bit_cast<std::uint32_t>(value);
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(ref_bf16_to_double(got))) << std::hex << bits;
      ASSERT_NE(got & 0x0040u, 0u) << "not quiet " << std::hex << bits;
    } else {
      ASSERT_EQ(got, ref_bf16_from_double(value)) << std::hex << bits;
    }
  }
}

TEST(HalfFloat, NarrowingQuietsEveryNaN) {
  // Payloads only in the bits that narrowing drops must not turn into inf.
  for (std::uint32_t bits : {0x7f800001u, 0xff800001u, 0x7f801fffu, 0x7fa00000u, 0x7fc00000u,
                             0xffffffffu, 0x7f80ffffu}) {
    const float value = std::bit_cast<float>(bits);
    const std::uint16_t half = gradsync::f32_to_f16(value);
    const std::uint16_t bfloat = gradsync::f32_to_bf16(value);
    EXPECT_EQ(half & 0x7e00u, 0x7e00u) << std::hex << bits;
    EXPECT_EQ(bfloat & 0x7fc0u, 0x7fc0u) << std::hex << bits;
    EXPECT_EQ((half & 0x8000u) != 0, (bits >> 31) != 0) << std::hex << bits;
    EXPECT_EQ((bfloat & 0x8000u) != 0, (bits >> 31) != 0) << std::hex << bits;
  }
}

// ---- Reductions against the reference, every type, operator and tail length ----

struct ReduceCase {
  DataType type;
  ReduceOp op;
  std::size_t count;
};

class ReduceTest : public testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceTest, MatchesReferenceInEveryAliasing) {
  const auto [type, op, count] = GetParam();
  const std::size_t size = gradsync::element_size(type);
  std::mt19937_64 rng(static_cast<std::uint64_t>(type) * 1000003 +
                      static_cast<std::uint64_t>(op) * 1009 + count);
  const Bytes lhs = random_elements(type, count, rng);
  const Bytes rhs = random_elements(type, count, rng);
  const Bytes expected = expected_reduction(type, op, lhs, rhs, count);

  // A guard after the output catches a vector tail that writes past `count`.
  constexpr std::size_t kGuard = 64;
  Bytes out(count * size + kGuard, std::byte{0xa5});
  gradsync::reduce(type, op, out.data(), lhs.data(), rhs.data(), count);
  EXPECT_TRUE(same_elements(type, expected, out, count)) << "separate output";
  for (std::size_t i = count * size; i < out.size(); ++i) {
    ASSERT_EQ(out[i], std::byte{0xa5}) << "wrote past the end at byte " << i;
  }

  Bytes in_place = lhs;
  gradsync::reduce(type, op, in_place.data(), in_place.data(), rhs.data(), count);
  EXPECT_TRUE(same_elements(type, expected, in_place, count)) << "out == lhs";

  in_place = rhs;
  gradsync::reduce(type, op, in_place.data(), lhs.data(), in_place.data(), count);
  EXPECT_TRUE(same_elements(type, expected, in_place, count)) << "out == rhs";

  // Buffers carry no alignment guarantee: shift every operand off its natural alignment.
  Bytes odd_lhs(count * size + 1), odd_rhs(count * size + 3), odd_out(count * size + 5);
  if (count > 0) {  // an empty vector's data() is null, which memcpy may not be given
    std::memcpy(odd_lhs.data() + 1, lhs.data(), lhs.size());
    std::memcpy(odd_rhs.data() + 3, rhs.data(), rhs.size());
  }
  gradsync::reduce(type, op, odd_out.data() + 5, odd_lhs.data() + 1, odd_rhs.data() + 3, count);
  const Bytes unaligned_result(odd_out.begin() + 5, odd_out.end());
  EXPECT_TRUE(same_elements(type, expected, unaligned_result, count)) << "unaligned";
}

// Complex types have tests of their own (ComplexReduce below): their elements do not fit the
// references' 64 bits.
std::vector<ReduceCase> all_reduce_cases() {
  std::vector<ReduceCase> cases;
  for (DataType type : gradsync::kAllDataTypes) {
    if (gradsync::is_complex(type)) continue;
    for (ReduceOp op : gradsync::kAllReduceOps) {
      if (!gradsync::why_op_cannot_reduce(type, op).empty()) continue;
      for (std::size_t count : {0, 1, 7, 1000, 4099}) cases.push_back({type, op, count});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceTest, testing::ValuesIn(all_reduce_cases()),
                         [](const testing::TestParamInfo<ReduceCase>& test_info) {
                           return std::string(gradsync::name(test_info.param.type)) + "_" +
                                  std::string(gradsync::name(test_info.param.op)) + "_" +
                                  std::to_string(test_info.param.count);
                         });

// ---- Floating-point special values ----

struct SpecialCase {
  ReduceOp op;
  double lhs;
  double rhs;
  double expected;  // NaN: any quiet NaN
};

const SpecialCase kSpecialCases[] = {
    {ReduceOp::sum, kInf, -kInf, kNaN}, {ReduceOp::sum, -kInf, kInf, kNaN},
    {ReduceOp::sum, kNaN, 1, kNaN},     {ReduceOp::sum, 1, kNaN, kNaN},
    {ReduceOp::sum, kInf, 1, kInf},     {ReduceOp::sum, -1, -kInf, -kInf},
    {ReduceOp::sum, -0.0, -0.0, -0.0},  {ReduceOp::sum, -0.0, 0.0, 0.0},
    {ReduceOp::avg, kInf, -kInf, kNaN}, {ReduceOp::avg, 2, kNaN, kNaN},
    {ReduceOp::prod, 0.0, kInf, kNaN},  {ReduceOp::prod, -kInf, 0.0, kNaN},
    {ReduceOp::prod, -kInf, 2, -kInf},  {ReduceOp::prod, kNaN, 0, kNaN},
    {ReduceOp::prod, -0.0, 1, -0.0},    {ReduceOp::prod, -kInf, -kInf, kInf},
    {ReduceOp::min, kNaN, 1, kNaN},     {ReduceOp::min, 1, kNaN, kNaN},
    {ReduceOp::min, kNaN, -kInf, kNaN}, {ReduceOp::min, -kInf, kNaN, kNaN},
    {ReduceOp::min, kNaN, kNaN, kNaN},  {ReduceOp::min, -0.0, 0.0, -0.0},
    {ReduceOp::min, 0.0, -0.0, -0.0},   {ReduceOp::min, 0.0, 0.0, 0.0},
    {ReduceOp::min, -0.0, -0.0, -0.0},  {ReduceOp::min, -kInf, 1, -kInf},
    {ReduceOp::min, kInf, 1, 1},        {ReduceOp::min, 2, -3, -3},
    {ReduceOp::max, kNaN, 1, kNaN},     {ReduceOp::max, 1, kNaN, kNaN},
    {ReduceOp::max, kNaN, kInf, kNaN},  {ReduceOp::max, kInf, kNaN, kNaN},
    {ReduceOp::max, kNaN, kNaN, kNaN},  {ReduceOp::max, -0.0, 0.0, 0.0},
    {ReduceOp::max, 0.0, -0.0, 0.0},    {ReduceOp::max, -0.0, -0.0, -0.0},
    {ReduceOp::max, 0.0, 0.0, 0.0},     {ReduceOp::max, kInf, 1, kInf},
    {ReduceOp::max, -kInf, 1, 1},       {ReduceOp::max, 2, -3, 2},
};

class FloatSpecialsTest : public testing::TestWithParam<DataType> {};

TEST_P(FloatSpecialsTest, NaNInfAndSignedZero) {
  const DataType type = GetParam();
  for (ReduceOp op : gradsync::kAllReduceOps) {
    if (!gradsync::why_op_cannot_reduce(type, op).empty()) continue;
    // Repeated so that most elements go through the vector body and some through the tail.
    Bytes lhs, rhs, expected;
    for (int copy = 0; copy < 5; ++copy) {
      for (const SpecialCase& special : kSpecialCases) {
        if (special.op != op) continue;
        for (auto [buffer, value] : {std::pair{&lhs, special.lhs}, std::pair{&rhs, special.rhs},
                                     std::pair{&expected, special.expected}}) {
          buffer->resize(buffer->size() + gradsync::element_size(type));
          set_bits(type, buffer->data(), buffer->size() / gradsync::element_size(type) - 1,
                   encode_float(type, value));
        }
      }
    }
    const std::size_t count = lhs.size() / gradsync::element_size(type);
    Bytes out(lhs.size());
    gradsync::reduce(type, op, out.data(), lhs.data(), rhs.data(), count);
    EXPECT_TRUE(same_elements(type, expected, out, count)) << gradsync::name(op);
  }
}

TEST_P(FloatSpecialsTest, SignalingNaNGivesQuietNaN) {
  const DataType type = GetParam();
  const std::uint64_t signaling = type == DataType::f32   ? 0x7f800001u
                                  : type == DataType::f64 ? 0x7ff0000000000001u
                                  : type == DataType::f16 ? 0x7c01u
                                                          : 0x7f81u;
  const std::uint64_t one = encode_float(type, 1.0);
  for (ReduceOp op : gradsync::kAllReduceOps) {
    if (!gradsync::why_op_cannot_reduce(type, op).empty()) continue;
    Bytes lhs(2 * gradsync::element_size(type)), rhs(2 * gradsync::element_size(type)),
        out(2 * gradsync::element_size(type));
    set_bits(type, lhs.data(), 0, signaling);
    set_bits(type, rhs.data(), 0, one);
    set_bits(type, lhs.data(), 1, one);
    set_bits(type, rhs.data(), 1, signaling);
    gradsync::reduce(type, op, out.data(), lhs.data(), rhs.data(), 2);
    const Bytes expected_nan = [&] {
      Bytes nan(2 * gradsync::element_size(type));
      set_bits(type, nan.data(), 0, encode_float(type, kNaN));
      set_bits(type, nan.data(), 1, encode_float(type, kNaN));
      return nan;
    }();
    EXPECT_TRUE(same_elements(type, expected_nan, out, 2)) << gradsync::name(op);
  }
}

// Two NaN operands: the result carries lhs's payload, quieted, for every operator, so that ranks
// agree bitwise whatever operand order their hardware or compiler would prefer.
TEST_P(FloatSpecialsTest, TwoNaNsKeepTheLeftPayload) {
  const DataType type = GetParam();
  const std::uint64_t left = type == DataType::f32   ? 0x7f800123u
                             : type == DataType::f64 ? 0x7ff0000000000123u
                             : type == DataType::f16 ? 0x7d23u
                                                     : 0x7f93u;
  const std::uint64_t right = type == DataType::f32   ? 0xffc00456u
                              : type == DataType::f64 ? 0xfff8000000000456u
                              : type == DataType::f16 ? 0xfe56u
                                                      : 0xffd6u;
  const std::size_t size = gradsync::element_size(type);
  for (ReduceOp op : gradsync::kAllReduceOps) {
    if (!gradsync::why_op_cannot_reduce(type, op).empty()) continue;
    constexpr std::size_t kCount = 37;  // through the vector body and the tail
    Bytes lhs(kCount * size), rhs(kCount * size), out(kCount * size);
    for (std::size_t i = 0; i < kCount; ++i) {
      set_bits(type, lhs.data(), i, left);
      set_bits(type, rhs.data(), i, right);
    }
    gradsync::reduce(type, op, out.data(), lhs.data(), rhs.data(), kCount);
    for (std::size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(get_bits(type, out.data(), i), left | quiet_bit(type))
          << gradsync::name(op) << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, FloatSpecialsTest,
                         testing::Values(DataType::f32, DataType::f64, DataType::f16,
                                         DataType::bf16),
                         [](const testing::TestParamInfo<DataType>& test_info) {
                           return std::string(gradsync::name(test_info.param));
                         });

TEST(Reduce, HalfPrecisionRoundsOnce) {
  // f16: 2048 + 1 is a tie between 2048 and 2050 and goes to the even 2048; 2048 + 3 goes to 2052.
  // 65504 + 16 is exactly the overflow threshold and rounds to inf.
  const std::uint16_t f16_lhs[] = {0x6800, 0x6800, 0x7bff, 0x0001};
  const std::uint16_t f16_rhs[] = {0x3c00, 0x4200, 0x4c00, 0x8001};
  const std::uint16_t f16_sum[] = {0x6800, 0x6802, 0x7c00, 0x0000};
  std::uint16_t out[4];
  gradsync::reduce(DataType::f16, ReduceOp::sum, reinterpret_cast<std::byte*>(out),
                   reinterpret_cast<const std::byte*>(f16_lhs),
                   reinterpret_cast<const std::byte*>(f16_rhs), 4);
  EXPECT_EQ(std::memcmp(out, f16_sum, sizeof out), 0);
  // bf16: 1 + 2^-8 is a tie and goes to the even 1; 1 + 3 * 2^-8 goes to 1 + 2^-6.
  const std::uint16_t bf16_lhs[] = {0x3f80, 0x3f80, 0x7f7f, 0x0001};
  const std::uint16_t bf16_rhs[] = {0x3b80, 0x3c40, 0x7f7f, 0x0001};
  const std::uint16_t bf16_sum[] = {0x3f80, 0x3f82, 0x7f80, 0x0002};
  gradsync::reduce(DataType::bf16, ReduceOp::sum, reinterpret_cast<std::byte*>(out),
                   reinterpret_cast<const std::byte*>(bf16_lhs),
                   reinterpret_cast<const std::byte*>(bf16_rhs), 4);
  EXPECT_EQ(std::memcmp(out, bf16_sum, sizeof out), 0);
}

// ---- Integer wrap-around ----

template <typename T>
void expect_integer_result(DataType type, ReduceOp op, T lhs, T rhs, T expected) {
  T out{};
  gradsync::reduce(type, op, reinterpret_cast<std::byte*>(&out),
                   reinterpret_cast<const std::byte*>(&lhs),
                   reinterpret_cast<const std::byte*>(&rhs), 1);
  EXPECT_EQ(out, expected) << gradsync::name(type) << " " << gradsync::name(op) << " of " << +lhs
                           << " and " << +rhs;
}

TEST(Reduce, IntegersWrapAround) {
  using I32 = std::numeric_limits<std::int32_t>;
  using I64 = std::numeric_limits<std::int64_t>;
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::sum, I32::max(), 1, I32::min());
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::sum, I32::min(), -1, I32::max());
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::avg, I32::max(), 2, I32::min() + 1);
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::prod, 65536, 65536, 0);
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::prod, 0x10001, 0x10001, 0x20001);
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::prod, I32::min(), -1, I32::min());
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::min, I32::min(), I32::max(),
                                      I32::min());
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::max, I32::min(), I32::max(),
                                      I32::max());
  expect_integer_result<std::int64_t>(DataType::i64, ReduceOp::sum, I64::max(), 1, I64::min());
  expect_integer_result<std::int64_t>(DataType::i64, ReduceOp::sum, I64::min(), -1, I64::max());
  expect_integer_result<std::int64_t>(DataType::i64, ReduceOp::prod, std::int64_t{1} << 32,
                                      std::int64_t{1} << 32, 0);
  expect_integer_result<std::int64_t>(DataType::i64, ReduceOp::prod, (std::int64_t{1} << 32) + 1,
                                      (std::int64_t{1} << 32) + 1, (std::int64_t{1} << 33) + 1);
  expect_integer_result<std::int64_t>(DataType::i64, ReduceOp::prod, I64::min(), -1, I64::min());
  expect_integer_result<std::int64_t>(DataType::i64, ReduceOp::min, I64::min(), I64::max(),
                                      I64::min());
  expect_integer_result<std::int64_t>(DataType::i64, ReduceOp::max, -1, I64::min(), -1);
  expect_integer_result<std::uint8_t>(DataType::u8, ReduceOp::sum, 250, 10, 4);
  expect_integer_result<std::uint8_t>(DataType::u8, ReduceOp::avg, 255, 255, 254);
  expect_integer_result<std::uint8_t>(DataType::u8, ReduceOp::prod, 16, 16, 0);
  expect_integer_result<std::uint8_t>(DataType::u8, ReduceOp::prod, 255, 255, 1);
  expect_integer_result<std::uint8_t>(DataType::u8, ReduceOp::min, 0, 255, 0);
  expect_integer_result<std::uint8_t>(DataType::u8, ReduceOp::max, 0, 255, 255);
  // Narrower than int: promoted before they are combined, which must not overflow int either.
  using I16 = std::numeric_limits<std::int16_t>;
  expect_integer_result<std::int16_t>(DataType::i16, ReduceOp::sum, I16::max(), 1, I16::min());
  expect_integer_result<std::int16_t>(DataType::i16, ReduceOp::prod, -1, -1, 1);
  expect_integer_result<std::int16_t>(DataType::i16, ReduceOp::prod, I16::min(), -1, I16::min());
  expect_integer_result<std::int16_t>(DataType::i16, ReduceOp::prod, 0x101, 0x101, 0x201);
  expect_integer_result<std::int16_t>(DataType::i16, ReduceOp::min, I16::min(), 0, I16::min());
  expect_integer_result<std::int8_t>(DataType::i8, ReduceOp::sum, 127, 1, -128);
  expect_integer_result<std::int8_t>(DataType::i8, ReduceOp::prod, -128, -1, -128);
  expect_integer_result<std::int8_t>(DataType::i8, ReduceOp::max, -128, -1, -1);
  expect_integer_result<std::int8_t>(DataType::i8, ReduceOp::avg, -128, -128, 0);
}

TEST(Reduce, BitwiseOperatorsOnIntegers) {
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::band, 0b1100, 0b1010, 0b1000);
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::bor, 0b1100, 0b1010, 0b1110);
  expect_integer_result<std::int32_t>(DataType::i32, ReduceOp::bxor, 0b1100, 0b1010, 0b0110);
  expect_integer_result<std::int64_t>(DataType::i64, ReduceOp::band, -1, 0x7f00000000,
                                      0x7f00000000);
  expect_integer_result<std::int8_t>(DataType::i8, ReduceOp::bxor, -1, 0x0f, -16);
  expect_integer_result<std::uint8_t>(DataType::u8, ReduceOp::bor, 0x80, 0x01, 0x81);
  expect_integer_result<std::int16_t>(DataType::i16, ReduceOp::band, -2, 0x7fff, 0x7ffe);
}

TEST(Reduce, BoolTakesAnyNonZeroByteAsTrueAndGivesZeroOrOne) {
  const std::uint8_t lhs[] = {0, 0, 2, 255};
  const std::uint8_t rhs[] = {0, 7, 0, 1};
  const std::pair<ReduceOp, std::array<std::uint8_t, 4>> expected[] = {
      {ReduceOp::sum, {0, 1, 1, 1}},  {ReduceOp::max, {0, 1, 1, 1}}, {ReduceOp::bor, {0, 1, 1, 1}},
      {ReduceOp::prod, {0, 0, 0, 1}}, {ReduceOp::min, {0, 0, 0, 1}}, {ReduceOp::band, {0, 0, 0, 1}},
      {ReduceOp::bxor, {0, 1, 1, 0}}};
  for (const auto& [op, want] : expected) {
    std::array<std::uint8_t, 4> out{};
    gradsync::reduce(DataType::boolean, op, reinterpret_cast<std::byte*>(out.data()),
                     reinterpret_cast<const std::byte*>(lhs),
                     reinterpret_cast<const std::byte*>(rhs), 4);
    EXPECT_EQ(out, want) << gradsync::name(op);
  }
}

TEST(Reduce, EveryOperatorATypeCannotTakeIsNamedWithItsReason) {
  EXPECT_EQ(gradsync::why_op_cannot_reduce(DataType::f32, ReduceOp::band),
            "the bitwise operators take integers and bool only");
  EXPECT_EQ(gradsync::why_op_cannot_reduce(DataType::c64, ReduceOp::max),
            "complex numbers have no order for min and max");
  EXPECT_EQ(gradsync::why_op_cannot_reduce(DataType::boolean, ReduceOp::avg),
            "bool values have no average");
  EXPECT_EQ(gradsync::why_op_cannot_reduce(DataType::c128, ReduceOp::prod), "");
  EXPECT_EQ(gradsync::why_op_cannot_reduce(DataType::boolean, ReduceOp::bxor), "");
  EXPECT_EQ(gradsync::why_op_cannot_reduce(DataType::i16, ReduceOp::avg), "");
}

// ---- Complex numbers: each part as its real type; the product by the textbook formula ----

template <typename Real>
class ComplexReduce : public testing::Test {};

using ComplexParts = testing::Types<float, double>;
TYPED_TEST_SUITE(ComplexReduce, ComplexParts);

template <typename Real>
DataType complex_type() {
  return sizeof(Real) == 4 ? DataType::c64 : DataType::c128;
}

TYPED_TEST(ComplexReduce, SumProductAndAverageMatchAScalarReference) {
  using Real = TypeParam;
  const DataType type = complex_type<Real>();
  std::mt19937_64 rng(sizeof(Real));
  std::normal_distribution<Real> normal;
  constexpr std::size_t kCount = 1001;  // through the vector body and the tail
  std::vector<Real> lhs(2 * kCount), rhs(2 * kCount);
  for (Real& part : lhs) part = normal(rng);
  for (Real& part : rhs) part = normal(rng);
  std::vector<Real> sum(2 * kCount), product(2 * kCount), average(2 * kCount);
  const auto bytes = [](std::vector<Real>& parts) {
    return reinterpret_cast<std::byte*>(parts.data());
  };
  gradsync::reduce(type, ReduceOp::sum, bytes(sum), bytes(lhs), bytes(rhs), kCount);
  gradsync::reduce(type, ReduceOp::prod, bytes(product), bytes(lhs), bytes(rhs), kCount);
  gradsync::reduce(type, ReduceOp::avg, bytes(average), bytes(lhs), bytes(rhs), kCount);
  gradsync::finalize_average(type, ReduceOp::avg, bytes(average), kCount, 3);
  for (std::size_t i = 0; i < kCount; ++i) {
    const Real a = lhs[2 * i], b = lhs[2 * i + 1], c = rhs[2 * i], d = rhs[2 * i + 1];
    ASSERT_EQ(sum[2 * i], a + c) << i;
    ASSERT_EQ(sum[2 * i + 1], b + d) << i;
    const Real ac = a * c, bd = b * d, ad = a * d, bc = b * c;
    ASSERT_EQ(product[2 * i], ac - bd) << i;
    ASSERT_EQ(product[2 * i + 1], ad + bc) << i;
    ASSERT_EQ(average[2 * i], (a + c) / 3) << i;
    ASSERT_EQ(average[2 * i + 1], (b + d) / 3) << i;
  }
}

TYPED_TEST(ComplexReduce, KnownValuesAndNaNWithoutPayload) {
  using Real = TypeParam;
  const DataType type = complex_type<Real>();
  using Bits = std::conditional_t<sizeof(Real) == 4, std::uint32_t, std::uint64_t>;
  const Real nan_with_payload = std::bit_cast<Real>(
      sizeof(Real) == 4 ? Bits{0x7fc00123} : static_cast<Bits>(0x7ff8000000000123));
  const Real lhs[] = {1, 2, nan_with_payload, 0};
  const Real rhs[] = {3, -4, 1, 0};
  Real out[4];
  gradsync::reduce(type, ReduceOp::prod, reinterpret_cast<std::byte*>(out),
                   reinterpret_cast<const std::byte*>(lhs), reinterpret_cast<const std::byte*>(rhs),
                   2);
  EXPECT_EQ(out[0], 11);  // (1 + 2i)(3 - 4i) = 11 + 2i
  EXPECT_EQ(out[1], 2);
  const Real quiet = std::numeric_limits<Real>::quiet_NaN();
  EXPECT_EQ(std::memcmp(&out[2], &quiet, sizeof quiet), 0) << "the default NaN, not the payload";
  EXPECT_EQ(std::memcmp(&out[3], &quiet, sizeof quiet), 0);
  gradsync::reduce(type, ReduceOp::sum, reinterpret_cast<std::byte*>(out),
                   reinterpret_cast<const std::byte*>(lhs), reinterpret_cast<const std::byte*>(rhs),
                   1);
  EXPECT_EQ(out[0], 4);
  EXPECT_EQ(out[1], -2);
}

// ---- finalize_average ----

struct AverageCase {
  DataType type;
  int world_size;
};

class FinalizeAverageTest : public testing::TestWithParam<AverageCase> {};

TEST_P(FinalizeAverageTest, DividesOnceByWorldSize) {
  const auto [type, world_size] = GetParam();
  std::mt19937_64 rng(static_cast<std::uint64_t>(type) * 7919 +
                      static_cast<std::uint64_t>(world_size));
  constexpr std::size_t kCount = 4099;
  Bytes data = random_elements(type, kCount, rng);
  Bytes expected(data.size());
  for (std::size_t i = 0; i < kCount; ++i) {
    set_bits(type, expected.data(), i,
             ref_average(type, get_bits(type, data.data(), i), world_size));
  }
  gradsync::finalize_average(type, ReduceOp::avg, data.data(), kCount, world_size);
  EXPECT_TRUE(same_elements(type, expected, data, kCount));
}

TEST_P(FinalizeAverageTest, NoOpForOtherOperators) {
  const auto [type, world_size] = GetParam();
  std::mt19937_64 rng(static_cast<std::uint64_t>(type));
  const Bytes original = random_elements(type, 1000, rng);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max}) {
    Bytes data = original;
    gradsync::finalize_average(type, op, data.data(), 1000, world_size);
    EXPECT_EQ(data, original) << gradsync::name(op);
  }
}

std::vector<AverageCase> all_average_cases() {
  std::vector<AverageCase> cases;
  for (DataType type : gradsync::kAllDataTypes) {
    // bool has no average; complex averages are checked in ComplexReduce.
    if (type == DataType::boolean || gradsync::is_complex(type)) continue;
    for (int world_size : {1, 2, 3, 7, 64, 1000}) cases.push_back({type, world_size});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, FinalizeAverageTest, testing::ValuesIn(all_average_cases()),
                         [](const testing::TestParamInfo<AverageCase>& test_info) {
                           return std::string(gradsync::name(test_info.param.type)) + "_p" +
                                  std::to_string(test_info.param.world_size);
                         });

TEST(FinalizeAverage, IntegersTruncateTowardZero) {
  const std::int32_t i32[] = {-7, 7, -1, std::numeric_limits<std::int32_t>::min()};
  const std::int32_t i32_halved[] = {-3, 3, 0, std::numeric_limits<std::int32_t>::min() / 2};
  std::int32_t data[4];
  std::memcpy(data, i32, sizeof data);
  gradsync::finalize_average(DataType::i32, ReduceOp::avg, reinterpret_cast<std::byte*>(data), 4,
                             2);
  EXPECT_EQ(std::memcmp(data, i32_halved, sizeof data), 0);
  // A u8 sum divided by a world size above 255 must not see the divisor modulo 256.
  std::uint8_t byte = 200;
  gradsync::finalize_average(DataType::u8, ReduceOp::avg, reinterpret_cast<std::byte*>(&byte), 1,
                             257);
  EXPECT_EQ(byte, 0);
  byte = 200;
  gradsync::finalize_average(DataType::u8, ReduceOp::avg, reinterpret_cast<std::byte*>(&byte), 1,
                             100);
  EXPECT_EQ(byte, 2);
}

TEST(FinalizeAverageDeathTest, RejectsNonPositiveWorldSize) {
  float value = 1.0f;
  EXPECT_DEATH(gradsync::finalize_average(DataType::f32, ReduceOp::avg,
                                          reinterpret_cast<std::byte*>(&value), 1, 0),
               "");
}

}  // namespace
