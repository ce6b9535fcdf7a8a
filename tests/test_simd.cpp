// tests/test_simd.cpp - the CPU kernels' vectors (detail::simd) against the standard library, on
// the instruction set this build targets (built plain, with -mavx2 -mfma -mf16c, with the AVX-512
// flags, on NEON; the scalar builds skip every vec test). Everything touching vec<T> is a template
// on T so the scalar build still compiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

// One instruction set: the compiler's baseline (the -m flags of this build).
#ifndef TESSERA_NO_ISA_DISPATCH
#define TESSERA_NO_ISA_DISPATCH
#endif
#include "tessera/backend/cpu/kernels.hpp"

namespace simd = tessera::TESSERA_DETAIL_CPU_BASELINE_NS::detail::simd;

namespace {

template <class T>
using lim = std::numeric_limits<T>;

// -------------------------------------------------------------------------------------------------
// Interface checks that hold on every ISA.

template <class T>
concept has_exp = requires {
  simd::exp(std::declval<simd::vec<T>>());
};
template <class T>
concept has_plus = requires {
  std::declval<simd::vec<T>>() + std::declval<simd::vec<T>>();
};

static_assert(!simd::available<int>);
static_assert(!simd::available<long double>);
static_assert(!has_exp<int>);
static_assert(has_exp<float> == simd::available<float>);
static_assert(has_exp<double> == simd::available<double>);
static_assert(has_plus<float> == simd::available<float>);
static_assert(simd::available<float> == simd::available<double>);

TEST(SimdIsa, MatchesBuildMacros) {
  std::printf("[   ISA    ] %s\n", simd::isa_name);
#if defined(TESSERA_SIMD_SCALAR)
  EXPECT_STREQ(simd::isa_name, "scalar");
  EXPECT_FALSE(simd::available<float>);
  EXPECT_FALSE(simd::available<double>);
#elif defined(__AVX512F__) && defined(__AVX512VNNI__)
  EXPECT_STREQ(simd::isa_name, "avx512");
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  EXPECT_STREQ(simd::isa_name, "avx2");
#elif defined(__ARM_NEON) && defined(__aarch64__)
  EXPECT_STREQ(simd::isa_name, "neon");
#else
  EXPECT_STREQ(simd::isa_name, "scalar");
  EXPECT_FALSE(simd::available<float>);
#endif
}

template <class T>
void check_widths() {
  if constexpr (simd::available<T>) {
    using V = simd::vec<T>;
    const std::string isa = simd::isa_name;
    const int bytes = isa == "avx512" ? 64 : isa == "avx2" ? 32 : 16;
    EXPECT_EQ(V::width * static_cast<int>(sizeof(T)), bytes);
    EXPECT_EQ(sizeof(V), static_cast<size_t>(bytes));
    static_assert(std::is_same_v<typename V::value_type, T>);
    static_assert(std::is_trivially_copyable_v<V>);
  }
}

// -------------------------------------------------------------------------------------------------
// Helpers.

/// Same value, including the sign of zero; any NaN matches any NaN.
template <class T>
bool same(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

/// Same value, ignoring the sign of zero.
template <class T>
bool same_value(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;
}

/// Runs f on every full vector of `in` (padding the tail with copies of the first element).
template <class T, class F>
auto map(const std::vector<T>& in, F f) {
  using V = simd::vec<T>;
  using R = decltype(f(V::broadcast(T())));
  std::vector<T> out(in.size());
  std::vector<T> buf(V::width), res(V::width);
  for (size_t i = 0; i < in.size(); i += V::width) {
    for (int j = 0; j < V::width; ++j) buf[j] = i + j < in.size() ? in[i + j] : in[0];
    R r = f(V::load(buf.data()));
    r.store(res.data());
    for (int j = 0; j < V::width && i + j < in.size(); ++j) out[i + j] = res[j];
  }
  return out;
}

/// Same for two inputs.
template <class T, class F>
std::vector<T> map2(const std::vector<T>& a, const std::vector<T>& b, F f) {
  using V = simd::vec<T>;
  std::vector<T> out(a.size());
  std::vector<T> ba(V::width), bb(V::width), res(V::width);
  for (size_t i = 0; i < a.size(); i += V::width) {
    for (int j = 0; j < V::width; ++j) {
      ba[j] = i + j < a.size() ? a[i + j] : a[0];
      bb[j] = i + j < a.size() ? b[i + j] : b[0];
    }
    f(V::load(ba.data()), V::load(bb.data())).store(res.data());
    for (int j = 0; j < V::width && i + j < a.size(); ++j) out[i + j] = res[j];
  }
  return out;
}

template <class T>
std::vector<T> special_values() {
  return {T(0),
          -T(0),
          T(1),
          T(-1),
          T(0.5),
          T(-0.5),
          T(1.5),
          T(-1.5),
          T(2.5),
          T(-2.5),
          T(3.5),
          T(-3.5),
          std::nextafter(T(0.5), T(0)),
          std::nextafter(T(-0.5), T(0)),
          T(0.1),
          T(-7.25),
          T(1) / lim<T>::epsilon(),               // 2^(digits-1): from here on all integral
          T(1) / lim<T>::epsilon() / 2 + T(0.5),  // the largest value with a fraction
          -(T(1) / lim<T>::epsilon() / 2 + T(0.5)),
          T(123456.789),
          T(-1e-30),
          lim<T>::epsilon(),
          lim<T>::min(),
          -lim<T>::min(),
          lim<T>::denorm_min(),
          -lim<T>::denorm_min(),
          T(3) * lim<T>::denorm_min(),
          lim<T>::max(),
          lim<T>::lowest(),
          lim<T>::infinity(),
          -lim<T>::infinity(),
          lim<T>::quiet_NaN(),
          -lim<T>::quiet_NaN()};
}

template <class T>
T random_bits(std::mt19937_64& rng) {
  if constexpr (sizeof(T) == 4) {
    return std::bit_cast<float>(static_cast<uint32_t>(rng()));
  } else {
    return std::bit_cast<double>(static_cast<uint64_t>(rng()));
  }
}

/// Specials, random bit patterns (every exponent, NaNs included), moderate values and exact
/// halves (the rounding ties).
template <class T>
std::vector<T> op_inputs(size_t n_random = 3000) {
  std::vector<T> v = special_values<T>();
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<T> mid(T(-100), T(100));
  std::uniform_int_distribution<int> ints(-1000, 1000);
  for (size_t i = 0; i < n_random; ++i) {
    v.push_back(random_bits<T>(rng));
    v.push_back(mid(rng));
    v.push_back(T(ints(rng)) + T(0.5));
  }
  return v;
}

template <class T>
std::string show(T x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", lim<T>::max_digits10, static_cast<double>(x));
  return buf;
}

// -------------------------------------------------------------------------------------------------
// Element-wise operations: bit-exact against the scalar operation.

template <class T>
class SimdOps : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SimdOps, FloatTypes);

#define SKIP_IF_SCALAR(T)                                                  \
  if constexpr (!simd::available<T>) {                                     \
    GTEST_SKIP() << "no SIMD in this build (isa_name = " << simd::isa_name \
                 << "); available<T> is false as expected";                \
  } else

TYPED_TEST(SimdOps, WidthAndLayout) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) { check_widths<T>(); }
}

