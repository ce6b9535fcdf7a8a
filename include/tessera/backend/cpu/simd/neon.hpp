// tessera/backend/cpu/simd/neon.hpp - vec<float> and vec<double> on AArch64 Advanced SIMD
// (128-bit). Internal: included by vec.hpp only. AArch64 only: 32-bit NEON lacks vector division,
// double lanes and the directed-rounding instructions used here.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#ifndef TESSERA_DETAIL_SIMD_NS
#error "include tessera/backend/cpu/simd/vec.hpp instead of this file"
#endif

#include <arm_neon.h>

#include <cstdint>

TESSERA_BEGIN_NAMESPACE
namespace detail::simd {
inline namespace TESSERA_DETAIL_SIMD_NS {

inline constexpr const char* isa_name = "neon";

/// Orders earlier non-temporal stores before later stores (needed before another thread may
/// read what vec::stream wrote).
inline void stream_fence() {}

template <>
inline constexpr bool available<float> = true;
template <>
inline constexpr bool available<double> = true;

template <>
struct vec<float> {
  static constexpr int width = 4;
  using value_type = float;
  /// All-ones / all-zeros lanes, as the compare instructions produce them.
  using mask_t = uint32x4_t;
  float32x4_t r;

  static vec load(const float* p) { return {vld1q_f32(p)}; }
  static vec broadcast(float x) { return {vdupq_n_f32(x)}; }
  void store(float* p) const { vst1q_f32(p, r); }
  /// AArch64 has no plain non-temporal vector store intrinsic: an ordinary store.
  void stream(float* p) const { vst1q_f32(p, r); }
};

template <>
struct vec<double> {
  static constexpr int width = 2;
  using value_type = double;
  using mask_t = uint64x2_t;
  float64x2_t r;

  static vec load(const double* p) { return {vld1q_f64(p)}; }
  static vec broadcast(double x) { return {vdupq_n_f64(x)}; }
  void store(double* p) const { vst1q_f64(p, r); }
  void stream(double* p) const { vst1q_f64(p, r); }
};

// The float and double operations differ only in the intrinsic suffix (f32 / f64) and in the mask
// lane type (u32 / u64), so they are stamped out from one definition to keep the two in step.
#define TESSERA_DETAIL_SIMD_NEON_OPS(T, S, U)                                                     \
  inline vec<T> operator+(vec<T> a, vec<T> b) { return {vaddq_##S(a.r, b.r)}; }                   \
  inline vec<T> operator-(vec<T> a, vec<T> b) { return {vsubq_##S(a.r, b.r)}; }                   \
  inline vec<T> operator*(vec<T> a, vec<T> b) { return {vmulq_##S(a.r, b.r)}; }                   \
  inline vec<T> operator/(vec<T> a, vec<T> b) { return {vdivq_##S(a.r, b.r)}; }                   \
  inline vec<T> operator-(vec<T> a) { return {vnegq_##S(a.r)}; }                                  \
  inline vec<T> fma(vec<T> a, vec<T> b, vec<T> c) { return {vfmaq_##S(c.r, a.r, b.r)}; }          \
                                                                                                  \
  inline vec<T>::mask_t lt(vec<T> a, vec<T> b) { return vcltq_##S(a.r, b.r); }                    \
  inline vec<T>::mask_t le(vec<T> a, vec<T> b) { return vcleq_##S(a.r, b.r); }                    \
  inline vec<T>::mask_t gt(vec<T> a, vec<T> b) { return vcgtq_##S(a.r, b.r); }                    \
  inline vec<T>::mask_t ge(vec<T> a, vec<T> b) { return vcgeq_##S(a.r, b.r); }                    \
  inline vec<T>::mask_t eq(vec<T> a, vec<T> b) { return vceqq_##S(a.r, b.r); }                    \
  /* NaN != anything is true, as for the scalar operator. */                                      \
  inline vec<T>::mask_t ne(vec<T> a, vec<T> b) { return mask_not(vceqq_##S(a.r, b.r)); }          \
  inline vec<T>::mask_t isnan(vec<T> a) { return mask_not(vceqq_##S(a.r, a.r)); }                 \
  inline vec<T>::mask_t mask_and(vec<T>::mask_t a, vec<T>::mask_t b) { return vandq_##U(a, b); }  \
  inline vec<T>::mask_t mask_or(vec<T>::mask_t a, vec<T>::mask_t b) { return vorrq_##U(a, b); }   \
  inline vec<T> select(vec<T>::mask_t m, vec<T> a, vec<T> b) { return {vbslq_##S(m, a.r, b.r)}; } \
                                                                                                  \
  /* FMIN/FMAX already return NaN when either operand is NaN (unlike FMINNM/FMAXNM). */           \
  inline vec<T> min(vec<T> a, vec<T> b) { return {vminq_##S(a.r, b.r)}; }                         \
  inline vec<T> max(vec<T> a, vec<T> b) { return {vmaxq_##S(a.r, b.r)}; }                         \
  inline vec<T> abs(vec<T> a) { return {vabsq_##S(a.r)}; }                                        \
  inline vec<T> sqrt(vec<T> a) { return {vsqrtq_##S(a.r)}; }                                      \
  inline vec<T> floor(vec<T> a) { return {vrndmq_##S(a.r)}; }                                     \
  inline vec<T> ceil(vec<T> a) { return {vrndpq_##S(a.r)}; }                                      \
  inline vec<T> round(vec<T> a) { return {vrndnq_##S(a.r)}; }                                     \
  inline vec<T> trunc(vec<T> a) { return {vrndq_##S(a.r)}; }                                      \
  /* x * 2^n for integral n, up to twice the exponent range. Splitting n keeps both factors       \
     normal, so only the last multiply rounds and subnormal results are correctly rounded. */     \
  inline vec<T> ldexp(vec<T> x, vec<T> n) {                                                       \
    vec<T> h = floor(n * vec<T>::broadcast(T(0.5)));                                              \
    return x * pow2n(h) * pow2n(n - h);                                                           \
  }

// Mask reductions and complement are per mask type (there is no 64-bit-lane vmvn or vmaxv).
inline bool any(uint32x4_t m) { return vmaxvq_u32(m) != 0; }
inline bool all(uint32x4_t m) { return vminvq_u32(m) != 0; }
inline uint32x4_t mask_not(uint32x4_t a) { return vmvnq_u32(a); }
inline bool any(uint64x2_t m) { return vmaxvq_u32(vreinterpretq_u32_u64(m)) != 0; }
inline bool all(uint64x2_t m) { return vminvq_u32(vreinterpretq_u32_u64(m)) != 0; }
inline uint64x2_t mask_not(uint64x2_t a) {
  return vreinterpretq_u64_u32(vmvnq_u32(vreinterpretq_u32_u64(a)));
}

// Helpers for math.hpp (contracts in vec.hpp), straight from the IEEE bit layout.

inline vec<float> pow2n(vec<float> n) {
  int32x4_t e = vaddq_s32(vcvtq_s32_f32(n.r), vdupq_n_s32(127));
  return {vreinterpretq_f32_s32(vshlq_n_s32(e, 23))};
}
inline vec<float> exponent(vec<float> x) {
  uint32x4_t e = vandq_u32(vshrq_n_u32(vreinterpretq_u32_f32(x.r), 23), vdupq_n_u32(0xff));
  return {vcvtq_f32_s32(vsubq_s32(vreinterpretq_s32_u32(e), vdupq_n_s32(127)))};
}
inline vec<float> mantissa(vec<float> x) {
  uint32x4_t m = vandq_u32(vreinterpretq_u32_f32(x.r), vdupq_n_u32(0x007fffff));
  return {vreinterpretq_f32_u32(vorrq_u32(m, vdupq_n_u32(0x3f800000)))};
}

inline vec<double> pow2n(vec<double> n) {
  int64x2_t e = vaddq_s64(vcvtq_s64_f64(n.r), vdupq_n_s64(1023));
  return {vreinterpretq_f64_s64(vshlq_n_s64(e, 52))};
}
inline vec<double> exponent(vec<double> x) {
  uint64x2_t e = vandq_u64(vshrq_n_u64(vreinterpretq_u64_f64(x.r), 52), vdupq_n_u64(0x7ff));
  return {vcvtq_f64_s64(vsubq_s64(vreinterpretq_s64_u64(e), vdupq_n_s64(1023)))};
}
inline vec<double> mantissa(vec<double> x) {
  uint64x2_t m = vandq_u64(vreinterpretq_u64_f64(x.r), vdupq_n_u64(0x000fffffffffffffull));
  return {vreinterpretq_f64_u64(vorrq_u64(m, vdupq_n_u64(0x3ff0000000000000ull)))};
}

TESSERA_DETAIL_SIMD_NEON_OPS(float, f32, u32)
TESSERA_DETAIL_SIMD_NEON_OPS(double, f64, u64)
#undef TESSERA_DETAIL_SIMD_NEON_OPS

}  // namespace TESSERA_DETAIL_SIMD_NS
}  // namespace detail::simd
TESSERA_END_NAMESPACE
