// Tests for the low-precision storage types (half, bfloat16, float8_e4m3, float8_e5m2).
//
// Everything is checked against a reference written here from the format definitions alone:
// a decoder bits -> double and an encoder double -> bits that rounds by exact arithmetic in
// double. Neither shares code or tricks with the headers under test.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/core/bfloat16.hpp"
#include "tessera/core/float8.hpp"
#include "tessera/core/half.hpp"

namespace {

using tessera::bfloat16;
using tessera::float8_e4m3;
using tessera::float8_e5m2;
using tessera::half;

// ---------------------------------------------------------------------------------------------
// Compile-time properties of the interface.

template <class T>
constexpr bool StorageShape() {
  return std::is_trivial_v<T> && std::is_standard_layout_v<T> && sizeof(T) == sizeof(T{}.bits);
}
static_assert(StorageShape<half>() && sizeof(half) == 2);
static_assert(StorageShape<bfloat16>() && sizeof(bfloat16) == 2);
static_assert(StorageShape<float8_e4m3>() && sizeof(float8_e4m3) == 1);
static_assert(StorageShape<float8_e5m2>() && sizeof(float8_e5m2) == 1);

// Explicit construction from every arithmetic and storage type; implicit conversion only to float.
template <class T, class... U>
constexpr bool ConstructibleFrom() {
  return (std::is_constructible_v<T, U> && ...) &&
         ((std::is_same_v<T, U> || !std::is_convertible_v<U, T>)&&...);
}
template <class T>
constexpr bool Constructible() {
  return ConstructibleFrom<T, bool, char, signed char, unsigned char, short, unsigned short, int,
                           unsigned, long, unsigned long, long long, unsigned long long, float,
                           double, long double, half, bfloat16, float8_e4m3, float8_e5m2>() &&
         !std::is_constructible_v<T, int*> && !std::is_convertible_v<float, T> &&
         !std::is_convertible_v<int, T> && std::is_convertible_v<T, float>;
}
static_assert(Constructible<half>() && Constructible<bfloat16>() && Constructible<float8_e4m3>() &&
              Constructible<float8_e5m2>());
static_assert(!std::is_convertible_v<half, bfloat16> && !std::is_convertible_v<bfloat16, half>);

// Arithmetic happens in float (or wider), without ambiguity against integer operands.
template <class T>
constexpr bool Arithmetic() {
  return std::is_same_v<decltype(T{} + T{}), float> && std::is_same_v<decltype(T{} * 2), float> &&
         std::is_same_v<decltype(2 * T{}), float> && std::is_same_v<decltype(2.0 * T{}), double> &&
         std::is_same_v<decltype(T{} - 1u), float> && std::is_same_v<decltype(T{} / 3LL), float> &&
         std::is_same_v<decltype(T{} < T{}), bool> && std::is_same_v<decltype(T{} == 1), bool> &&
         std::is_same_v<decltype(-T{}), float>;
}
static_assert(Arithmetic<half>() && Arithmetic<bfloat16>() && Arithmetic<float8_e4m3>() &&
              Arithmetic<float8_e5m2>());
static_assert(std::is_same_v<decltype(half{} + bfloat16{}), float>);

// Conversions are constexpr.
static_assert(half(1.0f).bits == 0x3c00 && half(65520.0).bits == 0x7c00 && half(-2).bits == 0xc000);
static_assert(bfloat16(1.0f).bits == 0x3f80 && bfloat16(3.0).bits == 0x4040);
static_assert(float8_e4m3(448.0f).bits == 0x7e && float8_e4m3(1e10).bits == 0x7e);
static_assert(float8_e5m2(1.0f).bits == 0x3c && float8_e5m2(61440.0).bits == 0x7c);
static_assert(float(half::from_bits(0x3555)) == 0x1.554p-2f);
static_assert(float(float8_e4m3::from_bits(0x01)) == 0x1p-9f);
static_assert(std::numeric_limits<half>::max().bits == 0x7bff);

// ---------------------------------------------------------------------------------------------
// The reference.

struct Fmt {
  int ebits, mbits, bias;
  bool fn;  // OCP "FN": no Inf, NaN only at all-ones, saturating conversion
};

template <class T>
struct FmtOf;
template <>
struct FmtOf<half> {
  static constexpr Fmt f{5, 10, 15, false};
};
template <>
struct FmtOf<bfloat16> {
  static constexpr Fmt f{8, 7, 127, false};
};
template <>
struct FmtOf<float8_e4m3> {
  static constexpr Fmt f{4, 3, 7, true};
};
template <>
struct FmtOf<float8_e5m2> {
  static constexpr Fmt f{5, 2, 15, false};
};

uint32_t Ones(int n) { return (1u << n) - 1; }
uint32_t SignBit(Fmt f) { return 1u << (f.ebits + f.mbits); }
uint32_t MaxBits(Fmt f) {
  return f.fn ? (Ones(f.ebits) << f.mbits) | (Ones(f.mbits) - 1)
              : ((Ones(f.ebits) - 1) << f.mbits) | Ones(f.mbits);
}
uint32_t InfBits(Fmt f) { return Ones(f.ebits) << f.mbits; }
// What a too-large magnitude (or Inf) becomes: Inf, or the saturated max for FN formats.
uint32_t OverflowBits(Fmt f) { return f.fn ? MaxBits(f) : InfBits(f); }
uint32_t QuietBit(Fmt f) { return f.fn ? 0 : 1u << (f.mbits - 1); }

double RefDecode(Fmt f, uint32_t b) {
  const uint32_t m = b & Ones(f.mbits);
  const uint32_t e = (b >> f.mbits) & Ones(f.ebits);
  double v;
  if (e == Ones(f.ebits) && (f.fn ? m == Ones(f.mbits) : true)) {
    v = m != 0 || f.fn ? std::numeric_limits<double>::quiet_NaN()
                       : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(double(m), 1 - f.bias - f.mbits);
  } else {
    v = std::ldexp(double(m + (1u << f.mbits)), int(e) - f.bias - f.mbits);
  }
  return (b & SignBit(f)) ? -v : v;
}

// Round-to-nearest-even of x into f. For NaN input it returns some NaN of the same sign.
uint32_t RefEncode(Fmt f, double x) {
  const uint32_t sign = std::signbit(x) ? SignBit(f) : 0;
  if (std::isnan(x)) return sign | InfBits(f) | Ones(f.mbits);
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | OverflowBits(f);
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);                            // a = [0.5, 1) * 2^e
  const int E = std::max(e - 1, 1 - f.bias);    // exponent of the binade whose quantum applies
  const double y = std::ldexp(a, f.mbits - E);  // a in units of that quantum: exact
  double r = std::floor(y);
  const double frac = y - r;  // exact: y < 2^(mbits+1)
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) == 1.0)) r += 1;
  const double v = std::ldexp(r, E - f.mbits);
  if (v > RefDecode(f, MaxBits(f))) return sign | OverflowBits(f);
  const double lead = std::ldexp(1.0, f.mbits);
  uint32_t bits;
  if (r < lead) {  // subnormal (or zero); r == lead is the smallest normal, encoded the same way
    bits = uint32_t(r);
  } else if (r == 2 * lead) {  // rounded up into the next binade
    bits = uint32_t(E + 1 + f.bias) << f.mbits;
  } else {
    bits = (uint32_t(E + f.bias) << f.mbits) | uint32_t(r - lead);
  }
  return sign | bits;
}