TYPED_TEST(SimdOps, LoadStoreBroadcastUnaligned) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    using V = simd::vec<T>;
    std::vector<T> src(3 * V::width + 1), dst(3 * V::width + 1, T(-1));
    for (size_t i = 0; i < src.size(); ++i) src[i] = T(i) * T(1.25);
    V::load(src.data() + 1).store(dst.data() + 1);  // one element off any vector alignment
    for (int i = 0; i < V::width; ++i) EXPECT_EQ(dst[i + 1], src[i + 1]);
    EXPECT_EQ(dst[0], T(-1));
    EXPECT_EQ(dst[V::width + 1], T(-1));
    V::broadcast(T(2.5)).store(dst.data());
    for (int i = 0; i < V::width; ++i) EXPECT_EQ(dst[i], T(2.5));
  }
}

template <class T, class VF, class SF>
void expect_unary(const char* name, VF vf, SF sf, bool exact_zero_sign = true) {
  const std::vector<T> in = op_inputs<T>();
  const std::vector<T> got = map(in, vf);
  int failures = 0;
  for (size_t i = 0; i < in.size() && failures < 10; ++i) {
    const T want = sf(in[i]);
    const bool ok = exact_zero_sign ? same(got[i], want) : same_value(got[i], want);
    if (!ok) {
      ++failures;
      ADD_FAILURE() << name << "(" << show(in[i]) << ") = " << show(got[i]) << ", want "
                    << show(want);
    }
  }
}

