// tessera/backend/cpu/simd/math.hpp - exp, expm1, log, log1p, tanh, sigmoid and erf on vec<float>
// and vec<double>, written once on top of the per-ISA operations (erf: see its comment). Internal:
// included by vec.hpp only.
//
// Accuracy, max error against libm evaluated in a wider type, round to nearest, no FTZ/DAZ (with
// DAZ set, subnormal inputs read as zero):
//            exp   expm1  log   log1p  tanh  sigmoid  erf
//   float    1.01  1.45   0.95  0.97   1.75  2.40     2.41  ulp, every float checked once (erf:
//                                                           2.4M samples; not in the test)
//   double   0.99  1.61   0.90  0.86   1.49  2.23     libm  ulp, 650k samples per function
// over the whole input range, subnormal inputs and results included (exp rounds correctly into
// the subnormals rather than flushing). Special values follow C99 Annex F: exp(-inf) = +0,
// exp(+inf) = inf, overflow -> inf, log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf,
// tanh(+-inf) = +-1, sigmoid(-inf) = 0, sigmoid(inf) = 1, NaN -> NaN, and expm1, log1p and tanh
// return tiny x (zeros with their sign) unchanged. Floating-point exception flags are not
// meaningful: both sides of every select are computed.
//
// The polynomial coefficients are minimax fits (weighted Remez exchange in 60-digit arithmetic,
// then rounded to T) of the reduced functions named next to them; their own error is below
// 0.06 ulp, so the budget goes to the arithmetic. (erf's are least-squares fits: see erf.)
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#ifndef TESSERA_DETAIL_SIMD_NS
#error "include tessera/backend/cpu/simd/vec.hpp instead of this file"
#endif

#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