using i128 = __int128;
using u128 = unsigned __int128;

// Reference for integer sources, exact for every 64-bit value: small ones are exact doubles, and
// above 2^53 the neighbours are found by exact integer comparison.
uint32_t RefFromInt(Fmt f, i128 v) {
  const i128 lim = i128(1) << 53;
  if (v >= -lim && v <= lim) return RefEncode(f, double(v));
  const uint32_t sign = v < 0 ? SignBit(f) : 0;
  const u128 a = v < 0 ? u128(-v) : u128(v);
  const uint32_t maxb = MaxBits(f);
  // Formats whose max is below 2^53 overflow far below it; the others are integers up there.
  if (RefDecode(f, maxb) < 0x1p53) return sign | OverflowBits(f);
  auto le = [&](uint32_t b) {
    const double d = RefDecode(f, b);
    return d < 0x1p53 || u128(d) <= a;
  };
  uint32_t lo = 0, hi = maxb;  // invariant: le(lo), !le(hi) (max exceeds 2^64 here)
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    (le(mid) ? lo : hi) = mid;
  }
  const u128 below = a - u128(RefDecode(f, lo)), above = u128(RefDecode(f, hi)) - a;
  const uint32_t pick = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | pick;
}

// ---------------------------------------------------------------------------------------------
// Checking helpers. Failures are counted and only the first few reported, so loops stay fast.