template <class T, class VF, class SF>
void expect_binary(const char* name, VF vf, SF sf, bool exact_zero_sign = true) {
  const std::vector<T> base = op_inputs<T>(500);
  std::vector<T> a, b;
  const std::vector<T> sp = special_values<T>();
  for (T x : sp) {
    for (T y : sp) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  for (size_t i = 0; i < base.size(); ++i) {
    a.push_back(base[i]);
    b.push_back(base[(i * 7919 + 13) % base.size()]);
  }
  const std::vector<T> got = map2(a, b, vf);
  int failures = 0;
  for (size_t i = 0; i < a.size() && failures < 10; ++i) {
    const T want = sf(a[i], b[i]);
    const bool ok = exact_zero_sign ? same(got[i], want) : same_value(got[i], want);
    if (!ok) {
      ++failures;
      ADD_FAILURE() << name << "(" << show(a[i]) << ", " << show(b[i]) << ") = " << show(got[i])
                    << ", want " << show(want);
    }
  }
}

template <class T>
T nan_min(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return lim<T>::quiet_NaN();
  return std::fmin(a, b);
}
template <class T>
T nan_max(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return lim<T>::quiet_NaN();
  return std::fmax(a, b);
}

TYPED_TEST(SimdOps, Arithmetic) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    using V = simd::vec<T>;
    // Unqualified calls check that argument-dependent lookup finds the operations.
    expect_binary<T>(
        "+", [](V a, V b) { return a + b; }, [](T a, T b) { return a + b; });
    expect_binary<T>(
        "-", [](V a, V b) { return a - b; }, [](T a, T b) { return a - b; });
    expect_binary<T>(
        "*", [](V a, V b) { return a * b; }, [](T a, T b) { return a * b; });
    expect_binary<T>(
        "/", [](V a, V b) { return a / b; }, [](T a, T b) { return a / b; });
    expect_unary<T>(
        "neg", [](V a) { return -a; }, [](T a) { return -a; });
    // fma(a, b, c) with c = a + b keeps all three operands interesting.
    expect_binary<T>(
        "fma", [](V a, V b) { return fma(a, b, a + b); },
        [](T a, T b) { return std::fma(a, b, a + b); });
  }
}

TYPED_TEST(SimdOps, CompoundAndMixedScalar) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    using V = simd::vec<T>;
    const T x0 = T(3.25), y0 = T(-1.5);
    V x = V::broadcast(x0), y = V::broadcast(y0);
    T out[64];
    auto lane0 = [&](V v) {
      v.store(out);
      for (int i = 1; i < V::width; ++i) EXPECT_TRUE(same(out[i], out[0]));
      return out[0];
    };
    EXPECT_EQ(lane0(2 * x), T(6.5));
    EXPECT_EQ(lane0(x * 2), T(6.5));
    EXPECT_EQ(lane0(x * 0.5), T(1.625));
    EXPECT_EQ(lane0(x + 1), T(4.25));
    EXPECT_EQ(lane0(1 + x), T(4.25));
    EXPECT_EQ(lane0(x - 1), T(2.25));
    EXPECT_EQ(lane0(1 - x), T(-2.25));
    EXPECT_EQ(lane0(x / 2), T(1.625));
    EXPECT_EQ(lane0(13 / x), T(13) / x0);
    EXPECT_EQ(lane0(x * 0.1), x0 * static_cast<T>(0.1));  // the scalar is converted to T first
    EXPECT_EQ(lane0(1u + x), T(4.25));
    EXPECT_EQ(lane0(std::int64_t{-2} * x), T(-6.5));
    const T a = T(0.7);
    const T axy = lane0(a * x + y);  // the compiler may contract this into an fma
    EXPECT_TRUE(axy == a * x0 + y0 || axy == std::fma(a, x0, y0)) << show(axy);
    V z = x;
    z += y;
    EXPECT_EQ(lane0(z), x0 + y0);
    z -= y;
    EXPECT_EQ(lane0(z), x0);
    z *= y;
    EXPECT_EQ(lane0(z), x0 * y0);
    z /= y;
    EXPECT_EQ(lane0(z), x0);
    z += 1;
    z -= 0.5;
    z *= 4;
    z /= 2.0f;
    EXPECT_EQ(lane0(z), (x0 + T(0.5)) * 2);
    V& ref = (z += y);
    EXPECT_EQ(&ref, &z);
  }
}

