// float16 and bfloat16 on the host: storage types and their exact
// conversions to and from float (rounding to nearest even), the CPU
// device's Load/Store for half precision (CUDA uses its own intrinsics,
// which round the same way). Abseil-free.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_BASE_HALF_H_
#define TENSORD_CORE_BASE_HALF_H_

#include <cstdint>
#include <cstring>

namespace tensord::core {

// One element of a float16 / bfloat16 tensor: its bit pattern.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

inline uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return sign | 0x7c00u | (mant != 0 ? 0x200u : 0u);
  const int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00u;  // overflow: infinity
  if (e <= 0) {                          // float16 subnormal or zero
    if (e < -10) return sign;
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half_mant = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent (to infinity at
  // the top).
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {  // infinity or NaN
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) |
           ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t FloatToBFloat16Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a quiet NaN
    return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7fc0u);
  }
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float BFloat16BitsToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_HALF_H_