struct Failures {
  int count = 0;
  void Add(const std::string& msg) {
    if (++count <= 10) ADD_FAILURE() << msg;
  }
  ~Failures() { EXPECT_EQ(count, 0) << "conversion mismatches in total"; }
};

std::string Hex(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}
std::string HexBits(uint32_t b) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", b);
  return buf;
}

// A NaN expectation matches any NaN of the same sign; everything else must match bit for bit.
bool Matches(Fmt f, uint32_t got, uint32_t want) {
  if (std::isnan(RefDecode(f, want))) {
    return std::isnan(RefDecode(f, got)) && (got & SignBit(f)) == (want & SignBit(f));
  }
  return got == want;
}

template <class T, class U>
void Check(Failures& fails, U x, uint32_t want, const char* path) {
  constexpr Fmt f = FmtOf<T>::f;
  const uint32_t got = T(x).bits;
  if (!Matches(f, got, want)) {
    fails.Add(std::string(path) + " " + Hex(double(x)) + ": got " + HexBits(got) + " (" +
              Hex(RefDecode(f, got)) + "), want " + HexBits(want) + " (" + Hex(RefDecode(f, want)) +
              ")");
  }
}

// Checks the double constructor, and the float one where x is a float.
template <class T>
void CheckBoth(Failures& fails, double x, uint32_t want) {
  Check<T>(fails, x, want, "double");
  if (std::isnan(x) || double(float(x)) == x) Check<T>(fails, float(x), want, "float");
}

template <class T>
class Lowp : public ::testing::Test {};
using LowpTypes = ::testing::Types<half, bfloat16, float8_e4m3, float8_e5m2>;
class LowpNames {
 public:
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, half>) return "half";
    if (std::is_same_v<T, bfloat16>) return "bfloat16";
    if (std::is_same_v<T, float8_e4m3>) return "float8_e4m3";
    return "float8_e5m2";
  }
};
TYPED_TEST_SUITE(Lowp, LowpTypes, LowpNames);

// ---------------------------------------------------------------------------------------------
// 1. Every bit pattern decodes exactly, and every non-NaN value re-encodes to itself.

TYPED_TEST(Lowp, EveryPatternDecodesAndRoundTrips) {
  using T = TypeParam;
  constexpr Fmt f = FmtOf<T>::f;
  Failures fails;
  for (uint32_t b = 0; b < (1u << (f.ebits + f.mbits + 1)); ++b) {
    const float got = T::from_bits(static_cast<decltype(T{}.bits)>(b));
    const double want = RefDecode(f, b);
    if (std::isnan(want)) {
      if (!std::isnan(got) || std::signbit(got) != std::signbit(want)) {
        fails.Add("decode NaN pattern " + HexBits(b));
      }
      // NaNs come back quiet, with sign and payload (FN formats have only one NaN per sign).
      const uint32_t back = T(got).bits, back_d = T(double(got)).bits;
      if (back != (b | QuietBit(f)) || back_d != back) {
        fails.Add("NaN pattern " + HexBits(b) + " re-encodes to " + HexBits(back));
      }
      continue;
    }
    if (double(got) != want || std::signbit(got) != std::signbit(want)) {
      fails.Add("decode " + HexBits(b) + ": got " + Hex(got) + ", want " + Hex(want));
    }
    CheckBoth<T>(fails, want, b);
  }
}

// ---------------------------------------------------------------------------------------------
// 2. Around every midpoint between adjacent values: ties go to even, anything off the tie goes
// to the nearer value. Includes zero/denorm_min, the subnormal/normal boundary, and overflow.