TYPED_TEST(SimdOps, MinMaxPropagateNaN) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    using V = simd::vec<T>;
    // The sign of a zero result is unspecified when the inputs are +0 and -0.
    expect_binary<T>(
        "min", [](V a, V b) { return min(a, b); }, nan_min<T>, false);
    expect_binary<T>(
        "max", [](V a, V b) { return max(a, b); }, nan_max<T>, false);
    expect_unary<T>(
        "relu", [](V a) { return relu(a); },
        [](T a) { return std::isnan(a) ? a
                         : a > 0       ? a
                                       : T(0); }, false);
  }
}

TYPED_TEST(SimdOps, AbsSqrtRounding) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    using V = simd::vec<T>;
    expect_unary<T>(
        "abs", [](V a) { return abs(a); }, [](T a) { return std::fabs(a); });
    expect_unary<T>(
        "sqrt", [](V a) { return sqrt(a); }, [](T a) { return std::sqrt(a); });
    expect_unary<T>(
        "floor", [](V a) { return floor(a); }, [](T a) { return std::floor(a); });
    expect_unary<T>(
        "ceil", [](V a) { return ceil(a); }, [](T a) { return std::ceil(a); });
    expect_unary<T>(
        "trunc", [](V a) { return trunc(a); }, [](T a) { return std::trunc(a); });
    // Half to even, i.e. nearbyint in the default rounding mode (std::round is half away).
    expect_unary<T>(
        "round", [](V a) { return round(a); }, [](T a) { return std::nearbyint(a); });
    T out[64];
    simd::round(V::broadcast(T(2.5))).store(out);
    EXPECT_EQ(out[0], T(2));
    simd::round(V::broadcast(T(-3.5))).store(out);
    EXPECT_EQ(out[0], T(-4));
  }
}

/// Turns a mask into 1 / 0 lanes through select.
template <class T>
auto mask_to_lanes() {
  using V = simd::vec<T>;
  return [](typename V::mask_t m) { return select(m, V::broadcast(T(1)), V::broadcast(T(0))); };
}

TYPED_TEST(SimdOps, ComparisonsAndSelect) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    using V = simd::vec<T>;
    auto lanes = mask_to_lanes<T>();
    auto b2t = [](bool b) { return b ? T(1) : T(0); };
    expect_binary<T>(
        "lt", [&](V a, V b) { return lanes(lt(a, b)); }, [&](T a, T b) { return b2t(a < b); });
    expect_binary<T>(
        "le", [&](V a, V b) { return lanes(le(a, b)); }, [&](T a, T b) { return b2t(a <= b); });
    expect_binary<T>(
        "gt", [&](V a, V b) { return lanes(gt(a, b)); }, [&](T a, T b) { return b2t(a > b); });
    expect_binary<T>(
        "ge", [&](V a, V b) { return lanes(ge(a, b)); }, [&](T a, T b) { return b2t(a >= b); });
    expect_binary<T>(
        "eq", [&](V a, V b) { return lanes(eq(a, b)); }, [&](T a, T b) { return b2t(a == b); });
    expect_binary<T>(
        "ne", [&](V a, V b) { return lanes(ne(a, b)); }, [&](T a, T b) { return b2t(a != b); });
    expect_unary<T>(
        "isnan", [&](V a) { return lanes(isnan(a)); }, [&](T a) { return b2t(std::isnan(a)); });
    expect_binary<T>(
        "select", [](V a, V b) { return select(lt(a, b), a, b); },
        [](T a, T b) { return a < b ? a : b; });
    expect_binary<T>(
        "mask_and",
        [&](V a, V b) { return lanes(simd::mask_and(lt(a, b), gt(a, V::broadcast(T(0))))); },
        [&](T a, T b) { return b2t(a < b && a > 0); });
    expect_binary<T>(
        "mask_or", [&](V a, V b) { return lanes(simd::mask_or(lt(a, b), isnan(a))); },
        [&](T a, T b) { return b2t(a < b || std::isnan(a)); });
    expect_binary<T>(
        "mask_not", [&](V a, V b) { return lanes(simd::mask_not(lt(a, b))); },
        [&](T a, T b) { return b2t(!(a < b)); });
  }
}