TESSERA_BEGIN_NAMESPACE
namespace detail::simd {
inline namespace TESSERA_DETAIL_SIMD_NS {

namespace math_detail {

template <class T>
struct consts;

template <>
struct consts<float> {
  static constexpr float log2e = 1.44269504f;
  // ln 2 = ln2_hi + ln2_lo. With an FMA, x - n * ln2_hi is exact for the n that exp uses (the
  // result is a multiple of ulp(ln2_hi) below 1), so the reduced argument only carries the
  // rounding of the tiny second step.
  static constexpr float ln2_hi = 0.693147182f;
  static constexpr float ln2_lo = -1.90465430e-9f;
  static constexpr float exp_lo = -104.0f;   // below ln(2^-150): exp rounds to +0
  static constexpr float exp_hi = 89.0f;     // above ln(FLT_MAX) = 88.72: exp rounds to inf
  static constexpr float expm1_lo = -18.0f;  // below ln(2^-25): expm1 rounds to -1
  static constexpr float max_exp = 127.0f;   // largest n with 2^n normal
  // (e^r - 1 - r) / r^2 on |r| <= ln2 / 2, relative error of e^r weighted.
  static constexpr float exp_q[] = {0.49999994f, 0.166665211f, 0.0416683853f, 0.00836870261f,
                                    0.001381465f};
  static constexpr float min_normal = std::numeric_limits<float>::min();
  static constexpr float subnormal_scale = 16777216.0f;  // 2^24 makes every subnormal normal
  static constexpr float subnormal_shift = 24.0f;
  static constexpr float sqrt2 = 1.41421354f;
  // (atanh(s) / s - 1) / s^2 in z = s^2, s = (m - 1) / (m + 1), m in [sqrt(1/2), sqrt(2)].
  static constexpr float log_r[] = {0.33333388f, 0.199887872f, 0.14935492f};
  static constexpr float tanh_small = 0.5493f;  // atanh(1/2): below it tanh < 1/2
  // (tanh(x) / x - 1) / x^2 in z = x^2 for |x| <= atanh(1/2).
  static constexpr float tanh_p[] = {-0.333333194f, 0.133326098f, -0.0538547374f, 0.021081591f,
                                     -0.00628818152f};
};

template <>
struct consts<double> {
  static constexpr double log2e = 1.4426950408889634;
  static constexpr double ln2_hi = 0.6931471805599453;
  static constexpr double ln2_lo = 2.3190468138462996e-17;
  static constexpr double exp_lo = -746.0;   // below ln(2^-1075)
  static constexpr double exp_hi = 710.0;    // above ln(DBL_MAX) = 709.78
  static constexpr double expm1_lo = -40.0;  // below ln(2^-54)
  static constexpr double max_exp = 1023.0;
  static constexpr double exp_q[] = {
      0.500000000000001,     0.16666666666666413,    0.04166666666653081,   0.008333333333494201,
      0.0013888888943473635, 0.00019841269506778552, 2.480149325137291e-05, 2.7557586450817575e-06,
      2.76301964298317e-07,  2.4999970366745916e-08};
  static constexpr double min_normal = std::numeric_limits<double>::min();
  static constexpr double subnormal_scale = 18014398509481984.0;  // 2^54
  static constexpr double subnormal_shift = 54.0;
  static constexpr double sqrt2 = 1.4142135623730951;
  static constexpr double log_r[] = {0.33333333333333665, 0.19999999999710635, 0.14285714370569222,
                                     0.11111099343323791, 0.09091779489596488, 0.0765708833154046,
                                     0.07397386216728344};
  static constexpr double tanh_small = 0.5493;
  static constexpr double tanh_p[] = {
      -0.33333333333333304,    0.13333333333327047,   -0.05396825396399894,   0.021869488392510867,
      -0.008863232708677768,   0.0035920931015985063, -0.0014555496934898688, 0.0005884725414470466,
      -0.00023345281362905718, 8.34185594440106e-05,  -1.9557812224711197e-05};
};

template <class T>
inline vec<T> bc(T x) {
  return vec<T>::broadcast(x);
}

template <class T, std::size_t N, std::size_t... I>
inline vec<T> horner(vec<T> x, const T (&c)[N], std::index_sequence<I...>) {
  vec<T> p = bc(c[N - 1]);
  ((p = fma(p, x, bc(c[N - 2 - I]))), ...);
  return p;
}

/// c[0] + c[1] x + ... + c[N-1] x^(N-1), unrolled at compile time.
template <class T, std::size_t N>
inline vec<T> horner(vec<T> x, const T (&c)[N]) {
  return horner(x, c, std::make_index_sequence<N - 1>{});
}

/// x = n ln2 + r with n integral and |r| <= ln2 / 2 (to rounding); x must be clamped so that n
/// stays within twice the exponent range.
template <class T>
struct exp_reduced {
  vec<T> n, r;
};
template <class T>
inline exp_reduced<T> reduce_exp(vec<T> x) {
  using C = consts<T>;
  vec<T> n = round(x * C::log2e);
  vec<T> r = fma(-n, bc(C::ln2_hi), x);
  r = fma(-n, bc(C::ln2_lo), r);
  return {n, r};
}

/// e^r - 1 for |r| <= ln2 / 2. Returning the -1 form keeps expm1 accurate; exp adds the 1 back.
template <class T>
inline vec<T> expm1_reduced(vec<T> r) {
  return fma(r * r, horner(r, consts<T>::exp_q), r);
}

/// Positive normal x = 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)]: centring the mantissa on 1
/// halves the interval the log polynomial must cover.
template <class T>
struct log_reduced {
  vec<T> e, f;
};
template <class T>
inline log_reduced<T> reduce_log(vec<T> x) {
  vec<T> e = exponent(x);
  vec<T> m = mantissa(x);
  auto big = gt(m, bc(consts<T>::sqrt2));
  m = select(big, m * T(0.5), m);
  e = select(big, e + T(1), e);
  return {e, m - T(1)};
}

/// log1p(f) = 2 atanh(s) with s = f / (2 + f), |s| <= 0.172, so 2 atanh(s) = 2s + 2s z R(z) with
/// z = s^2 needs only a short polynomial. Writing 2s = f - s f gives log1p(f) = f - s (f - 2zR):
/// f is exact and only the correction, about f^2/2, carries rounding error. Returns that
/// correction; the caller adds f last.
template <class T>
inline vec<T> log1p_correction(vec<T> f) {
  vec<T> s = f / (f + T(2));
  vec<T> z = s * s;
  vec<T> w = fma(z * T(-2), horner(z, consts<T>::log_r), f);
  return -(s * w);
}

}  // namespace math_detail

/// e^x. Overflows to +inf above ln(max) and rounds correctly into the subnormals below ln(min).
template <class T>
requires available<T>
inline vec<T> exp(vec<T> x) {
  using C = math_detail::consts<T>;
  using math_detail::bc;
  // Clamping (NaN passes through min/max) bounds n so ldexp can still build 2^n; the clamp
  // points are already past overflow and full underflow. The constants come first: an ISA whose
  // min/max must test the first operand for NaN (AVX2) then tests a constant, which folds.
  vec<T> xc = min(bc(C::exp_hi), max(bc(C::exp_lo), x));
  auto [n, r] = math_detail::reduce_exp(xc);
  return ldexp(math_detail::expm1_reduced(r) + T(1), n);
}

/// e^x - 1, accurate near 0 (expm1(x) == x for tiny x, sign of zero kept).
template <class T>
requires available<T>
inline vec<T> expm1(vec<T> x) {
  using C = math_detail::consts<T>;
  using math_detail::bc;
  vec<T> xc = min(bc(C::exp_hi), max(bc(C::expm1_lo), x));  // constants first, as in exp
  auto [n, r] = math_detail::reduce_exp(xc);
  vec<T> em = math_detail::expm1_reduced(r);
  // e^x - 1 = 2^n em + (2^n - 1) with one fma rounding the sum. 2^n - 1 is exact up to
  // n = digits, where cancellation could hurt; past it its own rounding costs under half an ulp
  // (the worst case, ~1.5 ulp, is at x ~ 17 for float). n = max_exp + 1 (x near ln(max)) does not
  // fit pow2n, so it scales by 2 afterwards; the -1 it mis-scales is then far below an ulp.
  vec<T> n1 = min(n, bc(C::max_exp));
  vec<T> s = pow2n(n1);
  vec<T> y = fma(em, s, s - T(1)) * pow2n(n - n1);
  return select(eq(x, bc(T(0))), x, y);
}

/// Natural log. log(0) = -inf, log(x < 0) = NaN, log(inf) = inf; subnormal x are exact inputs.
template <class T>
requires available<T>
inline vec<T> log(vec<T> x) {
  using C = math_detail::consts<T>;
  using math_detail::bc;
  constexpr T inf = std::numeric_limits<T>::infinity();
  // Scaling subnormals up lets the ISA's exponent/mantissa split assume normal inputs.
  auto tiny = lt(x, bc(C::min_normal));
  vec<T> xs = select(tiny, x * C::subnormal_scale, x);
  auto [e, f] = math_detail::reduce_log(xs);
  e = e - select(tiny, bc(C::subnormal_shift), bc(T(0)));
  // e ln2_hi (the dominant term whenever e != 0) enters exactly through the fma; only the small
  // remainder `lo` is rounded before the final sum.
  vec<T> lo = fma(e, bc(C::ln2_lo), math_detail::log1p_correction(f)) + f;
  vec<T> y = fma(e, bc(C::ln2_hi), lo);
  y = select(eq(x, bc(inf)), x, y);
  y = select(eq(x, bc(T(0))), bc(-inf), y);
  return select(mask_or(lt(x, bc(T(0))), isnan(x)), bc(std::numeric_limits<T>::quiet_NaN()), y);
}

/// log(1 + x), accurate near 0 (log1p(x) == x for tiny x, sign of zero kept).
template <class T>
requires available<T>
inline vec<T> log1p(vec<T> x) {
  using C = math_detail::consts<T>;
  using math_detail::bc;
  constexpr T inf = std::numeric_limits<T>::infinity();
  // u = 1 + x rounds; c / u with c = x - (u - 1) (exact) is the first-order correction
  // log(1 + x) - log(u), so the reduction works on u but keeps every bit of x.
  vec<T> u = x + T(1);
  vec<T> c = (x - (u - T(1))) / u;
  auto [e, f] = math_detail::reduce_log(u);
  vec<T> lo = fma(e, bc(C::ln2_lo), math_detail::log1p_correction(f) + c) + f;
  vec<T> y = fma(e, bc(C::ln2_hi), lo);
  y = select(eq(x, bc(inf)), x, y);
  y = select(eq(x, bc(T(-1))), bc(-inf), y);
  y = select(eq(x, bc(T(0))), x, y);
  return select(mask_or(lt(x, bc(T(-1))), isnan(x)), bc(std::numeric_limits<T>::quiet_NaN()), y);
}

/// Hyperbolic tangent; tanh(x) == x for tiny x, tanh(+-inf) = +-1.
template <class T>
requires available<T>
inline vec<T> tanh(vec<T> x) {
  using C = math_detail::consts<T>;
  using math_detail::bc;
  vec<T> a = abs(x);
  // Below atanh(1/2) an odd polynomial keeps relative accuracy down to the subnormals, where the
  // exp form would cancel. Above it (1 - e) / (1 + e) with e = e^-2|x| <= 1/3 has no cancellation
  // and no overflow: e underflows to 0 and the result to exactly 1.
  vec<T> z = x * x;
  vec<T> small = fma(x * z, math_detail::horner(z, C::tanh_p), x);
  vec<T> e = exp(a * T(-2));
  vec<T> big = (T(1) - e) / (e + T(1));
  big = select(lt(x, bc(T(0))), -big, big);
  // The correction term of `small` is a zero of the opposite sign when x is a zero.
  return select(lt(a, bc(C::tanh_small)), select(eq(x, bc(T(0))), x, small), big);
}

/// The error function. float: below |x| = 0.921875 an odd polynomial x P(x^2) (relative accuracy
/// down to the subnormals); above it 1 - e^Q(|x|), Q a polynomial fit of log(erfc) up to 4, past
/// which erf is 1 in float. Both are least-squares fits on Chebyshev nodes (fit error below
/// 5e-10 and 3e-9); measured 2.4 ulp at most. erf(+-inf) = +-1, erf(+-0) = +-0, NaN -> NaN.
/// double: libm per lane (exact, not faster than scalar code).
template <class T>
requires available<T>
inline vec<T> erf(vec<T> x) {
  using math_detail::bc;
  if constexpr (std::is_same_v<T, float>) {
    static constexpr float small_p[] = {1.12837917f,    -0.376126334f,  0.112836943f,
                                        -0.0268593414f, 0.00520090522f, -0.000814139199f,
                                        8.36500610e-05f};
    static constexpr float tail_p[] = {0.000217962487f, -1.12969939f,    -0.633052875f,
                                       -0.108450223f,   0.0250352686f,   -0.00397180693f,
                                       0.000293629093f, 3.19641137e-05f, -1.12206885e-05f,
                                       1.22630735e-06f, -5.14524336e-08f};
    const vec<T> a = abs(x);
    const vec<T> small = x * math_detail::horner(x * x, small_p);
    // min with the constant first: NaN passes through (see exp).
    vec<T> big = T(1) - exp(math_detail::horner(min(bc(T(4)), a), tail_p));
    big = select(lt(x, bc(T(0))), -big, big);
    return select(lt(a, bc(T(0.921875))), small, big);
  } else {
    alignas(64) T lanes[vec<T>::width];
    x.store(lanes);
    for (T& v : lanes) v = std::erf(v);
    return vec<T>::load(lanes);
  }
}

/// 1 / (1 + e^-x). Uses e = e^-|x| <= 1 for both signs (e / (1 + e) for x < 0), so there is no
/// overflow and results for very negative x keep full relative accuracy into the subnormals.
template <class T>
requires available<T>
inline vec<T> sigmoid(vec<T> x) {
  using math_detail::bc;
  vec<T> e = exp(-abs(x));
  return select(lt(x, bc(T(0))), e, bc(T(1))) / (e + T(1));
}

}  // namespace TESSERA_DETAIL_SIMD_NS
}  // namespace detail::simd
TESSERA_END_NAMESPACE