TYPED_TEST(Lowp, MidpointsRoundToNearestEven) {
  using T = TypeParam;
  constexpr Fmt f = FmtOf<T>::f;
  const uint32_t maxb = MaxBits(f), sbit = SignBit(f);
  Failures fails;
  for (uint32_t i = 0; i < maxb; ++i) {
    const double lo = RefDecode(f, i), hi = RefDecode(f, i + 1);
    const double mid = (lo + hi) / 2, quarter = (hi - lo) / 4;  // exact in double
    ASSERT_EQ(double(float(mid)), mid);                         // so the float path sees ties too
    const uint32_t even = (i % 2 == 0) ? i : i + 1;
    for (const double s : {1.0, -1.0}) {
      const uint32_t sb = s < 0 ? sbit : 0;
      CheckBoth<T>(fails, s * mid, sb | even);
      CheckBoth<T>(fails, s * std::nextafter(mid, lo), sb | i);
      CheckBoth<T>(fails, s * std::nextafter(mid, hi), sb | (i + 1));
      CheckBoth<T>(fails, s * (lo + quarter), sb | i);
      CheckBoth<T>(fails, s * (hi - quarter), sb | (i + 1));
      Check<T>(fails, float(s * std::nextafterf(float(mid), float(lo))), sb | i, "float-");
      Check<T>(fails, float(s * std::nextafterf(float(mid), float(hi))), sb | (i + 1), "float+");
    }
  }
  // Past the largest finite value: with an unbounded exponent the next value would be max + ulp,
  // so per RNE everything from max + ulp/2 (a tie, and max is odd) overflows.
  const double top = RefDecode(f, maxb), ulp = top - RefDecode(f, maxb - 1);
  const double threshold = top + ulp / 2;
  for (const double s : {1.0, -1.0}) {
    const uint32_t sb = s < 0 ? sbit : 0;
    CheckBoth<T>(fails, s * std::nextafter(threshold, 0.0), sb | maxb);
    CheckBoth<T>(fails, s * threshold, sb | OverflowBits(f));
    CheckBoth<T>(fails, s * (top + ulp), sb | OverflowBits(f));
    CheckBoth<T>(fails, s * 4 * top, sb | OverflowBits(f));
    CheckBoth<T>(fails, s * DBL_MAX, sb | OverflowBits(f));
    CheckBoth<T>(fails, s * HUGE_VAL, sb | OverflowBits(f));
    // Far below half of denorm_min, including double and float subnormals: signed zero.
    CheckBoth<T>(fails, s * RefDecode(f, 1) / 4, sb);
    CheckBoth<T>(fails, s * 0x1p-149, sb);
    CheckBoth<T>(fails, s * 0x1p-1074, sb);
    CheckBoth<T>(fails, s * 0.0, sb);
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Random doubles and floats, concentrated on the format's range, with many exact ties.

template <class Float>
Float RandomSample(std::mt19937_64& rng, Fmt f) {
  using Bits = std::conditional_t<sizeof(Float) == 8, uint64_t, uint32_t>;
  constexpr int kMant = std::numeric_limits<Float>::digits - 1;
  const uint64_t r = rng();
  if (r % 4 == 0) return std::bit_cast<Float>(Bits(rng()));  // anything: NaN, Inf, extremes
  const int lo = 1 - f.bias - f.mbits - 3, hi = (1 << f.ebits) - f.bias + 2;
  const int exp = lo + int((r >> 2) % uint64_t(hi - lo + 1));
  uint64_t mant = rng() & ((uint64_t(1) << kMant) - 1);
  // Keep only a few leading bits half of the time, which produces exact representables and ties.
  if ((r >> 20) % 2 == 0) mant &= ~((uint64_t(1) << (kMant - f.mbits - 2)) - 1);
  const double sig = 1.0 + std::ldexp(double(mant), -kMant);
  const Float x = Float(std::ldexp(sig, exp));  // float: may round if exp is float-subnormal
  return (r >> 21) % 2 ? -x : x;
}

TYPED_TEST(Lowp, RandomDoublesAndFloatsMatchReference) {
  using T = TypeParam;
  constexpr Fmt f = FmtOf<T>::f;
  std::mt19937_64 rng(0x7e55e7a + f.ebits * 16 + f.mbits);
  Failures fails;
  for (int n = 0; n < 1'000'000; ++n) {
    const double x = RandomSample<double>(rng, f);
    Check<T>(fails, x, RefEncode(f, x), "double");
    const float y = RandomSample<float>(rng, f);
    Check<T>(fails, y, RefEncode(f, y), "float");
  }
}

// A strided sweep over all float bit patterns (both signs, every exponent).
TYPED_TEST(Lowp, FloatPatternSweepMatchesReference) {
  using T = TypeParam;
  constexpr Fmt f = FmtOf<T>::f;
  Failures fails;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 2039) {
    const float x = std::bit_cast<float>(uint32_t(b));
    Check<T>(fails, x, RefEncode(f, x), "float");
  }
}

// Sources wider than double round once too (when long double is wider).
TYPED_TEST(Lowp, LongDoubleRoundsOnce) {
  using T = TypeParam;
  constexpr Fmt f = FmtOf<T>::f;
  Failures fails;
  const long double one_ulp = std::ldexp(1.0L, -f.mbits);
  Check<T>(fails, 1.0L + one_ulp / 2, RefEncode(f, 1.0), "long double tie");
  Check<T>(fails, 3.0L, RefEncode(f, 3.0), "long double");
  Check<T>(fails, -std::numeric_limits<long double>::infinity(), RefEncode(f, -HUGE_VAL), "ld");
  Check<T>(fails, std::numeric_limits<long double>::quiet_NaN(), RefEncode(f, NAN), "ld");
  if constexpr (std::numeric_limits<long double>::digits >= 64) {
    // Just above a tie by less than a double ulp: rounding to double first would make it a tie.
    const long double above = 1.0L + one_ulp / 2 + std::ldexp(1.0L, -60);
    Check<T>(fails, above, RefEncode(f, 1.0 + double(one_ulp)), "long double above tie");
    Check<T>(fails, -above, RefEncode(f, -1.0 - double(one_ulp)), "long double above tie");
    const long double below = 1.0L + one_ulp / 2 - std::ldexp(1.0L, -61);
    Check<T>(fails, below, RefEncode(f, 1.0), "long double below tie");
    Check<T>(fails, std::ldexp(1.0L, -16400), uint32_t(0), "long double tiny");
    Check<T>(fails, std::ldexp(1.0L, 16000), OverflowBits(f), "long double huge");
  }
}

// ---------------------------------------------------------------------------------------------
// 4. Integer and bool constructors.

template <class T, class I>
void CheckInt(Failures& fails, I v) {
  constexpr Fmt f = FmtOf<T>::f;
  const uint32_t want = RefFromInt(f, i128(v));
  const uint32_t got = T(v).bits;
  if (got != want) {
    fails.Add("integer " + std::to_string(v) + " (" + std::to_string(sizeof(I)) + " bytes): got " +
              HexBits(got) + ", want " + HexBits(want));
  }
}

TYPED_TEST(Lowp, IntegerConstructors) {
  using T = TypeParam;
  constexpr Fmt f = FmtOf<T>::f;
  Failures fails;
  EXPECT_EQ(T(true).bits, RefEncode(f, 1.0));
  EXPECT_EQ(T(false).bits, 0u);
  for (int v = -32768; v <= 65535; ++v) {
    if (v >= -128 && v <= 127) CheckInt<T>(fails, static_cast<int8_t>(v));
    if (v >= 0 && v <= 255) CheckInt<T>(fails, static_cast<uint8_t>(v));
    if (v <= 32767) CheckInt<T>(fails, static_cast<int16_t>(v));
    if (v >= 0) CheckInt<T>(fails, static_cast<uint16_t>(v));
    CheckInt<T>(fails, static_cast<int32_t>(v));
  }
  const int64_t p53 = int64_t(1) << 53, p62 = int64_t(1) << 62, q = p62 >> 8;  // bf16: ulp 2q
  std::vector<int64_t> specials = {0,     1,     -1,    448,   464,   465,   480,     57344,
                                   61439, 61440, 65504, 65519, 65520, 65536, 16777217};
  for (const int64_t base :
       {p53, -p53, p62, p62 + q, p62 + 3 * q, -p62 - q, INT64_MAX - 3, INT64_MIN + 3}) {
    for (const int64_t d : {-3, -1, 0, 1, 3}) specials.push_back(base + d);
  }
  for (const int64_t v : specials) {
    CheckInt<T>(fails, v);
    CheckInt<T>(fails, static_cast<uint64_t>(v));
    if (v >= INT32_MIN && v <= INT32_MAX) CheckInt<T>(fails, static_cast<int32_t>(v));
  }
  for (const int32_t v : {INT32_MAX, INT32_MIN, INT32_MIN + 1, (1 << 24) + 1, -(1 << 24) - 1}) {
    CheckInt<T>(fails, v);
    CheckInt<T>(fails, static_cast<uint32_t>(v));
  }
  CheckInt<T>(fails, UINT64_MAX);
  std::mt19937_64 rng(99);
  for (int n = 0; n < 200'000; ++n) {
    const uint64_t r = rng() >> (rng() % 64);
    CheckInt<T>(fails, r);
    CheckInt<T>(fails, static_cast<int64_t>(r));
    CheckInt<T>(fails, static_cast<int32_t>(r));
    CheckInt<T>(fails, static_cast<uint32_t>(r));
  }
}

// ---------------------------------------------------------------------------------------------
// 5. numeric_limits agrees with the reference decoder.

TYPED_TEST(Lowp, NumericLimits) {
  using T = TypeParam;
  using L = std::numeric_limits<T>;
  constexpr Fmt f = FmtOf<T>::f;
  auto val = [](T v) { return double(float(v)); };
  static_assert(L::is_specialized && L::is_signed && !L::is_integer && !L::is_exact);
  static_assert(L::is_bounded && !L::is_modulo && !L::traps && !L::tinyness_before);
  static_assert(L::radix == 2 && L::round_style == std::round_to_nearest);
  static_assert(L::has_denorm == std::denorm_present && !L::has_denorm_loss);
  static_assert(L::has_quiet_NaN && L::has_infinity == !f.fn && L::has_signaling_NaN == !f.fn);
  static_assert(L::is_iec559 == std::is_same_v<T, half>);
  static_assert(std::numeric_limits<const T>::max().bits == L::max().bits);
  EXPECT_EQ(L::digits, f.mbits + 1);
  EXPECT_EQ(L::digits10, int(std::floor((L::digits - 1) * std::log10(2.0))));
  EXPECT_EQ(L::max_digits10, int(std::ceil(1 + L::digits * std::log10(2.0))));

  const double max = RefDecode(f, MaxBits(f));
  EXPECT_EQ(val(L::max()), max);
  EXPECT_EQ(val(L::lowest()), -max);
  EXPECT_EQ(L::max().bits, MaxBits(f));
  EXPECT_EQ(val(L::min()), std::ldexp(1.0, 1 - f.bias));
  EXPECT_EQ(RefDecode(f, L::min().bits - 1u), std::ldexp(1.0, 1 - f.bias) - RefDecode(f, 1));
  EXPECT_EQ(val(L::denorm_min()), std::ldexp(1.0, 1 - f.bias - f.mbits));
  EXPECT_EQ(val(L::denorm_min()), RefDecode(f, 1));
  EXPECT_EQ(val(L::epsilon()), RefDecode(f, RefEncode(f, 1.0) + 1) - 1.0);
  EXPECT_EQ(val(L::round_error()), 0.5);
  EXPECT_TRUE(std::isnan(val(L::quiet_NaN())));
  EXPECT_FALSE(std::signbit(val(L::quiet_NaN())));
  EXPECT_EQ(L::quiet_NaN().bits, T(std::numeric_limits<float>::quiet_NaN()).bits);
  if constexpr (L::has_infinity) {
    EXPECT_EQ(val(L::infinity()), HUGE_VAL);
    EXPECT_TRUE(std::isnan(RefDecode(f, L::signaling_NaN().bits)));
    EXPECT_EQ(L::signaling_NaN().bits & QuietBit(f), 0u);
  }
  EXPECT_EQ(std::ldexp(1.0, L::min_exponent - 1), val(L::min()));
  EXPECT_GE(max, std::ldexp(1.0, L::max_exponent - 1));
  EXPECT_LT(max, std::ldexp(1.0, L::max_exponent));
  EXPECT_EQ(L::min_exponent10, int(std::ceil(std::log10(val(L::min())))));
  EXPECT_EQ(L::max_exponent10, int(std::floor(std::log10(max))));
}

// ---------------------------------------------------------------------------------------------
// 6. Values named by the specifications, NaN payloads, and conversions between the types.

float FloatFromBits(uint32_t b) { return std::bit_cast<float>(b); }
double DoubleFromBits(uint64_t b) { return std::bit_cast<double>(b); }

TEST(LowpSpec, Half) {
  EXPECT_EQ(float(half::from_bits(0x7bff)), 65504.0f);
  EXPECT_EQ(half(65504.0).bits, 0x7bff);
  EXPECT_EQ(half(65519.99).bits, 0x7bff);
  EXPECT_EQ(half(65519.99f).bits, 0x7bff);
  EXPECT_EQ(half(65520.0).bits, 0x7c00);
  EXPECT_EQ(half(65520.0f).bits, 0x7c00);
  EXPECT_EQ(half(-65520.0f).bits, 0xfc00);
  EXPECT_EQ(half(0x1p-24).bits, 0x0001);
  EXPECT_EQ(half(0x1p-25).bits, 0x0000);
  EXPECT_EQ(half(0x1.000002p-25f).bits, 0x0001);
  EXPECT_EQ(half(0x1.ffcp-15f).bits, 0x0400);  // largest subnormal + half ulp -> smallest normal
  EXPECT_EQ(half(1.0f + 0x1p-11f).bits, 0x3c00);
  EXPECT_EQ(half(1.0 + 0x1p-11 + 0x1p-40).bits, 0x3c01);  // no double rounding through float
  EXPECT_EQ(half(FloatFromBits(0x7fc00000)).bits, 0x7e00);
  EXPECT_EQ(half(FloatFromBits(0xffc00000)).bits, 0xfe00);
  EXPECT_EQ(half(FloatFromBits(0x7f800001)).bits, 0x7e00);  // signalling -> quiet
  EXPECT_EQ(half(FloatFromBits(0x7fa02000)).bits, 0x7f01);  // leading payload kept
  EXPECT_EQ(half(DoubleFromBits(0x7ff4040000000000)).bits, 0x7f01);
  EXPECT_EQ(half(HUGE_VALF).bits, 0x7c00);
  EXPECT_EQ(half(-0.0f).bits, 0x8000);
}

TEST(LowpSpec, Bfloat16) {
  EXPECT_EQ(bfloat16(1.0f + 0x1p-8f).bits, 0x3f80);
  EXPECT_EQ(bfloat16(1.0 + 0x1p-8).bits, 0x3f80);
  EXPECT_EQ(bfloat16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);
  EXPECT_EQ(bfloat16(1.0 + 0x1p-8 + 0x1p-40).bits, 0x3f81);  // no double rounding through float
  EXPECT_EQ(bfloat16(FLT_MAX).bits, 0x7f80);                 // rounds up past max: Inf
  EXPECT_EQ(bfloat16(0x1.fep127f).bits, 0x7f7f);
  EXPECT_EQ(bfloat16(0x1.ff8p127).bits, 0x7f80);
  EXPECT_EQ(bfloat16(0x1p-133).bits, 0x0001);
  EXPECT_EQ(bfloat16(0x1p-134).bits, 0x0000);
  EXPECT_EQ(bfloat16(0x1p-134f).bits, 0x0000);
  EXPECT_EQ(bfloat16(0x1.8p-134f).bits, 0x0001);
  EXPECT_EQ(bfloat16(FloatFromBits(0x7f800001)).bits, 0x7fc0);
  EXPECT_EQ(bfloat16(FloatFromBits(0xffc12345)).bits, 0xffc1);
  EXPECT_EQ(bfloat16(FloatFromBits(0x7fffffff)).bits, 0x7fff);  // must not round into Inf
  EXPECT_EQ(bfloat16(DoubleFromBits(0xfff8000000000000)).bits, 0xffc0);
  EXPECT_EQ(float(bfloat16::from_bits(0x7f7f)), 0x1.fep127f);
}

TEST(LowpSpec, Float8E4M3) {
  EXPECT_EQ(float(float8_e4m3::from_bits(0x7e)), 448.0f);
  EXPECT_EQ(float(float8_e4m3::from_bits(0x78)), 256.0f);  // top exponent is still finite
  EXPECT_TRUE(std::isnan(float(float8_e4m3::from_bits(0x7f))));
  EXPECT_TRUE(std::isnan(float(float8_e4m3::from_bits(0xff))));
  EXPECT_EQ(float8_e4m3(448.0f).bits, 0x7e);
  EXPECT_EQ(float8_e4m3(464.0f).bits, 0x7e);
  EXPECT_EQ(float8_e4m3(465.0).bits, 0x7e);
  EXPECT_EQ(float8_e4m3(1e6f).bits, 0x7e);
  EXPECT_EQ(float8_e4m3(HUGE_VALF).bits, 0x7e);
  EXPECT_EQ(float8_e4m3(-HUGE_VAL).bits, 0xfe);
  EXPECT_EQ(float8_e4m3(-500).bits, 0xfe);
  EXPECT_EQ(float8_e4m3(std::numeric_limits<float>::quiet_NaN()).bits, 0x7f);
  EXPECT_EQ(float8_e4m3(-std::numeric_limits<double>::quiet_NaN()).bits, 0xff);
  EXPECT_EQ(float8_e4m3(0x1p-9f).bits, 0x01);
  EXPECT_EQ(float8_e4m3(0x1p-10f).bits, 0x00);
  EXPECT_EQ(float8_e4m3(0x1.8p-10f).bits, 0x01);
  EXPECT_EQ(float8_e4m3(0x1.ep-7f).bits, 0x08);  // largest subnormal + half ulp -> 2^-6
}

TEST(LowpSpec, Float8E5M2) {
  EXPECT_EQ(float(float8_e5m2::from_bits(0x7b)), 57344.0f);
  EXPECT_EQ(float8_e5m2(57344.0f).bits, 0x7b);
  EXPECT_EQ(float8_e5m2(61439.99).bits, 0x7b);
  EXPECT_EQ(float8_e5m2(61440.0f).bits, 0x7c);
  EXPECT_EQ(float8_e5m2(-61440.0).bits, 0xfc);
  EXPECT_EQ(float8_e5m2(HUGE_VALF).bits, 0x7c);
  EXPECT_EQ(float8_e5m2(std::numeric_limits<float>::quiet_NaN()).bits, 0x7e);
  EXPECT_EQ(float8_e5m2(-std::numeric_limits<double>::quiet_NaN()).bits, 0xfe);
  EXPECT_EQ(float8_e5m2(0x1p-16).bits, 0x01);
  EXPECT_EQ(float8_e5m2(0x1p-17).bits, 0x00);
  EXPECT_TRUE(std::isinf(float(float8_e5m2::from_bits(0xfc))));
}

TEST(LowpSpec, ConversionsBetweenTypes) {
  EXPECT_EQ(static_cast<bfloat16>(half(1.5f)).bits, 0x3fc0);
  EXPECT_EQ(static_cast<bfloat16>(half::from_bits(0x3c01)).bits, 0x3f80);  // 1+2^-10 rounds to 1
  EXPECT_EQ(static_cast<half>(bfloat16(0x1p-20f)).bits, 0x0010);
  EXPECT_EQ(static_cast<float8_e4m3>(half(500.0f)).bits, 0x7e);
  EXPECT_EQ(static_cast<float8_e4m3>(half(HUGE_VALF)).bits, 0x7e);
  EXPECT_EQ(static_cast<float8_e5m2>(half(65504.0f)).bits, 0x7c);
  EXPECT_EQ(static_cast<half>(float8_e5m2(HUGE_VALF)).bits, 0x7c00);
  EXPECT_EQ(static_cast<half>(float8_e4m3::from_bits(0xff)).bits, 0xfe00);
  EXPECT_EQ(static_cast<float8_e5m2>(float8_e4m3(448.0f)).bits, 0x5f);
  EXPECT_EQ(static_cast<bfloat16>(float8_e5m2::from_bits(0x01)).bits, 0x3780);  // 2^-16
  // Every half converts to bfloat16 and float8 like its float value does.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const half h = half::from_bits(uint16_t(b));
    ASSERT_EQ(static_cast<bfloat16>(h).bits, bfloat16(float(h)).bits);
    ASSERT_EQ(static_cast<float8_e4m3>(h).bits, float8_e4m3(float(h)).bits);
    ASSERT_EQ(static_cast<float8_e5m2>(h).bits, float8_e5m2(float(h)).bits);
  }
}

TEST(LowpSpec, ArithmeticGoesThroughFloat) {
  const half a(1.5f), b(2);
  EXPECT_EQ(a + b, 3.5f);
  EXPECT_EQ(a * 2, 3.0f);
  EXPECT_EQ(2.0 * a, 3.0);
  EXPECT_TRUE(a < b);
  EXPECT_EQ(static_cast<int>(bfloat16(7.0f)), 7);
}

}  // namespace