TYPED_TEST(SimdOps, AnyAll) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    using V = simd::vec<T>;
    std::vector<T> buf(V::width, T(0));
    const V zero = V::broadcast(T(0));
    EXPECT_FALSE(simd::any(gt(V::load(buf.data()), zero)));
    EXPECT_FALSE(simd::all(gt(V::load(buf.data()), zero)));
    EXPECT_TRUE(simd::all(eq(V::load(buf.data()), zero)));
    for (int i = 0; i < V::width; ++i) {
      std::fill(buf.begin(), buf.end(), T(0));
      buf[i] = T(1);
      EXPECT_TRUE(simd::any(gt(V::load(buf.data()), zero))) << "lane " << i;
      EXPECT_FALSE(simd::all(gt(V::load(buf.data()), zero))) << "lane " << i;
      std::fill(buf.begin(), buf.end(), T(1));
      buf[i] = lim<T>::quiet_NaN();
      EXPECT_TRUE(simd::any(isnan(V::load(buf.data())))) << "lane " << i;
      EXPECT_FALSE(simd::all(eq(V::load(buf.data()), V::load(buf.data())))) << "lane " << i;
    }
  }
}

TYPED_TEST(SimdOps, MathHelpers) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    using V = simd::vec<T>;
    const int emin = lim<T>::min_exponent - 1, emax = lim<T>::max_exponent - 1;
    std::vector<T> n;
    for (int e = emin; e <= emax; ++e) n.push_back(T(e));
    auto p = map(n, [](V v) { return simd::pow2n(v); });
    for (size_t i = 0; i < n.size(); ++i) ASSERT_EQ(p[i], std::ldexp(T(1), int(n[i]))) << n[i];
    p = map(std::vector<T>{T(emax + 1)}, [](V v) { return simd::pow2n(v); });
    EXPECT_EQ(p[0], lim<T>::infinity());

    // ldexp over its documented range, twice the normal exponent range, which includes every
    // subnormal and overflowing result.
    std::vector<T> xs, es;
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<T> mant(T(0.5), T(2));
    for (int e = 2 * emin; e <= 2 * emax + 1; ++e) {
      for (int k = 0; k < 4; ++k) {
        xs.push_back(k == 0 ? T(1) : mant(rng));
        es.push_back(T(e));
      }
    }
    auto l = map2(xs, es, [](V x, V e) { return simd::ldexp(x, e); });
    for (size_t i = 0; i < xs.size(); ++i) {
      ASSERT_EQ(l[i], std::ldexp(xs[i], int(es[i]))) << show(xs[i]) << " * 2^" << es[i];
    }

    // exponent / mantissa on positive normal numbers.
    std::vector<T> pos;
    for (int i = 0; i < 2000; ++i) {
      T x = std::fabs(random_bits<T>(rng));
      if (std::isnormal(x)) pos.push_back(x);
    }
    pos.push_back(lim<T>::min());
    pos.push_back(lim<T>::max());
    pos.push_back(T(1));
    auto ex = map(pos, [](V v) { return simd::exponent(v); });
    auto ma = map(pos, [](V v) { return simd::mantissa(v); });
    for (size_t i = 0; i < pos.size(); ++i) {
      EXPECT_EQ(ex[i], T(std::ilogb(pos[i]))) << show(pos[i]);
      EXPECT_EQ(ma[i], std::scalbn(pos[i], -std::ilogb(pos[i]))) << show(pos[i]);
    }
  }
}

// -------------------------------------------------------------------------------------------------
// Transcendental functions: special values exactly, everything else within an ulp bound measured
// against libm evaluated in a wider type (double for float, long double for double), so the
// reference error is negligible and the printed errors are fractional.

template <class T>
using wide_t = std::conditional_t<std::is_same_v<T, float>, double, long double>;

/// |got - ref| in units of the last place of T at ref; inf when NaN-ness or infinities disagree.
template <class T>
double ulp_error(T got, wide_t<T> ref) {
  using R = wide_t<T>;
  constexpr double inf = lim<double>::infinity();
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0 : inf;
  const T ref_t = static_cast<T>(ref);
  if (std::isinf(ref_t) || std::isinf(got)) return got == ref_t ? 0 : inf;
  int e = ref == 0 ? lim<T>::min_exponent - 1 : std::ilogb(ref);
  e = std::max(e, lim<T>::min_exponent - 1);  // subnormals share the smallest ulp
  const R ulp = std::ldexp(R(1), e - (lim<T>::digits - 1));
  return static_cast<double>(std::fabs(R(got) - ref) / ulp);
}

