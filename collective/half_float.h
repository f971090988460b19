// Conversions between f32 and the 16-bit float formats (IEEE binary16 "f16" and bfloat16 "bf16").
//
// Narrowing rounds to nearest, ties to even, and overflows to inf; NaN stays NaN (made quiet,
// sign and leading payload bits kept); inf and signed zeros are preserved; f16 subnormals are
// handled in both directions.
//
// Every function is branch-free: each special case is computed unconditionally and picked with a
// select, so a loop calling these vectorises with the baseline x86-64 instruction set (SSE2), which
// has neither F16C nor per-lane variable shifts. The f16 subnormal paths let the FPU align the
// mantissa with one exact addition or subtraction of a power of two instead of a per-lane
// normalising shift. That operation is done on every lane (with +0 where it is not needed): GCC
// would otherwise sink it into the subnormal branch, and it never if-converts a floating-point
// operation that may trap, so the loop would stay scalar. This assumes the default rounding mode
// (round to nearest) and is unaffected by FTZ/DAZ: no result is an f32 subnormal, and an f32
// subnormal input rounds to an f16 zero whether or not it is flushed.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace gradsync {

inline float f16_to_f32(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t magnitude = half & 0x7fffu;
  const std::uint32_t shifted = magnitude << 13;  // exponent and mantissa in their f32 positions
  const bool is_subnormal = magnitude < 0x0400u;  // zero included
  std::uint32_t bits = shifted + ((127u - 15u) << 23);
  bits = magnitude >= 0x7c00u ? shifted | 0x7f800000u : bits;
  // A subnormal is mantissa * 2^-24: with the exponent of 2^-14 it reads as
  // 2^-14 + mantissa * 2^-24, and subtracting 2^-14 leaves exactly the value. Being arithmetic,
  // the subtraction also quiets a signaling NaN.
  constexpr std::uint32_t kMinNormalBits = 113u << 23;
  bits = is_subnormal ? shifted + kMinNormalBits : bits;
  const float bias = is_subnormal ? std::bit_cast<float>(kMinNormalBits) : 0.0f;
  const float magnitude_value = std::bit_cast<float>(bits) - bias;
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude_value) | sign);
}

inline std::uint16_t f32_to_f16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  // Adding 2^(e + 13), with e the exponent of the magnitude clamped to at least -14, puts the
  // sum's ulp at the f16 ulp of the magnitude (2^(e - 10)), so the FPU rounds to nearest even and
  // leaves the rounded significand, implicit bit included, in the low bits of the sum. Then
  // ((e + 14) << 10) + significand is the f16 encoding: for subnormals (e = -14) it is the
  // significand alone, and a carry out of the significand bumps the exponent, which is how
  // magnitudes from 65520 on reach inf. Any larger exponent (inf and NaN included) only yields
  // something larger, even where 2^(e + 13) itself is out of range, so clamping the encoding at
  // inf handles overflow.
  constexpr std::uint32_t kMinNormalExponent = 113u << 23;  // 2^-14
  const std::uint32_t exponent = std::max(magnitude & 0x7f800000u, kMinNormalExponent);
  const float aligner = std::bit_cast<float>(exponent + (13u << 23));
  const std::uint32_t sum = std::bit_cast<std::uint32_t>(std::bit_cast<float>(magnitude) + aligner);
  const std::uint32_t encoded = ((exponent - kMinNormalExponent) >> 13) + (sum & 0x007fffffu);
  // NaN became inf; the quiet bit and the leading payload bits turn it back into NaN.
  const bool is_nan = magnitude > 0x7f800000u;
  const std::uint32_t nan_bits = is_nan ? 0x0200u | ((magnitude >> 13) & 0x03ffu) : 0u;
  return static_cast<std::uint16_t>(std::min(encoded, 0x7c00u) | nan_bits | sign);
}

inline float bf16_to_f32(std::uint16_t bfloat) {
  // Quieting before widening works on 16-bit lanes: half the vector operations of doing it after.
  const bool is_nan = (bfloat & 0x7fffu) > 0x7f80u;
  const std::uint32_t quieted = is_nan ? bfloat | 0x0040u : bfloat;
  return std::bit_cast<float>(quieted << 16);
}

inline std::uint16_t f32_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
  // A carry out of the mantissa bumps the exponent: the largest finite values round up to inf.
  const std::uint32_t rounded = is_nan ? bits | 0x00400000u : bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

}  // namespace gradsync
