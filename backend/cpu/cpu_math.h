// Branch-free scalar math for CPU kernel loops. GCC (with its default
// -ftrapping-math) refuses to vectorize a loop body holding more than one
// floating-point `?:`, and libm's expf is never vectorized; these helpers are
// written with bit-mask selects so loops over them vectorize, and keep
// PyTorch's NaN/inf behaviour.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace kiln::cpu {

/// c ? a : b for float or double, as bit masks (no branch, vectorizable).
template <class F>
inline F select(bool c, F a, F b) {
  static_assert(std::is_floating_point_v<F>);
  using I = std::conditional_t<sizeof(F) == 4, int32_t, int64_t>;
  const I m = -static_cast<I>(c);
  return std::bit_cast<F>(static_cast<I>((std::bit_cast<I>(a) & m) | (std::bit_cast<I>(b) & ~m)));
}

/// Clamp to [lo, hi] applying lo first (lo > hi gives hi, as torch.clamp); NaN stays NaN.
template <class F>
inline F clampSelect(F x, F lo, F hi) {
  F t = select(x < lo, lo, x);
  return select(t > hi, hi, t);
}

/// max / min where a NaN on either side wins (torch.maximum / torch.minimum).
template <class F>
inline F maxNaN(F a, F b) {
  return select((a > b) | (a != a), a, b);
}
template <class F>
inline F minNaN(F a, F b) {
  return select((a < b) | (a != a), a, b);
}

/// exp for float: Cephes' polynomial after range reduction by ln 2, within
/// ~1.2 ulp of the exact value like libm's expf (overflow gives inf, deep
/// underflow 0, NaN stays NaN), but vectorizable.
inline float expVec(float x) {
  const float xc = select(x < -104.0f, -104.0f, select(x > 89.0f, 89.0f, x));
  // n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer in float.
  const float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - fn * 0.693359375f;  // ln2 split in two for an exact product
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n as two normal factors so results near overflow and subnormal ones stay right.
  const int32_t n = static_cast<int32_t>(fn), n1 = n >> 1, n2 = n - n1;
  const float y = p * std::bit_cast<float>((n1 + 127) << 23) * std::bit_cast<float>((n2 + 127) << 23);
  return select(x != x, x, y);
}

/// exp in C (float: expVec, otherwise std::exp).
template <class C>
inline C expAny(C x) {
  if constexpr (std::is_same_v<C, float>)
    return expVec(x);
  else
    return std::exp(x);
}

/// tanh for float: Cephes' tanhf (odd polynomial below |x| = 0.625, else
/// 1 - 2 / (exp(2|x|) + 1) with the sign), within ~2 ulp of libm's tanhf
/// like Sleef's, branch-free so loops over it vectorize (libm's is a call per
/// element: gelu's tanh form was 7x slower than PyTorch's). NaN stays NaN.
inline float tanhVec(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  // expVec saturates (2|x| > 89 gives a huge finite value), so large |x| ends at exactly 1.
  const float big = 1.0f - 2.0f / (expVec(2.0f * a) + 1.0f);
  const float r = std::copysign(select(a < 0.625f, small, big), x);  // keeps -0
  return select(x != x, x, r);
}

/// tanh in C (float: tanhVec, otherwise std::tanh).
template <class C>
inline C tanhAny(C x) {
  if constexpr (std::is_same_v<C, float>)
    return tanhVec(x);
  else
    return std::tanh(x);
}

/// erf for float: Abramowitz & Stegun 7.1.26 over expVec (|error| < 1.5e-7
/// absolute), the formula PyTorch's vectorized CPU erf uses (and with it
/// gelu's exact form and its backward), so Kiln's f32 gelu matches PyTorch's
/// rather than libm's; branch-free, so loops over it vectorize (libm's erff
/// is a call per element: an erf-gelu backward over 3M elements took 36 ms).
/// NaN stays NaN, +-inf gives +-1.
inline float erfVec(float x) {
  const float t = 1.0f / (0.3275911f * std::fabs(x) + 1.0f);
  float r = 1.061405429f;
  r = r * t - 1.453152027f;
  r = r * t + 1.421413741f;
  r = r * t - 0.284496736f;
  r = r * t + 0.254829592f;
  const float y = (-expVec(-(x * x)) * t) * r + 1.0f;
  return std::copysign(y, x);
}

/// erf in C (float: erfVec, otherwise std::erf).
template <class C>
inline C erfAny(C x) {
  if constexpr (std::is_same_v<C, float>)
    return erfVec(x);
  else
    return std::erf(x);
}

}  // namespace kiln::cpu