enum class fn { exp, expm1, log, log1p, tanh, sigmoid, erf };

const char* fn_name(fn f) {
  switch (f) {
    case fn::exp:
      return "exp";
    case fn::expm1:
      return "expm1";
    case fn::log:
      return "log";
    case fn::log1p:
      return "log1p";
    case fn::tanh:
      return "tanh";
    case fn::sigmoid:
      return "sigmoid";
    case fn::erf:
      return "erf";
  }
  return "?";
}

template <class T>
wide_t<T> reference(fn f, T x) {
  using R = wide_t<T>;
  const R w = x;
  switch (f) {
    case fn::exp:
      return std::exp(w);
    case fn::expm1:
      return std::expm1(w);
    case fn::log:
      return std::log(w);
    case fn::log1p:
      return std::log1p(w);
    case fn::tanh:
      return std::tanh(w);
    case fn::sigmoid:
      return R(1) / (R(1) + std::exp(-w));
    case fn::erf:
      return std::erf(w);
  }
  return 0;
}

template <class T>
std::vector<T> run_fn(fn f, const std::vector<T>& in) {
  using V = simd::vec<T>;
  switch (f) {
    case fn::exp:
      return map(in, [](V v) { return exp(v); });  // unqualified: ADL
    case fn::expm1:
      return map(in, [](V v) { return expm1(v); });
    case fn::log:
      return map(in, [](V v) { return log(v); });
    case fn::log1p:
      return map(in, [](V v) { return log1p(v); });
    case fn::tanh:
      return map(in, [](V v) { return tanh(v); });
    case fn::sigmoid:
      return map(in, [](V v) { return sigmoid(v); });
    case fn::erf:
      return map(in, [](V v) { return erf(v); });
  }
  return {};
}

/// Inputs for one function: a sweep over the whole range (every k-th float bit pattern; random
/// bit patterns for double), then dense random samples where the function is interesting.
/// Unoptimised (sanitizer) builds sample 8x more sparsely to stay within the time budget.
#if defined(__OPTIMIZE__)
constexpr int sparse = 1;
#else
constexpr int sparse = 8;
#endif

template <class T>
std::vector<T> math_inputs(fn f) {
  std::vector<T> v = special_values<T>();
  std::mt19937_64 rng(1234 + static_cast<int>(f));
  if constexpr (sizeof(T) == 4) {
    for (uint64_t b = static_cast<uint64_t>(f); b < (uint64_t{1} << 32); b += 2039 * sparse) {
      v.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
    }
  } else {
    for (int i = 0; i < 200000 / sparse; ++i) v.push_back(random_bits<T>(rng));
  }
  auto uniform = [&](T lo, T hi, int count) {
    std::uniform_real_distribution<T> d(lo, hi);
    for (int i = 0; i < count / sparse; ++i) v.push_back(d(rng));
  };
  auto log_uniform = [&](int e_lo, int e_hi, int count, bool both_signs) {
    std::uniform_real_distribution<T> e{T(e_lo), T(e_hi)};
    for (int i = 0; i < count / sparse; ++i) {
      T x = std::exp2(e(rng));
      v.push_back(both_signs && (i & 1) ? -x : x);
    }
  };
  const bool is_float = sizeof(T) == 4;
  const T ln_max = std::log(lim<T>::max());
  const T ln_tiny = std::log(lim<T>::denorm_min());
  switch (f) {
    case fn::exp:
      uniform(ln_tiny - 2, ln_max + 1, 200000);
      uniform(ln_tiny - 2, std::log(lim<T>::min()) + 1, 50000);  // subnormal results
      uniform(ln_max - T(0.01), ln_max + T(0.01), 20000);        // the overflow edge
      uniform(T(-1), T(1), 50000);
      log_uniform(lim<T>::min_exponent - 30, 0, 50000, true);
      break;
    case fn::expm1:
      uniform(T(-50), ln_max + 1, 200000);
      uniform(T(-2), T(2), 100000);
      uniform(ln_max - T(0.01), ln_max + T(0.01), 20000);
      log_uniform(lim<T>::min_exponent - 30, 0, 50000, true);
      break;
    case fn::log:
    case fn::log1p:
      uniform(T(0.5), T(2), 200000);  // around 1, the critical region
      uniform(T(-1), T(1), 100000);
      log_uniform(lim<T>::min_exponent - lim<T>::digits - 1, lim<T>::max_exponent, 100000, false);
      log_uniform(lim<T>::min_exponent - lim<T>::digits - 1, 0, 50000, true);
      break;
    case fn::tanh:
      uniform(T(-20), T(20), 200000);
      uniform(T(-0.6), T(0.6), 100000);  // both sides of the polynomial / exp switch
      log_uniform(lim<T>::min_exponent - 30, 6, 50000, true);
      break;
    case fn::sigmoid:
      uniform(ln_tiny - 2, T(40), 200000);
      uniform(T(-20), T(20), 100000);
      log_uniform(lim<T>::min_exponent - 30, 6, 50000, true);
      break;
    case fn::erf:
      uniform(T(-6), T(6), 200000);
      uniform(T(0.9), T(0.95), 50000);  // both sides of the polynomial / exp switch
      uniform(T(3.8), T(4.2), 20000);   // where float erf reaches 1
      log_uniform(lim<T>::min_exponent - 30, 3, 50000, true);
      break;
  }
  (void)is_float;
  return v;
}

template <class T>
double max_ulp_error(fn f) {
  const std::vector<T> in = math_inputs<T>(f);
  const std::vector<T> got = run_fn(f, in);
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const double e = ulp_error<T>(got[i], reference(f, in[i]));
    if (e > worst || std::isnan(e)) {
      worst = e;
      worst_i = i;
    }
  }
  std::printf("[ max ulp  ] %-7s %-6s %.3f ulp at x = %s over %zu inputs\n", fn_name(f),
              sizeof(T) == 4 ? "float" : "double", worst, show(in[worst_i]).c_str(), in.size());
  if (!(worst <= 3)) {
    ADD_FAILURE() << fn_name(f) << "(" << show(in[worst_i]) << ") = " << show(got[worst_i])
                  << ", reference " << show(static_cast<T>(reference(f, in[worst_i]))) << ": "
                  << worst << " ulp";
  }
  return worst;
}

template <class T>
class SimdMath : public ::testing::Test {};
TYPED_TEST_SUITE(SimdMath, FloatTypes);

TYPED_TEST(SimdMath, UlpErrorWithin3) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    for (fn f : {fn::exp, fn::expm1, fn::log, fn::log1p, fn::tanh, fn::sigmoid, fn::erf}) {
      max_ulp_error<T>(f);
    }
  }
}

struct special_case {
  fn f;
  double x, want;  // exactly representable in float and double (or inf / NaN)
};

TYPED_TEST(SimdMath, SpecialValues) {
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    constexpr double inf = lim<double>::infinity(), nan = lim<double>::quiet_NaN();
    const double tiny = lim<T>::denorm_min(), big = lim<T>::max();
    const special_case cases[] = {
        {fn::exp, -inf, 0},          {fn::exp, inf, inf},
        {fn::exp, nan, nan},         {fn::exp, 0, 1},
        {fn::exp, -0.0, 1},          {fn::exp, big, inf},
        {fn::exp, -big, 0},          {fn::exp, 1000, inf},
        {fn::exp, -1000, 0},         {fn::exp, 800, inf},
        {fn::exp, -800, 0},          {fn::exp, 1e-30, 1},
        {fn::exp, tiny, 1},          {fn::exp, -tiny, 1},

        {fn::expm1, -inf, -1},       {fn::expm1, inf, inf},
        {fn::expm1, nan, nan},       {fn::expm1, 0, 0},
        {fn::expm1, -0.0, -0.0},     {fn::expm1, tiny, tiny},
        {fn::expm1, -tiny, -tiny},   {fn::expm1, 1e-30, 1e-30},
        {fn::expm1, big, inf},       {fn::expm1, -big, -1},
        {fn::expm1, -1000, -1},      {fn::expm1, 1000, inf},

        {fn::log, 0, -inf},          {fn::log, -0.0, -inf},
        {fn::log, -1, nan},          {fn::log, -tiny, nan},
        {fn::log, -inf, nan},        {fn::log, inf, inf},
        {fn::log, nan, nan},         {fn::log, 1, 0},

        {fn::log1p, -1, -inf},       {fn::log1p, -2, nan},
        {fn::log1p, -inf, nan},      {fn::log1p, inf, inf},
        {fn::log1p, nan, nan},       {fn::log1p, 0, 0},
        {fn::log1p, -0.0, -0.0},     {fn::log1p, tiny, tiny},
        {fn::log1p, -tiny, -tiny},   {fn::log1p, 1e-30, 1e-30},
        {fn::log1p, -1e-30, -1e-30},

        {fn::tanh, inf, 1},          {fn::tanh, -inf, -1},
        {fn::tanh, nan, nan},        {fn::tanh, 0, 0},
        {fn::tanh, -0.0, -0.0},      {fn::tanh, tiny, tiny},
        {fn::tanh, -tiny, -tiny},    {fn::tanh, 1e-30, 1e-30},
        {fn::tanh, -1e-30, -1e-30},  {fn::tanh, 40, 1},
        {fn::tanh, -40, -1},         {fn::tanh, big, 1},
        {fn::tanh, -big, -1},

        {fn::sigmoid, -inf, 0},      {fn::sigmoid, inf, 1},
        {fn::sigmoid, nan, nan},     {fn::sigmoid, 0, 0.5},
        {fn::sigmoid, -0.0, 0.5},    {fn::sigmoid, 800, 1},
        {fn::sigmoid, -800, 0},      {fn::sigmoid, big, 1},
        {fn::sigmoid, -big, 0},      {fn::sigmoid, tiny, 0.5},

        {fn::erf, inf, 1},           {fn::erf, -inf, -1},
        {fn::erf, nan, nan},         {fn::erf, 0, 0},
        {fn::erf, -0.0, -0.0},       {fn::erf, 10, 1},
        {fn::erf, -10, -1},          {fn::erf, big, 1},
        {fn::erf, -big, -1},
    };
    for (const special_case& c : cases) {
      const std::vector<T> got = run_fn(c.f, std::vector<T>{static_cast<T>(c.x)});
      EXPECT_TRUE(same(got[0], static_cast<T>(c.want)))
          << fn_name(c.f) << "(" << show(static_cast<T>(c.x)) << ") = " << show(got[0]) << ", want "
          << show(static_cast<T>(c.want));
    }
  }
}

TYPED_TEST(SimdMath, ExpEdgesMatchLibm) {
  // Every input near the overflow threshold and through the whole subnormal-result range: the
  // rounding there must agree with libm to the ulp bound and never flip to inf or 0 early.
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    std::vector<T> in;
    T x = std::log(lim<T>::max());
    for (int i = 0; i < 2000; ++i) x = std::nextafter(x, T(0));
    for (int i = 0; i < 4000; ++i, x = std::nextafter(x, lim<T>::infinity())) in.push_back(x);
    T y = std::log(lim<T>::denorm_min()) - 1;
    const T step = (std::log(lim<T>::min()) + 1 - y) / 20000;
    for (int i = 0; i < 20000; ++i) in.push_back(y + step * T(i));
    const std::vector<T> got = run_fn(fn::exp, in);
    int failures = 0;
    for (size_t i = 0; i < in.size() && failures < 10; ++i) {
      const double e = ulp_error<T>(got[i], reference(fn::exp, in[i]));
      if (!(e <= 1)) {
        ++failures;
        ADD_FAILURE() << "exp(" << show(in[i]) << ") = " << show(got[i]) << ": " << e << " ulp";
      }
    }
  }
}

TYPED_TEST(SimdMath, LogOfSubnormals) {
  // Every subnormal power of two and its neighbours, plus random subnormals: the exponent/mantissa
  // split must see the true exponent, not the biased-zero one.
  using T = TypeParam;
  SKIP_IF_SCALAR(T) {
    std::vector<T> in;
    for (T p = lim<T>::min(); p > 0; p /= 2) {
      in.push_back(p);
      in.push_back(std::nextafter(p, T(0)));
      in.push_back(std::nextafter(p, T(1)));
    }
    std::mt19937_64 rng(99);
    std::uniform_real_distribution<T> d(T(0), lim<T>::min());
    for (int i = 0; i < 10000; ++i) in.push_back(d(rng));
    for (fn f : {fn::log, fn::log1p}) {
      const std::vector<T> got = run_fn(f, in);
      int failures = 0;
      for (size_t i = 0; i < in.size() && failures < 10; ++i) {
        const double e = ulp_error<T>(got[i], reference(f, in[i]));
        if (!(e <= 1)) {
          ++failures;
          ADD_FAILURE() << fn_name(f) << "(" << show(in[i]) << ") = " << show(got[i]) << ": " << e
                        << " ulp";
        }
      }
    }
  }
}

}  // namespace
