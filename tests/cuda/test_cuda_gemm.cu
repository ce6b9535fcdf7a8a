// Tests of the CUDA matrix product (gemm_kernel<cuda>: matmul, gemm, linear) and the CUDA
// optimizer updates (optim_kernel<cuda>: sgd_step, adam_step), each against the CPU backend on
// the same inputs. Products use small integers, so every floating dtype's result is exact and
// must match the CPU's bit for bit whatever the summation order; int8 uses the extremes;
// random-normal products (16-bit, tf32) are checked against their rounding. Every
// test skips, with a message, when no CUDA device is visible.
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <tessera/ops/packed_linear.hpp>
#include <tessera/ops/quant.hpp>
#include <vector>

#include "cuda_test_util.cuh"

namespace {
using namespace cuda_test;

template <class T>
HostT<T> small_ints(const ts::Shape& s, uint64_t seed, int64_t lo = -3, int64_t hi = 3) {
  ts::Generator g(seed);
  return ts::randint<T, ts::cpu>(lo, hi + 1, s, g);
}

template <class T>
class CudaGemm : public CudaFixture {};
using GemmDtypes = ::testing::Types<float, double, ts::half, ts::bfloat16, ts::float8_e4m3>;
TYPED_TEST_SUITE(CudaGemm, GemmDtypes);

struct mnk {
  int64_t m, n, k;
};

// Split k on the kernel each dtype takes by default (float and double: SIMT; half, bfloat16:
// the pipelined kernels; fp8: wgmma, mma.sync or fp16 WMMA): k = 300 (two granules of 128 and
// 44) in 3 parts, a batched product with broadcast, and gemm's alpha and beta applied after the
// parts are added.
TYPED_TEST(CudaGemm, SplitKMatchesCpu) {
  using T = TypeParam;
  namespace d = ts::detail;
  const split_k_scope split(3);
  const int64_t before = d::cuda_gemm_split_products().load();
  const auto a = small_ints<T>({40, 300}, 451), b = small_ints<T>({300, 24}, 452);
  expect_same(
      "matmul 40x24x300 in 3 parts", 0, 0,
      [](const auto& x, const auto& y) { return ts::matmul(x, y); }, a, b);
  const auto a3 = small_ints<T>({2, 1, 16, 300}, 453), b3 = small_ints<T>({3, 300, 8}, 454);
  expect_same(
      "batched broadcast in 3 parts", 0, 0,
      [](const auto& x, const auto& y) { return ts::matmul(x, y); }, a3, b3);
  constexpr bool fp8 = std::is_same_v<T, ts::float8_e4m3>;
  if constexpr (!fp8) {  // gemm writes into T: fp8 products give float
    const auto c = small_ints<T>({40, 24}, 455);
    expect_same(
        "gemm alpha 0.5 beta -2 in 3 parts", 0, 0,
        [](const auto& x, const auto& y, const auto& z) {
          auto out = z.clone();
          ts::gemm(0.5, x, y, -2.0, out);
          return out;
        },
        a, b, c);
  }
  EXPECT_EQ(d::cuda_gemm_split_products().load() - before, fp8 ? 2 : 3) << "products split";
}

// Tile tails on every side, a single element, exact tiles, k shorter and longer than a k-step.
const mnk shapes[] = {{1, 1, 1},      {7, 5, 3},     {128, 128, 8}, {129, 130, 17},
                      {300, 257, 65}, {64, 3136, 9}, {33, 1, 200},  {1, 70, 129}};

// matmul on the device against the CPU for every shape above, with operands row-major,
// transposed (column-major views) and strided, from inputs in [lo, hi].
template <class T>
void expect_every_layout_matches_cpu(int64_t lo, int64_t hi, const std::string& tag = "") {
  uint64_t seed = 1;
  for (const auto& s : shapes) {
    const auto a = small_ints<T>({s.m, s.k}, seed++, lo, hi),
               b = small_ints<T>({s.k, s.n}, seed++, lo, hi);
    const std::string what = tag + "matmul " + std::to_string(s.m) + "x" + std::to_string(s.n) +
                             "x" + std::to_string(s.k);
    const auto mm = [](const auto& x, const auto& y) { return ts::matmul(x, y); };
    expect_same(what, 0, 0, mm, a, b);
    // Transposed operands are strided views (column-major reads).
    const auto at = small_ints<T>({s.k, s.m}, seed++, lo, hi),
               bt = small_ints<T>({s.n, s.k}, seed++, lo, hi);
    expect_same(
        what + " a^T", 0, 0,
        [](const auto& x, const auto& y) { return ts::matmul(x.transpose(0, 1), y); }, at, b);
    expect_same(
        what + " b^T", 0, 0,
        [](const auto& x, const auto& y) { return ts::matmul(x, y.transpose(0, 1)); }, a, bt);
    // Every other column of a wider matrix: neither stride is 1.
    const auto wide = small_ints<T>({s.m, 2 * s.k}, seed++, lo, hi);
    expect_same(
        what + " strided a", 0, 0,
        [](const auto& x, const auto& y) { return ts::matmul(x.slice(1, 0, x.shape()[1], 2), y); },
        wide, b);
  }
}

TYPED_TEST(CudaGemm, MatmulMatchesCpuOnEveryLayout) {
  expect_every_layout_matches_cpu<TypeParam>(-3, 3);
}

TYPED_TEST(CudaGemm, BatchedWithBroadcastBatchDims) {
  using T = TypeParam;
  const auto a = small_ints<T>({3, 1, 20, 30}, 11), b = small_ints<T>({4, 30, 25}, 12);
  expect_same(
      "batched broadcast", 0, 0, [](const auto& x, const auto& y) { return ts::matmul(x, y); }, a,
      b);
  const auto v = small_ints<T>({30}, 13);
  expect_same(
      "matrix-vector", 0, 0, [](const auto& x, const auto& y) { return ts::matmul(x, y); }, a, v);
}

TYPED_TEST(CudaGemm, LinearWithBias) {
  using T = TypeParam;
  const auto x = small_ints<T>({2, 37, 50}, 21), w = small_ints<T>({19, 50}, 22);
  const auto bias = small_ints<T>({19}, 23);
  expect_same(
      "linear", 0, 0,
      [](const auto& a, const auto& b, const auto& c) { return ts::linear(a, b, c); }, x, w, bias);
}

// A weight packed for linear: the CUDA backend keeps the plain [in, out] layout (no panels), the
// CPU lays it out in panels; both give linear(x, w, bias) exactly on small integers.
class CudaPackedLinear : public CudaFixture {};
TEST_F(CudaPackedLinear, MatchesCpu) {
  const auto packed = [](const auto& a, const auto& b, const auto& c) {
    const auto p = ts::pack_linear(b);
    if (ts::unpack_linear(p).to_vector() != b.contiguous().to_vector())
      ADD_FAILURE() << "unpack_linear does not give the weight back";
    return ts::linear(a, p, c);
  };
  expect_same("packed linear float", 0, 0, packed, small_ints<float>({2, 37, 50}, 31),
              small_ints<float>({19, 50}, 32), small_ints<float>({19}, 33));
  expect_same("packed linear double", 0, 0, packed, small_ints<double>({70, 40}, 34),
              small_ints<double>({45, 40}, 35), small_ints<double>({45}, 36));
}

// int8 dynamic quantization on CUDA tensors, plain and packed (the CUDA backend keeps the
// values as the [in, out] transpose), with outlier features: the int8 sums are exact, the
// scaling back and the outliers' float product round as the CPU's within a few ulps.
TEST_F(CudaPackedLinear, Int8LinearMatchesCpu) {
  ts::Generator g(37);
  auto x = ts::rand<float>({2, 9, 45}, g, -1, 1);
  x.slice(2, 4, 5).copy_(x.slice(2, 4, 5) * 25.0f);  // an outlier feature
  const auto w = ts::rand<float>({37, 45}, g, -1, 1), b = ts::rand<float>({37}, g, -1, 1);
  for (const bool packed : {false, true}) {
    const auto run = [packed](const auto& xs, const auto& ws, const auto& bs) {
      auto q = ts::quantize_linear_int8(ws, bs, 6.0f);
      return ts::int8_linear(xs, packed ? ts::pack_linear(q) : q);
    };
    expect_same(packed ? "int8_linear packed" : "int8_linear", 1e-5, 1e-5, run, x, w, b);
  }
}

// Random normals (not small integers): the tensor-core path (16-bit inputs, float accumulation
// in a hardware-fixed order) must agree with the CPU's float accumulation to within the
// rounding of the stored result plus float-sum noise, at a depth where a wrong k-tile or a lost
// tail would be far outside that.
template <class T>
class CudaGemm16 : public CudaFixture {};
using Gemm16Dtypes = ::testing::Types<ts::half, ts::bfloat16>;
TYPED_TEST_SUITE(CudaGemm16, Gemm16Dtypes);

TYPED_TEST(CudaGemm16, RandomInputsAgreeWithinRounding) {
  using T = TypeParam;
  // k = 704 rows are 16-byte multiples (the cp.async pipeline), k = 700 not (register kernel).
  for (const int64_t k : {700, 704}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const auto a = sample<T>({257, k}, 61), b = sample<T>({k, 130}, 62);
    const double atol = 1e-5 * k;  // float sums of k products of size ~1
    expect_same(
        "random matmul", ulps2<T>(), atol,
        [](const auto& x, const auto& y) { return ts::matmul(x, y); }, a, b);
    expect_same(
        "random matmul a^T b^T", ulps2<T>(), atol,
        [](const auto& x, const auto& y) {
          return ts::matmul(x.transpose(0, 1).contiguous().transpose(0, 1),
                            y.transpose(0, 1).contiguous().transpose(0, 1));
        },
        a, b);
    const auto c0 = sample<T>({257, 130}, 63);
    auto host = c0.clone();
    ts::gemm(0.5, a, b, -2.0, host);
    auto dev = c0.template to<ts::cuda>();
    ts::gemm(0.5, a.template to<ts::cuda>(), b.template to<ts::cuda>(), -2.0, dev);
    expect_close(dev.template to<ts::cpu>(), host, ulps2<T>(), atol, "random gemm alpha beta");
    // The kernels store T themselves (detail::gemm_stores_v): beta = 0 must not read c.
    auto nan = ts::full<T, ts::cuda>({257, 130}, T(std::numeric_limits<float>::quiet_NaN()));
    ts::gemm(1.0, a.template to<ts::cuda>(), b.template to<ts::cuda>(), 0.0, nan);
    for (const T v : nan.template to<ts::cpu>().to_vector())
      ASSERT_FALSE(std::isnan(static_cast<float>(v))) << "beta = 0 read c";
  }
}

// 8-bit integers over their whole range (int8 x int8 and uint8 x uint8 run on the tensor cores
// where built for sm_80+; products are exact in int32, so results must match bit for bit).
template <class T>
class CudaGemmInt8 : public CudaFixture {};
using GemmInt8Dtypes = ::testing::Types<int8_t, uint8_t>;
TYPED_TEST_SUITE(CudaGemmInt8, GemmInt8Dtypes);

TYPED_TEST(CudaGemmInt8, MatmulMatchesCpuOnEveryLayout) {
  using T = TypeParam;
  expect_every_layout_matches_cpu<T>(std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
}

// float x float under set_float32_matmul_precision(high): tf32 tensor cores where the code was
// built for sm_80+ (the library's own test, cuda_built_for, decides which result to expect).
class CudaGemmTf32 : public CudaFixture {
 protected:
  void SetUp() override {
    CudaFixture::SetUp();
    saved_ = ts::get_float32_matmul_precision();
    ts::set_float32_matmul_precision(ts::matmul_precision::high);
  }
  void TearDown() override { ts::set_float32_matmul_precision(saved_); }
  static bool tensor_cores() {
    namespace d = ts::detail;
    return d::cuda_built_for(d::cuda_gemm_tc<d::cuda_tc_tf32, float, float>, 80);
  }

 private:
  ts::matmul_precision saved_ = ts::matmul_precision::highest;
};

/// x rounded to tf32 as cvt.rna does (nearest, ties away from zero), on the host.
float round_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST_F(CudaGemmTf32, SmallIntegersAreExactOnEveryLayout) {
  expect_every_layout_matches_cpu<float>(-3, 3, "tf32 ");
}

TEST_F(CudaGemmTf32, InputsRoundToNearestTf32TiesAwayAndOnlyWhenAsked) {
  // 1 + 2^-11 lies halfway between the tf32 values 1 and 1 + 2^-10: round-to-nearest-away gives
  // 1 + 2^-10, truncation 1, float precision 1 + 2^-11.
  const float x = 1.0f + std::ldexp(1.0f, -11);
  const auto a = ts::full<float, ts::cpu>({1, 1}, x), b = ts::ones<float, ts::cpu>({1, 1});
  const float tf32 = 1.0f + std::ldexp(1.0f, -10);
  EXPECT_EQ(ts::matmul(a.to<ts::cuda>(), b.to<ts::cuda>()).item(), tensor_cores() ? tf32 : x);
  EXPECT_EQ(ts::matmul(a, b).item(), x) << "the CPU backend computes in float whatever the setting";
  ts::set_float32_matmul_precision(ts::matmul_precision::highest);
  EXPECT_EQ(ts::matmul(a.to<ts::cuda>(), b.to<ts::cuda>()).item(), x) << "highest must be float";
}

TEST_F(CudaGemmTf32, RandomInputsAgreeWithTf32RoundedInputs) {
  // k = 704: rows of 16-byte multiples (the cp.async pipeline); k = 700: the register kernel.
  for (const int64_t k : {700, 704}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const auto a = sample<float>({257, k}, 71), b = sample<float>({k, 130}, 72);
    const auto c0 = sample<float>({257, 130}, 73);
    // Reference: the CPU product (float) of the inputs rounded to tf32, so only float summation
    // noise separates it from the device's result.
    const auto rounded = [](const HostT<float>& t) {
      return tensor_cores() ? ts::map([](float v) { return round_tf32(v); }, t) : t;
    };
    const auto ra = rounded(a), rb = rounded(b);
    const double atol = 1e-5 * k;
    auto want = c0.clone();
    ts::gemm(0.5, ra, rb, -2.0, want);
    auto got = c0.to<ts::cuda>();
    ts::gemm(0.5, a.to<ts::cuda>(), b.to<ts::cuda>(), -2.0, got);
    expect_close(got.to<ts::cpu>(), want, 1e-6, atol, "tf32 gemm alpha beta");
    // And the transposed (column-major) reads of both operands.
    const auto at = a.transpose(0, 1).contiguous(), bt = b.transpose(0, 1).contiguous();
    const auto got_t =
        ts::matmul(at.to<ts::cuda>().transpose(0, 1), bt.to<ts::cuda>().transpose(0, 1));
    const auto want_t = ts::matmul(ra, rb);
    expect_close(got_t.to<ts::cpu>(), want_t, 1e-6, atol, "tf32 matmul a^T b^T");
  }
}

// The pipelined kernels: for half, bfloat16 and (tf32) float operands that are row- or
// column-major with 16-byte aligned rows, the wgmma kernel (gemm_wgmma.cuh: 16-bit inputs, where
// built for sm_90a; the host emulation models it), the mma.sync kernel (gemm_mma.cuh, swizzled
// tiles read by ldmatrix, or by 32-bit loads for tf32 operands with m or n contiguous) and the
// WMMA pipeline (gemm_tc_async.cuh). Small
// integers, so every kernel's result must equal the CPU's bit for bit, the register-staged
// kernel's too (pipelines switched off). Every case also checks which kernel ran.
template <class T>
class CudaGemmPipeline : public CudaGemmTf32 {  // float: tf32 tensor cores
 protected:
  void TearDown() override {
    CudaGemmTf32::TearDown();
    ts::detail::cuda_gemm_start_at(ts::detail::cuda_gemm_pipeline::wgmma);
  }
  /// Whether this build runs T x T on the tensor cores (else none of the kernels below runs).
  static bool tensor_cores() {
    namespace d = ts::detail;
    using Cfg = typename d::cuda_tc_select<T, T, float>::type;
    return d::cuda_built_for(d::cuda_gemm_tc<Cfg, T, T>, 80);
  }
  /// Set while a case's batch offsets are not multiples of the batch index (device offset
  /// arrays): TMA's tensor maps cannot express them, so wgmma keeps its cp.async feed (tf32
  /// excepted: its operands are copied first).
  bool batch_offsets = false;
  /// Which pipelines the operands of a product qualify for: none; all, some operand m- or
  /// n-contiguous; all, k contiguous in both (A row-major, B column-major). (tf32 on wgmma
  /// copies both operands either way: the copies round them.)
  enum class fits { none, pipelines, k_major };
  /// op (one product on device tensors) against the CPU on each kernel that can take T x T.
  template <class Op, class... X>
  void expect_every_kernel(const std::string& what, fits f, Op op, const X&... xs) {
    namespace d = ts::detail;
    // wgmma: only where built for sm_90a (elsewhere that pass runs the mma.sync kernel); tf32
    // operands are packed k-contiguous and rounded to tf32 for it first, whatever their layout.
    constexpr bool tf32 = std::is_same_v<T, float>;
    const bool wgmma_takes = tensor_cores() && d::cuda_wgmma_built();
    using kernel = d::cuda_gemm_pipeline;  // none: the register-staged kernel
    const auto launches = [](kernel k) { return d::cuda_gemm_choice(k).launches.load(); };
    // wgmma twice: fed by TMA where the product allows it, and by cp.async.
    const std::pair<kernel, bool> passes[] = {{kernel::wgmma, true},
                                              {kernel::wgmma, false},
                                              {kernel::mma_sync, false},
                                              {kernel::wmma, false},
                                              {kernel::none, false}};
    for (const auto& [k, tma] : passes) {
      d::cuda_gemm_start_at(k);
      const tma_scope feed(tma);
      const int64_t wgmma_before = launches(kernel::wgmma);
      const int64_t tma_before = d::cuda_wgmma_tma_choice().launches.load();
      const int64_t mma_before = launches(kernel::mma_sync);
      const int64_t wmma_before = launches(kernel::wmma);
      const int64_t packs = d::cuda_gemm_packed_operands().load();
      const char* name = k == kernel::wgmma      ? (tma ? " (wgmma, TMA)" : " (wgmma, cp.async)")
                         : k == kernel::mma_sync ? " (mma.sync)"
                         : k == kernel::wmma     ? " (WMMA pipeline)"
                                                 : " (register-staged)";
      expect_same(what + name, 0, 0, op, xs...);
      const bool on = f != fits::none && tensor_cores();
      const bool wgmma_runs = on && k == kernel::wgmma && wgmma_takes;
      EXPECT_EQ(launches(kernel::wgmma) > wgmma_before, wgmma_runs)
          << what << name << ": which kernel ran";
      // tf32's copies of both operands hold plain batch strides: TMA reads them.
      EXPECT_EQ(d::cuda_wgmma_tma_choice().launches.load() > tma_before,
                wgmma_runs && tma && (tf32 || !batch_offsets))
          << what << name << ": fed by TMA";
      EXPECT_EQ(launches(kernel::mma_sync) > mma_before,
                on && (k == kernel::mma_sync || (k == kernel::wgmma && !wgmma_runs)))
          << what << name << ": which kernel ran";
      EXPECT_EQ(launches(kernel::wmma) > wmma_before, on && k == kernel::wmma)
          << what << name << ": which kernel ran";
      EXPECT_EQ(d::cuda_gemm_packed_operands().load() > packs, wgmma_runs && tf32)
          << what << name << ": operands packed";
    }
  }
};
using PipelineDtypes = ::testing::Types<ts::half, ts::bfloat16, float>;
TYPED_TEST_SUITE(CudaGemmPipeline, PipelineDtypes);

TYPED_TEST(CudaGemmPipeline, EveryLayoutWithTailsMatchesCpu) {
  using T = TypeParam;
  // m, n, k multiples of 8 (rows of 16 bytes in every layout): one chunk; tails of a tile on
  // every side (136 = 128 + 8, 264 = 2 * 128 + 8); a k shorter than one step, a k that fills the
  // pipeline's stages (328 = 10 steps of 32 and a part), a single row and a single column tile.
  const mnk cases[] = {{8, 8, 8}, {136, 264, 72}, {256, 128, 328}, {8, 520, 8}, {264, 8, 40}};
  uint64_t seed = 300;
  const auto mm = [](const auto& x, const auto& y) { return ts::matmul(x, y); };
  for (const auto& s : cases) {
    const std::string what =
        "matmul " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
    const auto a = small_ints<T>({s.m, s.k}, seed++), b = small_ints<T>({s.k, s.n}, seed++);
    const auto at = small_ints<T>({s.k, s.m}, seed++), bt = small_ints<T>({s.n, s.k}, seed++);
    const auto t = [](const auto& x) { return x.transpose(0, 1); };
    using fits = typename TestFixture::fits;
    this->expect_every_kernel(what, fits::pipelines, mm, a, b);
    this->expect_every_kernel(
        what + " a^T", fits::pipelines, [&](const auto& x, const auto& y) { return mm(t(x), y); },
        at, b);
    this->expect_every_kernel(
        what + " b^T", fits::k_major, [&](const auto& x, const auto& y) { return mm(x, t(y)); }, a,
        bt);
    this->expect_every_kernel(
        what + " a^T b^T", fits::pipelines,
        [&](const auto& x, const auto& y) { return mm(t(x), t(y)); }, at, bt);
  }
}

TYPED_TEST(CudaGemmPipeline, PartialChunksAndBatchesMatchCpu) {
  using T = TypeParam;
  using fits = typename TestFixture::fits;
  const auto mm = [](const auto& x, const auto& y) { return ts::matmul(x, y); };
  // Views whose rows are 16-byte aligned but whose extents are not multiples of a chunk: the
  // edge chunks copy part of 16 bytes and zero the rest (k = 37 of rows of 40, n = 61 of 64,
  // m = 45 of 48 in the column-major case). What lies beyond a view along k is NaN: read, it
  // would meet the other operand's zeros and make NaN.
  const T nan = T(std::numeric_limits<float>::quiet_NaN());
  const auto wa = small_ints<T>({130, 40}, 401), wb = small_ints<T>({37, 64}, 402);
  wa.slice(1, 37, 40).fill_(nan);
  this->expect_every_kernel(
      "partial chunks along k and n", fits::pipelines,
      [&](const auto& x, const auto& y) { return mm(x.slice(1, 0, 37), y.slice(1, 0, 61)); }, wa,
      wb);
  const auto wat = small_ints<T>({37, 48}, 403), wbt = small_ints<T>({24, 40}, 404);
  wbt.slice(1, 37, 40).fill_(nan);
  this->expect_every_kernel(
      "partial chunks along m (a^T) and k (b^T)", fits::pipelines,
      [&](const auto& x, const auto& y) {
        return mm(x.slice(1, 0, 45).transpose(0, 1), y.slice(1, 0, 37).transpose(0, 1));
      },
      wat, wbt);
  // Batches: contiguous batch with a broadcast matrix (strides), and a broadcast that is not a
  // multiple of the batch index (offset arrays).
  const auto a3 = small_ints<T>({3, 72, 48}, 405), b2 = small_ints<T>({48, 40}, 406);
  this->expect_every_kernel("batched, b broadcast", fits::pipelines, mm, a3, b2);
  const auto a4 = small_ints<T>({2, 1, 72, 48}, 406), b4 = small_ints<T>({3, 48, 40}, 407);
  this->batch_offsets = true;
  this->expect_every_kernel("batched broadcast on both sides", fits::pipelines, mm, a4, b4);
  const auto b4t = small_ints<T>({3, 40, 48}, 412);
  this->expect_every_kernel(
      "batched broadcast, b^T", fits::k_major,
      [&](const auto& x, const auto& y) { return mm(x, y.transpose(1, 2)); }, a4, b4t);
  this->batch_offsets = false;
  // Not eligible: rows of 17 elements (not 16-byte multiples), an operand with no unit stride.
  const auto odd = small_ints<T>({40, 17}, 408), b17 = small_ints<T>({17, 24}, 409);
  this->expect_every_kernel("rows not 16-byte aligned", fits::none, mm, odd, b17);
  this->expect_every_kernel(
      "a without a unit stride", fits::none,
      [&](const auto& x, const auto& y) { return mm(x.slice(1, 0, 80, 2), y); },
      small_ints<T>({24, 80}, 410), small_ints<T>({40, 16}, 411));
}

TYPED_TEST(CudaGemmPipeline, LinearWithBiasAndReluEpilogue) {
  using T = TypeParam;
  // linear reads w transposed (column-major B) and fuses the bias into the epilogue.
  const auto x = small_ints<T>({2, 72, 48}, 421), w = small_ints<T>({40, 48}, 422);
  const auto bias = small_ints<T>({40}, 423);
  this->expect_every_kernel(
      "linear with bias", TestFixture::fits::k_major,
      [](const auto& a, const auto& b, const auto& c) { return ts::linear(a, b, c); }, x, w, bias);
}

// Split k (gemm_split.cuh) on every kernel (wgmma, mma.sync, the WMMA pipeline and the
// register-staged one): k = 520 (four granules of 128 and 8) in 2 and 5 parts (3 in the
// convolution tests), the last part's last step partial; b^T read in place; batches with broadcast;
// gemm's alpha and beta and linear's bias, which cuda_gemm_split_reduce applies after adding the
// parts.
TYPED_TEST(CudaGemmPipeline, SplitKMatchesCpuOnBothKernels) {
  using T = TypeParam;
  namespace d = ts::detail;
  using fits = typename TestFixture::fits;
  const auto mm = [](const auto& x, const auto& y) { return ts::matmul(x, y); };
  const auto a = small_ints<T>({40, 520}, 431), b = small_ints<T>({520, 40}, 432);
  const auto bt = small_ints<T>({40, 520}, 433), c = small_ints<T>({40, 40}, 434);
  const auto a3 = small_ints<T>({2, 1, 24, 520}, 435), b3 = small_ints<T>({3, 520, 16}, 436);
  const auto bias = small_ints<T>({40}, 437);
  for (const int parts : {2, 5}) {
    const split_k_scope split(parts);
    const std::string tag = " in " + std::to_string(parts) + " parts";
    const int64_t splits_before = d::cuda_gemm_split_products().load();
    this->expect_every_kernel("matmul 40x40x520" + tag, fits::pipelines, mm, a, b);
    this->expect_every_kernel(
        "matmul b^T" + tag, fits::k_major,
        [&](const auto& x, const auto& y) { return mm(x, y.transpose(0, 1)); }, a, bt);
    this->batch_offsets = true;
    this->expect_every_kernel("batched broadcast" + tag, fits::pipelines, mm, a3, b3);
    this->batch_offsets = false;
    this->expect_every_kernel(
        "gemm alpha 0.5 beta -2" + tag, fits::pipelines,
        [](const auto& x, const auto& y, const auto& z) {
          auto out = z.clone();
          ts::gemm(0.5, x, y, -2.0, out);
          return out;
        },
        a, b, c);
    this->expect_every_kernel(
        "linear with bias" + tag, fits::k_major,
        [](const auto& x, const auto& y, const auto& z) { return ts::linear(x, y, z); }, a, bt,
        bias);
    // Five passes of five products, each split whichever kernel takes it (SIMT included).
    EXPECT_EQ(d::cuda_gemm_split_products().load() - splits_before, 25)
        << tag << ": products split";
  }
}

// 8-bit inputs on the wgmma kernel (m64n128k32, where built for sm_90a) and the mma.sync kernel
// (m16n8k32): int8 and uint8 (int32 sums) and, where built for sm_89+ (mma.sync) or sm_90a
// (wgmma), fp8 e4m3 and e5m2 (float sums). An operand whose k is contiguous with 16-byte aligned
// rows (A row-major, B column-major) is read in place, any other from a k-contiguous copy
// (gemm_pack.cuh). Integers over the type's whole range, fp8 small integers; the sums are exact,
// so every result must equal the CPU's bit for bit, on both pipelined kernels and on the
// register-staged WMMA kernel (both switched off: int8 WMMA, or fp8 on fp16 tensor cores).
// Each case also checks which kernel ran and how many operands were packed.
template <class T>
class CudaGemmMma8 : public CudaFixture {
 protected:
  static constexpr bool integers = std::is_integral_v<T>;
  void TearDown() override {
    ts::detail::cuda_gemm_start_at(ts::detail::cuda_gemm_pipeline::wgmma);
  }
  /// Whether this build runs T x T on the mma.sync kernel (fp8: built for sm_89 or newer).
  static bool tensor_cores() {
    namespace d = ts::detail;
    using Op = d::cuda_mma_op<T>;
    return d::cuda_built_for(d::cuda_gemm_mma<T, T, T, false, true, typename Op::acc>, Op::arch);
  }
  /// Integers: the type's whole range; fp8: -3 .. 3 (sums exact, and far below 2^14).
  static HostT<T> ints(const ts::Shape& s, uint64_t seed) {
    if constexpr (integers)
      return small_ints<T>(s, seed, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    else
      return small_ints<T>(s, seed);
  }
  /// Set while a case's batch offsets are not multiples of the batch index (device offset
  /// arrays): TMA's tensor maps cannot express them, so wgmma keeps its cp.async feed.
  bool batch_offsets = false;
  /// What fills the bytes beyond a view: the largest integer, or NaN, either of which changes
  /// a sum it enters.
  static T poison() {
    if constexpr (integers)
      return std::numeric_limits<T>::max();
    else
      return T(std::numeric_limits<float>::quiet_NaN());
  }
  /// op against the CPU on the wgmma kernel (where built for sm_90a, else that pass runs
  /// mma.sync), the mma.sync kernel and the register-staged one; `packed`: how many operands the
  /// pipelined kernels should find in need of a k-contiguous copy.
  template <class Op, class... X>
  void expect_every_kernel(const std::string& what, int packed, Op op, const X&... xs) {
    namespace d = ts::detail;
    using kernel = d::cuda_gemm_pipeline;  // none: the register-staged kernel
    const auto launches = [](kernel k) { return d::cuda_gemm_choice(k).launches.load(); };
    // wgmma twice: fed by TMA where the product allows it, and by cp.async.
    const std::pair<kernel, bool> passes[] = {{kernel::wgmma, true},
                                              {kernel::wgmma, false},
                                              {kernel::mma_sync, false},
                                              {kernel::none, false}};
    for (const auto& [k, tma] : passes) {
      d::cuda_gemm_start_at(k);
      const tma_scope feed(tma);
      const int64_t wgmma_before = launches(kernel::wgmma);
      const int64_t tma_before = d::cuda_wgmma_tma_choice().launches.load();
      const int64_t mma_before = launches(kernel::mma_sync);
      const int64_t packs = d::cuda_gemm_packed_operands().load();
      const std::string name =
          what + (k == kernel::wgmma      ? (tma ? " (wgmma, TMA)" : " (wgmma, cp.async)")
                  : k == kernel::mma_sync ? " (mma.sync)"
                                          : " (register-staged)");
      expect_same(name, 0, 0, op, xs...);
      const bool wgmma_runs = k == kernel::wgmma && d::cuda_wgmma_built();
      const bool mma_runs = !wgmma_runs && k != kernel::none && tensor_cores();
      EXPECT_EQ(launches(kernel::wgmma) > wgmma_before, wgmma_runs) << name << ": which kernel ran";
      EXPECT_EQ(d::cuda_wgmma_tma_choice().launches.load() > tma_before,
                wgmma_runs && tma && !batch_offsets)
          << name << ": fed by TMA";
      EXPECT_EQ(launches(kernel::mma_sync) > mma_before, mma_runs) << name << ": which kernel ran";
      EXPECT_EQ(d::cuda_gemm_packed_operands().load() - packs, wgmma_runs || mma_runs ? packed : 0)
          << name << ": operands packed";
    }
  }
};
using Mma8Dtypes = ::testing::Types<int8_t, uint8_t, ts::float8_e4m3, ts::float8_e5m2>;
TYPED_TEST_SUITE(CudaGemmMma8, Mma8Dtypes);

// Long sums of fp8 products on every kernel that takes them (wgmma fed by TMA and by cp.async,
// mma.sync, register-staged), on random e4m3 operands rather than small integers: k = 4096,
// against the CPU's float64 product of the widened operands. Hopper's fp8 wgmma adds into its
// float accumulators with fewer bits than float, so the wgmma kernels promote each stage's sums
// (cuda_wgmma_promotes). Before they did, an H200 gave 1.3e-3 here (2.0e-3 at k = 8192); after,
// 1.3e-4 at every k, as cuBLAS's fp8 product does.
class CudaGemmFp8Sums : public CudaFixture {
 protected:
  void TearDown() override {
    ts::detail::cuda_gemm_start_at(ts::detail::cuda_gemm_pipeline::wgmma);
  }
};

TEST_F(CudaGemmFp8Sums, LongSumsKeepFloatPrecisionOnEveryKernel) {
  namespace d = ts::detail;
  using f8 = ts::float8_e4m3;
  const auto a = sample<float>({64, 4096}, 931).astype<f8>();
  const auto b = sample<float>({4096, 128}, 932).astype<f8>();
  const auto want = ts::matmul(a.astype<double>(), b.astype<double>()).to_vector();
  const std::pair<d::cuda_gemm_pipeline, bool> passes[] = {{d::cuda_gemm_pipeline::wgmma, true},
                                                           {d::cuda_gemm_pipeline::wgmma, false},
                                                           {d::cuda_gemm_pipeline::mma_sync, false},
                                                           {d::cuda_gemm_pipeline::none, false}};
  for (const auto& [kernel, tma] : passes) {
    d::cuda_gemm_start_at(kernel);
    const tma_scope feed(tma);
    auto c = ts::full<float, ts::cuda>({64, 128}, std::numeric_limits<float>::quiet_NaN());
    ts::matmul(a.to<ts::cuda>(), b.to<ts::cuda>(), c);  // float out: the sums unrounded
    const auto got = c.to<ts::cpu>().to_vector();
    ASSERT_EQ(got.size(), want.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      num += (got[i] - want[i]) * (got[i] - want[i]);
      den += want[i] * want[i];
    }
    EXPECT_LT(std::sqrt(num / den), 5e-4)
        << "pipeline " << static_cast<int>(kernel) << (tma ? " fed by TMA" : "");
  }
}

TYPED_TEST(CudaGemmMma8, EveryLayoutWithTailsMatchesCpu) {
  // k a multiple of 16 (rows of whole chunks: A row-major and B column-major read in place) or
  // not (every operand packed); tails of a tile on every side; a k shorter than a step of 64, one
  // that fills the four stages and goes on (336 = 5 steps and a part), a single row and a single
  // column of tiles.
  const mnk cases[] = {{16, 16, 16}, {136, 264, 80}, {256, 128, 336}, {8, 520, 16},
                       {264, 8, 48}, {40, 72, 100},  {1, 1, 1},       {7, 5, 3}};
  uint64_t seed = 500;
  const auto mm = [](const auto& x, const auto& y) { return ts::matmul(x, y); };
  const auto t = [](const auto& x) { return x.transpose(0, 1); };
  for (const auto& s : cases) {
    const std::string what =
        "matmul " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
    const auto a = this->ints({s.m, s.k}, seed++), b = this->ints({s.k, s.n}, seed++);
    const auto at = this->ints({s.k, s.m}, seed++), bt = this->ints({s.n, s.k}, seed++);
    const int aligned = s.k % 16 == 0 ? 0 : 1;  // k-contiguous rows packed only when misaligned
    this->expect_every_kernel(what, aligned + 1, mm, a, b);
    this->expect_every_kernel(
        what + " a^T", 2, [&](const auto& x, const auto& y) { return mm(t(x), y); }, at, b);
    this->expect_every_kernel(
        what + " b^T", 2 * aligned, [&](const auto& x, const auto& y) { return mm(x, t(y)); }, a,
        bt);
    this->expect_every_kernel(
        what + " a^T b^T", 1 + aligned,
        [&](const auto& x, const auto& y) { return mm(t(x), t(y)); }, at, bt);
  }
}

// Split k with 8-bit inputs: k = 528 (four granules of 128 and 16) in 2 and 5 parts; integer
// sums over the whole range wrap the same however the parts are added.
TYPED_TEST(CudaGemmMma8, SplitKMatchesCpu) {
  namespace d = ts::detail;
  const auto mm = [](const auto& x, const auto& y) { return ts::matmul(x, y); };
  const auto a = this->ints({40, 528}, 541), b = this->ints({528, 24}, 542);
  const auto bt = this->ints({24, 528}, 543);
  for (const int parts : {2, 5}) {
    const split_k_scope split(parts);
    const std::string tag = " in " + std::to_string(parts) + " parts";
    const int64_t splits_before = d::cuda_gemm_split_products().load();
    this->expect_every_kernel("matmul 40x24x528" + tag, 1, mm, a, b);
    this->expect_every_kernel(
        "matmul b^T" + tag, 0,
        [&](const auto& x, const auto& y) { return mm(x, y.transpose(0, 1)); }, a, bt);
    // Four passes of two products, each split whichever kernel takes it.
    EXPECT_EQ(d::cuda_gemm_split_products().load() - splits_before, 8) << tag << ": products split";
  }
}

TYPED_TEST(CudaGemmMma8, PartialChunksStridesAndBatchesMatchCpu) {
  const auto mm = [](const auto& x, const auto& y) { return ts::matmul(x, y); };
  const auto t = [](const auto& x) { return x.transpose(0, 1); };
  // Rows of 48 bytes holding k = 37 (in place, the last chunk partly inside the view), the bytes
  // beyond the view poisoned: read, they would change the sums.
  const auto wa = this->ints({130, 48}, 501), wbt = this->ints({70, 48}, 502);
  wa.slice(1, 37, 48).fill_(this->poison());
  wbt.slice(1, 37, 48).fill_(this->poison());
  this->expect_every_kernel(
      "partial chunks along k, in place", 0,
      [&](const auto& x, const auto& y) { return mm(x.slice(1, 0, 37), t(y.slice(1, 0, 37))); }, wa,
      wbt);
  // No unit stride: every other column of A, every other row and column of B (packed from any
  // strides).
  const auto every_other = [](const auto& y) { return y.slice(0, 0, 80, 2).slice(1, 0, 80, 2); };
  this->expect_every_kernel(
      "operands without a unit stride", 2,
      [&](const auto& x, const auto& y) { return mm(x.slice(1, 0, 80, 2), every_other(y)); },
      this->ints({24, 80}, 503), this->ints({80, 80}, 504));
  // Batches: B broadcast in place (batch stride 0), B broadcast and packed once, offset arrays
  // on both sides (a broadcast that is not a multiple of the batch index) with B packed per
  // batch matrix.
  const auto a3 = this->ints({3, 72, 64}, 505), b2 = this->ints({64, 40}, 506);
  const auto b2t = this->ints({40, 64}, 507);
  this->expect_every_kernel(
      "batched, b^T broadcast", 0, [&](const auto& x, const auto& y) { return mm(x, t(y)); }, a3,
      b2t);
  this->expect_every_kernel("batched, b broadcast", 1, mm, a3, b2);
  const auto a4 = this->ints({2, 1, 72, 64}, 508), b4 = this->ints({3, 64, 40}, 509);
  this->batch_offsets = true;
  this->expect_every_kernel("batched broadcast on both sides", 1, mm, a4, b4);
  this->batch_offsets = false;
  this->expect_every_kernel(
      "batched a^T", 1, [&](const auto& x, const auto& y) { return mm(x.transpose(1, 2), t(y)); },
      this->ints({3, 64, 72}, 510), b2t);
}

// The TMA-fed wgmma kernel (gemm_wgmma_tma.cuh) with 128 x 128 tiles and with 128 x 256 ones,
// each under three orders of the emulation's asynchronous work (tests/cuda_emu): all late (TMA
// copies land when their barrier's phase completes, wgmma runs at its wait_group), so a stage
// read without waiting on its barrier is stale; copies early (at issue), so a slot that its
// readers release before their wgmma is done is overwritten under them; wgmma early (at issue),
// so a wgmma issued on a slot before it is final (tf32: before the rounding threads are done)
// reads it unfinished. k long enough for bf16 to reuse every slot at least twice; bf16 in
// every layout, int8, tf32, a strided batch, a split k (never widened). On a GPU the three
// passes are the same run.
TEST(CudaGemmWgmmaTma, MatchesCpuOnBothTileWidthsWhateverTheAsynchronousOrder) {
  namespace d = ts::detail;
  if (!no_gpu_reason().empty())
    GTEST_SKIP() << "no CUDA device visible (" << no_gpu_reason() << ")";
  if (!d::cuda_wgmma_built()) GTEST_SKIP() << "wgmma not built for this device (sm_90a)";
  using bf = ts::bfloat16;
  const auto mm = [](const auto& x, const auto& y) { return ts::matmul(x, y); };
  const auto t = [](const auto& x) { return x.transpose(-2, -1); };
  // n of 264 and 136: a second (partial) 128-column half in the wide tiles.
  const auto a = small_ints<bf>({136, 1000}, 901), b = small_ints<bf>({1000, 264}, 902);
  const auto at = small_ints<bf>({1000, 136}, 903), bt = small_ints<bf>({264, 1000}, 904);
  const auto a3 = small_ints<bf>({3, 40, 1000}, 905), b3 = small_ints<bf>({3, 1000, 136}, 906);
  const auto i8 = small_ints<int8_t>({40, 1000}, 907, -100, 100),
             j8 = small_ints<int8_t>({264, 1000}, 908, -100, 100);
  // tf32: random floats, against the CPU product of the inputs rounded to tf32 (unrounded, the
  // emulated instruction truncates them: errors past the tolerance).
  const auto f = sample<float>({72, 1000}, 909), g = sample<float>({264, 1000}, 910);
  const auto rf = ts::map([](float v) { return round_tf32(v); }, f),
             rg = ts::map([](float v) { return round_tf32(v); }, g);
  const auto want_tf32 = ts::matmul(rf, t(rg));
  // k is never split but where the test asks (a GPU's 132 SMs would split these few tiles, and
  // no split product is widened: seen on an H200, 0 wide launches of the 7 expected).
  struct order_scope {  // wide tiles for every product that may have them (or none), an order
    order_scope(bool wide, int order) {
      d::cuda_wgmma_tma_wide_choice().enabled = wide;
      d::cuda_wgmma_tma_wide_min_tiles() = 1;
      d::cuda_gemm_split_k() = 1;
      saved = ts::get_float32_matmul_precision();
      ts::set_float32_matmul_precision(ts::matmul_precision::high);
#if defined(TESSERA_CUDA_HOST_EMULATION)
      tessera_cuda_emulation::tma_lands_early = order == 1;
      tessera_cuda_emulation::wgmma_runs_early = order == 2;
#else
      (void)order;
#endif
    }
    ~order_scope() {
      d::cuda_wgmma_tma_wide_choice().enabled = true;
      d::cuda_wgmma_tma_wide_min_tiles() = 0;
      d::cuda_gemm_split_k() = 0;
      ts::set_float32_matmul_precision(saved);
#if defined(TESSERA_CUDA_HOST_EMULATION)
      tessera_cuda_emulation::tma_lands_early = false;
      tessera_cuda_emulation::wgmma_runs_early = false;
#endif
    }
    ts::matmul_precision saved;
  };
  const char* const orders[] = {", all late)", ", copies early)", ", wgmma early)"};
  for (const bool wide : {false, true})
    for (int order = 0; order < 3; ++order) {
      const order_scope scope(wide, order);
      const std::string tag = std::string(wide ? " (128 x 256" : " (128 x 128") + orders[order];
      const int64_t tma_before = d::cuda_wgmma_tma_choice().launches.load(),
                    wide_before = d::cuda_wgmma_tma_wide_choice().launches.load();
      expect_same("bf16 a b" + tag, 0, 0, mm, a, b);
      expect_same(
          "bf16 a^T b" + tag, 0, 0, [&](const auto& x, const auto& y) { return mm(t(x), y); }, at,
          b);
      expect_same(
          "bf16 a b^T" + tag, 0, 0, [&](const auto& x, const auto& y) { return mm(x, t(y)); }, a,
          bt);
      expect_same(
          "bf16 a^T b^T" + tag, 0, 0, [&](const auto& x, const auto& y) { return mm(t(x), t(y)); },
          at, bt);
      expect_same("bf16 batched" + tag, 0, 0, mm, a3, b3);
      expect_same(
          "int8 a b^T" + tag, 0, 0, [&](const auto& x, const auto& y) { return mm(x, t(y)); }, i8,
          j8);
      const auto got_tf32 = mm(f.to<ts::cuda>(), t(g.to<ts::cuda>())).to<ts::cpu>();
      expect_close(got_tf32, want_tf32, 1e-6, 1e-5 * 1000, "tf32 a b^T" + tag);
      {
        const split_k_scope split(3);
        expect_same("bf16 split in 3" + tag, 0, 0, mm, a3, b3);
      }
      EXPECT_EQ(d::cuda_wgmma_tma_choice().launches.load() - tma_before, 8)
          << tag << ": fed by TMA";
      EXPECT_EQ(d::cuda_wgmma_tma_wide_choice().launches.load() - wide_before, wide ? 7 : 0)
          << tag << ": wide tiles";
    }
}

// The TMA kernel's grouped tile order (cuda_grouped_tile): every tile of the grid exactly once,
// groups of tile rows walked column by column, 1 row the linear order (no GPU needed).
TEST(CudaMmaTiles, GroupedTileOrderCoversEveryTileOnce) {
  namespace d = ts::detail;
  for (const auto& [gx, gy] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 2}, {5, 8}, {7, 9}, {32, 64}, {1, 17}, {17, 1}}) {
    std::vector<int> seen(static_cast<size_t>(gx * gy), 0);
    for (int64_t y = 0; y < gy; ++y)
      for (int64_t x = 0; x < gx; ++x) {
        for (const int64_t rows : {1, 3, 8}) {
          const d::cuda_tile_at t = d::cuda_grouped_tile(gx, gy, x, y, rows);
          ASSERT_TRUE(t.m >= 0 && t.m < gy && t.n >= 0 && t.n < gx) << gx << " x " << gy;
          ++seen[static_cast<size_t>(t.m * gx + t.n)];
          if (rows == 1) {
            EXPECT_TRUE(t.m == y && t.n == x) << "linear order";
          }
        }
      }
    for (const int s : seen) ASSERT_EQ(s, 3) << gx << " x " << gy;  // once per group size
  }
  // The first blocks of a 32 x 64 grid take the first column of the first 8 rows, then the
  // second column.
  EXPECT_EQ(d::cuda_grouped_tile(32, 64, 7, 0, 8).m, 7);
  EXPECT_EQ(d::cuda_grouped_tile(32, 64, 7, 0, 8).n, 0);
  EXPECT_EQ(d::cuda_grouped_tile(32, 64, 8, 0, 8).m, 0);
  EXPECT_EQ(d::cuda_grouped_tile(32, 64, 8, 0, 8).n, 1);
}

#if defined(TESSERA_CUDA_HOST_EMULATION)
// The emulation's model of TMA and mbarriers (tests/cuda_emu/include/cuda.h, cuda_runtime.h),
// which the kernel test above relies on: a copy of a box lands in the 128-byte swizzled layout
// with zeros outside the tensor, only when its barrier's phase completes; a phase that cannot
// complete fails the launch instead of hanging.
namespace tma_probe {
/// Thread 0 copies the box at (c0, c1) of `op` into shared memory, announcing `expect` bytes;
/// thread 1 records the first shared byte before waiting (stale: still the 0xff fill) and, after
/// the wait, the whole box as it lies in shared memory.
__global__ void copy_box(const __grid_constant__ ts::detail::cuda_tma_operand op, int32_t c0,
                         int32_t c1, uint32_t expect, unsigned char* before, unsigned char* out,
                         int bytes) {
  namespace d = ts::detail;
  unsigned char* const smem = d::cuda_dynamic_smem();
  const uint32_t base = d::cuda_smem_address(smem), bar = base + static_cast<uint32_t>(bytes);
  if (threadIdx.x == 0) d::cuda_mbarrier_init(bar, 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    d::cuda_mbarrier_arrive_expect_tx(bar, expect);
    d::cuda_tma_load(base, op, c0, c1, 0, bar);
  }
  if (threadIdx.x == 1) {
    *before = smem[0];
    d::cuda_mbarrier_wait(bar, 0);
    for (int i = 0; i < bytes; ++i) out[i] = smem[i];
  }
}
}  // namespace tma_probe

TEST(CudaEmulationTma, CopiesLandSwizzledWithZerosWhenTheirPhaseCompletes) {
  namespace d = ts::detail;
  // A 100 x 70 int8 matrix with rows of 80 bytes; the box of 128 bytes x 64 rows at (-8, 40)
  // reaches past every edge but the top one.
  constexpr int rows = 100, cols = 70, pitch = 80, box_rows = 64, bytes = 128 * box_rows;
  std::vector<uint8_t> host(rows * pitch);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(1 + i % 251);
  const auto m = ts::from_vector(host, {rows * pitch}).to<ts::cuda>();
  d::cuda_tma_operand op{};
  ASSERT_TRUE(d::cuda_tma_operand_of(op, m.data(), 1, cols, rows, pitch, 1, 0, box_rows));
  const d::cuda_scratch before(16), out(bytes);
  auto* const b = static_cast<unsigned char*>(before.get());
  auto* const o = static_cast<unsigned char*>(out.get());
  d::cuda_launch_smem("copy_box", tma_probe::copy_box, dim3(1), dim3(2), bytes + 8, op, -8, 40,
                      uint32_t{bytes}, b, o, bytes);
  unsigned char stale = 0;
  std::vector<unsigned char> got(bytes);
  ASSERT_EQ(cudaMemcpy(&stale, b, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), o, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(stale, 0xff) << "the copy landed before its phase completed";
  for (int r = 0; r < box_rows; ++r)
    for (int c = 0; c < 128; ++c) {
      const int y = 40 + r, x = -8 + c;
      const int want =
          y < rows && x >= 0 && x < cols ? host[static_cast<size_t>(y * pitch + x)] : 0;
      const int at = (r * 128 + c) ^ ((r % 8) << 4);  // the 128-byte swizzle
      ASSERT_EQ(got[static_cast<size_t>(at)], want) << "box row " << r << ", byte " << c;
    }
  // A phase expecting more bytes than come never completes: the kernel fails, reported (as on a
  // GPU) by the next wait for the device.
  EXPECT_THROW(
      {
        d::cuda_launch_smem("copy_box", tma_probe::copy_box, dim3(1), dim3(2), bytes + 8, op, 0, 0,
                            uint32_t{bytes + 16}, b, o, bytes);
        d::cuda_wait_device();
      },
      ts::backend_error);
  // Fewer: the copy brings more than expected.
  EXPECT_THROW(
      {
        d::cuda_launch_smem("copy_box", tma_probe::copy_box, dim3(1), dim3(2), bytes + 8, op, 0, 0,
                            uint32_t{bytes - 16}, b, o, bytes);
        d::cuda_wait_device();
      },
      ts::backend_error);
  // The driver's checks: a row stride that is not a multiple of 16 bytes.
  EXPECT_FALSE(d::cuda_tma_operand_of(op, m.data(), 1, cols, rows, 70, 1, 0, box_rows));
}
#endif

// The mma.sync kernel's swizzled (or padded) stage tiles (gemm_mma.cuh), checked on the host (no
// GPU needed): every element has its own place, each 16-byte chunk stays contiguous and aligned
// (cp.async and ldmatrix move whole chunks), and neither the copies in nor the ldmatrix reads
// out meet a bank conflict: the 8 chunks of one 128-byte wavefront (8 consecutive threads'
// copies, or one 8 x 8 matrix's rows) fall on 8 different 16-byte groups of banks. The emulation
// cannot see bank conflicts, so this is where a swizzle that costs speed would show.
// V is the number of elements in a chunk (8 for 16-bit elements, 16 for bytes, 4 for tf32);
// span the tile's size in elements (more than outer x inner when rows are padded).
template <class Tile, int V = 8>
void expect_swizzle_ok(const char* name, int outer, int inner, int span = 0) {
  if (span == 0) span = outer * inner;
  std::vector<int> seen(static_cast<size_t>(span), 0);
  for (int o = 0; o < outer; ++o)
    for (int i = 0; i < inner; ++i) {
      const int at = Tile::at(o, i);
      ASSERT_TRUE(at >= 0 && at < span) << name << " (" << o << ", " << i << ")";
      ++seen[static_cast<size_t>(at)];
      if (i % V == 0)
        EXPECT_EQ(at % V, 0) << name << ": chunk start (" << o << ", " << i << ")";
      else
        EXPECT_EQ(at, Tile::at(o, i - 1) + 1) << name << ": chunk (" << o << ", " << i << ")";
    }
  for (int n : seen) ASSERT_LE(n, 1) << name << ": two elements in one place";
  // cp.async: chunk c goes to thread c % 128; threads 8w .. 8w + 7 form one wavefront.
  const int per_row = inner / V;
  for (int c0 = 0; c0 < outer * per_row; c0 += 8) {
    std::set<int> groups;
    for (int c = c0; c < c0 + 8; ++c) groups.insert(Tile::at(c / per_row, c % per_row * V) / V % 8);
    EXPECT_EQ(groups.size(), 8u) << name << ": copies of chunks " << c0 << " .. " << c0 + 7;
  }
}

/// The 16-byte bank groups of the rows that lanes 8q .. 8q + 7 give one ldmatrix (V elements
/// per 16 bytes).
template <int V = 8, class At>
void expect_ldmatrix_conflict_free(const char* name, At at) {
  for (int q = 0; q < 4; ++q) {
    std::set<int> groups;
    for (int lane = 8 * q; lane < 8 * q + 8; ++lane) {
      EXPECT_EQ(at(lane) % V, 0) << name << ": lane " << lane << " row not 16-byte aligned";
      groups.insert(at(lane) / V % 8);
    }
    EXPECT_EQ(groups.size(), 8u) << name << ": matrix " << q;
  }
}

TEST(CudaMmaTiles, SwizzlesArePermutationsOfChunksWithoutBankConflicts) {
  namespace d = ts::detail;
  expect_swizzle_ok<d::cuda_mma_k_major<8>>("k-major [128][32]", 128, 32);
  expect_swizzle_ok<d::cuda_mma_mn_major<>>("mn-major [32][128]", 32, 128);
  expect_swizzle_ok<d::cuda_mma_k_major<16>, 16>("8-bit k-major [128][64]", 128, 64);
  for (int m = 0; m < 128; m += 16)
    for (int kk = 0; kk < 64; kk += 32) {
      const std::string at = " at " + std::to_string(m) + ", " + std::to_string(kk);
      expect_ldmatrix_conflict_free<16>(("8-bit A" + at).c_str(), [&](int lane) {
        return d::cuda_mma_a_frag_at<false, 16>(lane, m, kk);
      });
      expect_ldmatrix_conflict_free<16>(("8-bit B" + at).c_str(), [&](int lane) {
        return d::cuda_mma_b_frag_at<true, 16>(lane, m, kk);
      });
    }
  // wgmma's 128-byte swizzled tiles (gemm_wgmma.cuh): whole chunks, conflict-free copies. The
  // reads are the tensor cores' own, from the canonical layouts the descriptors name.
  expect_swizzle_ok<d::cuda_wgmma_k_major<8>>("wgmma k-major [128][64]", 128, 64);
  expect_swizzle_ok<d::cuda_wgmma_k_major<4>, 4>("wgmma tf32 k-major [128][32]", 128, 32);
  expect_swizzle_ok<d::cuda_wgmma_k_major<16>, 16>("wgmma 8-bit k-major [128][128]", 128, 128);
  expect_swizzle_ok<d::cuda_wgmma_mn_major>("wgmma mn-major [64][128]", 64, 128);
  // tf32: ldmatrix from the k-major tiles, 32-bit loads from the mn-major ones, where each of
  // the four loads of a fragment must find the 32 lanes' floats in 32 different banks.
  expect_swizzle_ok<d::cuda_mma_k_major<4>, 4>("tf32 k-major [128][16]", 128, 16);
  expect_swizzle_ok<d::cuda_mma_mn_major<4>, 4>("tf32 mn-major [16][128 + 8]", 16, 128,
                                                d::cuda_mma_op<d::cuda_tf32_tag>::tile);
  for (int m = 0; m < 128; m += 16)
    for (int kk = 0; kk < 16; kk += 8) {
      const std::string at = " at " + std::to_string(m) + ", " + std::to_string(kk);
      expect_ldmatrix_conflict_free<4>(("tf32 A row-major" + at).c_str(), [&](int lane) {
        return d::cuda_mma_a_frag_at<false, 4>(lane, m, kk);
      });
      expect_ldmatrix_conflict_free<4>(("tf32 B column-major" + at).c_str(), [&](int lane) {
        return d::cuda_mma_b_frag_at<true, 4>(lane, m, kk);
      });
      for (int q = 0; q < 4; ++q) {
        std::set<int> a_banks, b_banks;
        for (int lane = 0; lane < 32; ++lane) {
          a_banks.insert(d::cuda_mma_tf32_mn_frag_at<false>(lane, m, kk, q) % 32);
          b_banks.insert(d::cuda_mma_tf32_mn_frag_at<true>(lane, m, kk, q) % 32);
        }
        EXPECT_EQ(a_banks.size(), 32u) << "tf32 A column-major" << at << " register " << q;
        EXPECT_EQ(b_banks.size(), 32u) << "tf32 B row-major" << at << " register " << q;
      }
    }
  for (int m = 0; m < 128; m += 16)
    for (int kk = 0; kk < 32; kk += 16) {
      const std::string at = " at " + std::to_string(m) + ", " + std::to_string(kk);
      expect_ldmatrix_conflict_free(("A row-major" + at).c_str(), [&](int lane) {
        return d::cuda_mma_a_frag_at<false>(lane, m, kk);
      });
      expect_ldmatrix_conflict_free(("A column-major" + at).c_str(), [&](int lane) {
        return d::cuda_mma_a_frag_at<true>(lane, m, kk);
      });
      expect_ldmatrix_conflict_free(("B row-major" + at).c_str(), [&](int lane) {
        return d::cuda_mma_b_frag_at<false>(lane, m, kk);
      });
      expect_ldmatrix_conflict_free(("B column-major" + at).c_str(), [&](int lane) {
        return d::cuda_mma_b_frag_at<true>(lane, m, kk);
      });
    }
}

// tf32 rounding on the pipelined kernels (wgmma, mma.sync, WMMA): each thread rounds what it
// copied, after its wait. Both tiles of every layout: a kernel that skipped the rounding of one
// would truncate (the tensor cores ignore the low bits); on wgmma, in the layouts that are not
// k-contiguous, the operands go through a k-contiguous copy first, which must not round.
TEST_F(CudaGemmTf32, PipelineInputsRoundToNearestTf32TiesAway) {
  namespace d = ts::detail;
  // 8 x 8 operands (eligible); each output sums 8 products x (1/8), so it equals x as seen by
  // the tensor cores: 1 + 2^-10 (rounded, ties away) rather than x = 1 + 2^-11. Then the
  // operands swap roles, so each side's rounding is tested.
  const float x = 1.0f + std::ldexp(1.0f, -11);
  const auto big = ts::full<float, ts::cuda>({8, 8}, x),
             eighth = ts::full<float, ts::cuda>({8, 8}, 0.125f);
  const auto t = [](const auto& y) { return y.transpose(0, 1); };
  using kernel = d::cuda_gemm_pipeline;
  const auto launches = [](kernel k) { return d::cuda_gemm_choice(k).launches.load(); };
  for (const kernel k : {kernel::wgmma, kernel::mma_sync, kernel::wmma}) {
    d::cuda_gemm_start_at(k);
    for (int layout = 0; layout < 8; ++layout) {
      const auto a = layout & 4 ? eighth : big, b = layout & 4 ? big : eighth;
      // The kernel that should run.
      const kernel runs = k == kernel::wgmma && !d::cuda_wgmma_built() ? kernel::mma_sync : k;
      const std::string what = std::string(runs == kernel::wgmma      ? "wgmma"
                                           : runs == kernel::mma_sync ? "mma.sync"
                                                                      : "WMMA pipeline") +
                               (layout & 4 ? " x in B" : " x in A") + (layout & 1 ? " a^T" : "") +
                               (layout & 2 ? " b^T" : "");
      const int64_t before = launches(runs);
      const auto got = ts::matmul(layout & 1 ? t(a) : a, layout & 2 ? t(b) : b).to<ts::cpu>();
      EXPECT_EQ(launches(runs) > before, tensor_cores()) << what << ": which kernel ran";
      for (float v : got.to_vector())
        ASSERT_EQ(v, tensor_cores() ? 1.0f + std::ldexp(1.0f, -10) : x) << what;
    }
  }
  d::cuda_gemm_start_at(kernel::wgmma);
}

class CudaGemmOps : public CudaFixture {};

// The automatic choice of parts, on this device's SM count (the host emulation reports 2) and on
// an H100's 132: a product whose tiles fill half of the SMs or more is not split; fewer tiles
// are split into enough parts to fill the SMs where k has room (4 granules a part on the tensor
// cores, 1 on the SIMT kernel); forced parts shrink to fit k and the 256 MB buffer.
TEST_F(CudaGemmOps, SplitKChoosesPartsFromTilesAndK) {
  namespace d = ts::detail;
  for (const int64_t sms : {int64_t{d::cuda_sm_count()}, int64_t{132}}) {
    const std::string on = " on " + std::to_string(sms) + " SMs";
    EXPECT_EQ(d::cuda_gemm_splits(sms, 1, 64, 64, 1 << 16, 4, 1, sms), 1)
        << "tiles fill the SMs" << on;
    EXPECT_EQ(d::cuda_gemm_splits(1, 1, 64, 64, 128, 4, 1, sms), 1) << "one granule of k" << on;
    EXPECT_EQ(d::cuda_gemm_splits(1, 1, 64, 64, 3 * 128, 4, 4, sms), 1)
        << "under 4 granules, tc" << on;
    EXPECT_EQ(d::cuda_gemm_splits(1, 1, 64, 64, 3 * 128, 4, 1, sms), std::min<int64_t>(sms, 3))
        << "3 granules, SIMT" << on;
    EXPECT_EQ(d::cuda_gemm_splits(1, 1, 64, 64, 1 << 20, 4, 1, sms), sms)
        << "one tile, long k: every SM" << on;
    EXPECT_EQ(d::cuda_gemm_splits(1, 1, 64, 64, 1 << 20, 4, 4, sms), sms)
        << "one tile, long k, tc" << on;
  }
  // The fp32 CNN step's weight gradients on an H100: conv1's (32 x 9, k = 64 images x 28 x 28)
  // on all 132 SMs, conv2's (64 x 288: 3 tiles, k = 64 x 14 x 14 = 98 granules) on 44 parts.
  EXPECT_EQ(d::cuda_gemm_splits(1, 1, 32, 9, 64 * 28 * 28, 4, 1, 132), 132);
  EXPECT_EQ(d::cuda_gemm_splits(3, 1, 64, 288, 64 * 14 * 14, 4, 1, 132), 44);
  EXPECT_EQ(d::cuda_gemm_splits(66, 1, 64, 288, 64 * 14 * 14, 4, 1, 132), 2) << "half the SMs";
  EXPECT_EQ(d::cuda_gemm_splits(67, 1, 64, 288, 64 * 14 * 14, 4, 1, 132), 1) << "over half";
  const split_k_scope forced(5);
  const int64_t sms = d::cuda_sm_count();
  EXPECT_EQ(d::cuda_gemm_splits(1000, 1, 64, 64, 3 * 128 + 1, 4, 4, sms), 4)
      << "forced, 4 granules";
  EXPECT_EQ(d::cuda_gemm_splits(1, 1, 4096, 4096, 1 << 20, 4, 1, sms), 4) << "256 MB of sums";
  EXPECT_EQ(d::cuda_gemm_splits(1, 1, 8192, 8192, 1 << 20, 4, 1, sms), 1) << "over 256 MB";
}

// A product split into more parts than the old cap of 32 (forced here; an H100 picks such
// counts for one-tile products with a long k): every part reaches the sum, in order. Small
// integers, so the float sums are exact whatever the order; a convolution weight gradient of
// conv1's shape (k = images x pixels) the same way.
TEST_F(CudaGemmOps, ManyPartsAddUpToTheWholeProduct) {
  namespace d = ts::detail;
  const auto a = small_ints<float>({32, 40 * 128 + 5}, 901);
  const auto b = small_ints<float>({40 * 128 + 5, 9}, 902);
  const auto want = ts::matmul(a, b);
  const int64_t splits_before = d::cuda_gemm_split_products().load();
  for (const int parts : {33, 41}) {  // 41: k's granules, the last part 5 deep
    const split_k_scope split(parts);
    expect_close(ts::matmul(a.to<ts::cuda>(), b.to<ts::cuda>()).to<ts::cpu>(), want, 0, 0,
                 "matmul 32 x 9 x 5125 in " + std::to_string(parts) + " parts");
  }
  EXPECT_EQ(d::cuda_gemm_split_products().load() - splits_before, 2) << "products split";
  const auto x = small_ints<float>({8, 1, 28, 28}, 903);
  const auto dy = small_ints<float>({8, 32, 28, 28}, 904);
  const ts::Conv2dOptions o{.padding = {1, 1}};
  const auto dw = ts::conv2d_backward_weight(dy, x, {32, 1, 3, 3}, o);
  const split_k_scope split(49);  // 8 x 28 x 28 = 6272: 49 granules
  expect_close(ts::conv2d_backward_weight(dy.to<ts::cuda>(), x.to<ts::cuda>(), {32, 1, 3, 3}, o)
                   .to<ts::cpu>(),
               dw, 0, 0, "conv1's weight gradient in 49 parts");
}

// Float products of at most 64 rows run on the SIMT kernel's 64-row tiles: the same sums in the
// same order as on 128-row tiles, so random inputs (whose sums depend on the order) must give the
// same bits either way. Tails on every side, every operand layout, a batch, split k, bias, gemm's
// alpha and beta, and the convolutions' gathered operands (forward, input and weight gradients);
// a 65-row product stays on 128-row tiles.
TEST_F(CudaGemmOps, ShortSimtTilesGiveTheLongTilesBits) {
  namespace d = ts::detail;
  auto& tiles = d::cuda_gemm_simt_short_choice();
  const auto both = [&](const std::string& what, bool short_tiles, auto run) {
    tiles.enabled = false;
    const int64_t before_long = tiles.launches.load();
    const auto want = run().template to<ts::cpu>().to_vector();
    EXPECT_EQ(tiles.launches.load(), before_long) << what << ": switched off";
    tiles.enabled = true;
    const int64_t before = tiles.launches.load();
    const auto got = run().template to<ts::cpu>().to_vector();
    EXPECT_EQ(tiles.launches.load() > before, short_tiles) << what << ": which tiles ran";
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], 4) != 0;
    EXPECT_EQ(differ, 0u) << what << ": elements whose bits differ";
  };
  ts::Generator gen(71);
  const auto dev = [&](const ts::Shape& s) {
    return ts::randn<float, ts::cpu>(s, gen).to<ts::cuda>();
  };
  const mnk cases[] = {{1, 1, 1},     {7, 5, 3},     {64, 130, 300},
                       {33, 257, 65}, {64, 3136, 9}, {65, 40, 20}};
  for (const auto& s : cases) {
    const std::string what =
        "matmul " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
    const bool short_tiles = s.m <= 64;
    const auto a = dev({s.m, s.k}), b = dev({s.k, s.n});
    const auto at = dev({s.k, s.m}), bt = dev({s.n, s.k}), wide = dev({s.m, 2 * s.k});
    both(what, short_tiles, [&] { return ts::matmul(a, b); });
    both(what + " a^T", short_tiles, [&] { return ts::matmul(at.transpose(0, 1), b); });
    both(what + " b^T", short_tiles, [&] { return ts::matmul(a, bt.transpose(0, 1)); });
    both(what + " strided a", short_tiles,
         [&] { return ts::matmul(wide.slice(1, 0, 2 * s.k, 2), b); });
  }
  const auto x3 = dev({3, 20, 70}), y3 = dev({70, 50});
  both("batched", true, [&] { return ts::matmul(x3, y3); });
  {
    const split_k_scope split(3);
    const auto a = dev({40, 300}), b = dev({300, 24});
    both("3 parts of k", true, [&] { return ts::matmul(a, b); });
  }
  const auto x = dev({64, 100}), w = dev({30, 100}), bias = dev({30}), c = dev({64, 30});
  both("linear with bias", true, [&] { return ts::linear(x, w, bias); });
  both("gemm alpha 0.5 beta -2", true, [&] {
    auto out = c.clone();
    ts::gemm(0.5, x, w.transpose(0, 1), -2.0, out);
    return out;
  });
  const ts::Conv2dOptions o{.padding = {1, 1}, .relu = true};
  const auto img = dev({2, 3, 9, 8}), k = dev({20, 3, 3, 3}), kb = dev({20}),
             g = dev({2, 20, 9, 8});
  both("conv2d forward", true, [&] { return ts::conv2d(img, k, kb, o); });
  both("conv2d input gradient", true,
       [&] { return ts::conv2d_backward_input(g, k, img.shape(), o); });
  both("conv2d weight gradient", true,
       [&] { return ts::conv2d_backward_weight(g, img, k.shape(), o); });
}

TEST_F(CudaGemmOps, Int8AccumulatesExactlyInInt32) {
  // Extremes: 300 products of +-127/128 stay far inside int32 and are exact.
  const auto a = small_ints<int8_t>({65, 300}, 31, -128, 127);
  const auto b = small_ints<int8_t>({300, 129}, 32, -128, 127);
  expect_same(
      "int8 matmul", 0, 0, [](const auto& x, const auto& y) { return ts::matmul(x, y); }, a, b);
  const auto u = small_ints<uint8_t>({300, 40}, 33, 0, 255);
  expect_same(
      "int8 x uint8", 0, 0, [](const auto& x, const auto& y) { return ts::matmul(x, y); },
      b.slice(1, 0, 17).transpose(0, 1).contiguous(), u);
}

TEST_F(CudaGemmOps, GemmAlphaBetaAndNaNInAnUnreadOutput) {
  const auto a = small_ints<float>({70, 40}, 41), b = small_ints<float>({40, 90}, 42);
  const auto c0 = small_ints<float>({70, 90}, 43);
  const auto run = [&](double alpha, double beta, const HostT<float>& c) {
    auto host = c.clone();
    ts::gemm(alpha, a, b, beta, host);
    auto dev = c.to<ts::cuda>();
    ts::gemm(alpha, a.to<ts::cuda>(), b.to<ts::cuda>(), beta, dev);
    expect_close(dev.to<ts::cpu>(), host, 0, 0,
                 "gemm alpha " + std::to_string(alpha) + " beta " + std::to_string(beta));
    return dev.to<ts::cpu>();
  };
  run(0.5, 2, c0);
  run(0, 1, c0);
  const auto nan = ts::full<float, ts::cpu>({70, 90}, std::numeric_limits<float>::quiet_NaN());
  const auto got = run(1, 0, nan);
  for (float v : got.to_vector()) ASSERT_FALSE(std::isnan(v)) << "beta = 0 read c";
}

TEST_F(CudaGemmOps, EmptyInnerDimensionGivesZeros) {
  const auto a = ts::zeros<float, ts::cpu>({5, 0}), b = ts::zeros<float, ts::cpu>({0, 4});
  const auto got = ts::matmul(a.to<ts::cuda>(), b.to<ts::cuda>()).to<ts::cpu>();
  ASSERT_EQ(got.shape(), (ts::Shape{5, 4}));
  for (float v : got.to_vector()) EXPECT_EQ(v, 0.0f);
}

TEST_F(CudaGemmOps, WritesIntoAStridedOutputView) {
  const auto a = small_ints<double>({9, 12}, 51), b = small_ints<double>({12, 7}, 52);
  auto host = ts::zeros<double, ts::cpu>({7, 9});
  ts::matmul(a, b, host.transpose(0, 1));
  auto dev = ts::zeros<double, ts::cuda>({7, 9});
  ts::matmul(a.to<ts::cuda>(), b.to<ts::cuda>(), dev.transpose(0, 1));
  expect_close(dev.to<ts::cpu>(), host, 0, 0, "matmul into a transposed view");
}

TEST_F(CudaGemmOps, ShapeErrorsAreThrownBeforeAnyLaunch) {
  const auto a = ts::zeros<float, ts::cuda>({3, 4}), b = ts::zeros<float, ts::cuda>({5, 6});
  EXPECT_THROW(ts::matmul(a, b), ts::shape_error);
}

// ---------------------------------------------------------------------------------------------
// Optimizer updates: several steps on the device against the same steps on the CPU.

template <class T>
class CudaOptim : public CudaFixture {};
using OptimDtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CudaOptim, OptimDtypes);

template <class T>
double optim_rtol() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-14;
}

/// The absolute part of the bound: a few roundings at the operands' scale (about 1), not the
/// result's. nvcc contracts w - lr * g into one fused multiply-add where the CPU rounds twice, so
/// where the update cancels most of w (a result near 0) the two differ by about one rounding of
/// w: seen on an H200, 1.3e-9 on a float result of 2.5e-5, far past 1e-6 relative to it.
template <class T>
double optim_atol() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-12;
}

// The multi-tensor steps on CUDA: 20 tensors of 1 to 2900 elements (blocks of 1024 and
// tails) against the CPU's multi-tensor step; one entry at a later step than the others, so two
// flag combinations: SGD in 3 launches (16 + 3 of one, 1 of the other), Adam in 2 (16 + 4).
TYPED_TEST(CudaOptim, MultiTensorStepsMatchCpuInFewLaunches) {
  using T = TypeParam;
  namespace d = ts::detail;
  constexpr int count = 20;
  std::vector<HostT<T>> w, buf, g, m, v;
  std::vector<DevT<T>> dw, dbuf, dg, dm, dv;
  for (int i = 0; i < count; ++i) {
    const int64_t n = 1 + 151 * i;
    w.push_back(sample<T>({n}, 900 + i)), g.push_back(sample<T>({n}, 950 + i));
    buf.push_back(sample<T>({n}, 1000 + i));
    m.push_back(sample<T>({n}, 1050 + i)), v.push_back(ts::abs(sample<T>({n}, 1100 + i)));
    dw.push_back(w.back().template to<ts::cuda>()), dg.push_back(g.back().template to<ts::cuda>());
    dbuf.push_back(buf.back().template to<ts::cuda>());
    dm.push_back(m.back().template to<ts::cuda>()), dv.push_back(v.back().template to<ts::cuda>());
  }
  const ts::SGDStepOptions so{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
  std::vector<ts::SGDStepTensors<T, ts::cpu>> host;
  std::vector<ts::SGDStepTensors<T, ts::cuda>> dev;
  for (int i = 0; i < count; ++i) {
    host.push_back({w[i], g[i], buf[i], i != 7});
    dev.push_back({dw[i], dg[i], dbuf[i], i != 7});
  }
  ts::sgd_step(std::span<const ts::SGDStepTensors<T, ts::cpu>>(host), so);
  const int64_t before = d::cuda_optim_batches().load();
  ts::sgd_step(std::span<const ts::SGDStepTensors<T, ts::cuda>>(dev), so);
  EXPECT_EQ(d::cuda_optim_batches().load() - before, 3) << "sgd launches";
  for (int i = 0; i < count; ++i) {
    expect_close(dw[i].template to<ts::cpu>(), w[i], optim_rtol<T>(), optim_atol<T>(),
                 "multi sgd param " + std::to_string(i));
    expect_close(dbuf[i].template to<ts::cpu>(), buf[i], optim_rtol<T>(), optim_atol<T>(),
                 "multi sgd buffer " + std::to_string(i));
  }
  const ts::AdamStepOptions ao{.lr = 1e-2, .weight_decay = 1e-2, .decoupled_weight_decay = true};
  std::vector<ts::AdamStepTensors<T, ts::cpu>> adam_host;
  std::vector<ts::AdamStepTensors<T, ts::cuda>> adam_dev;
  for (int i = 0; i < count; ++i) {
    adam_host.push_back({w[i], g[i], m[i], v[i], {}, 1 + i % 3});
    adam_dev.push_back({dw[i], dg[i], dm[i], dv[i], {}, 1 + i % 3});
  }
  ts::adam_step(std::span<const ts::AdamStepTensors<T, ts::cpu>>(adam_host), ao);
  const int64_t adam_before = d::cuda_optim_batches().load();
  ts::adam_step(std::span<const ts::AdamStepTensors<T, ts::cuda>>(adam_dev), ao);
  EXPECT_EQ(d::cuda_optim_batches().load() - adam_before, 2) << "adam launches";
  for (int i = 0; i < count; ++i) {
    expect_close(dw[i].template to<ts::cpu>(), w[i], optim_rtol<T>(), optim_atol<T>(),
                 "multi adam param " + std::to_string(i));
    expect_close(dm[i].template to<ts::cpu>(), m[i], optim_rtol<T>(), optim_atol<T>(),
                 "multi adam exp_avg " + std::to_string(i));
    expect_close(dv[i].template to<ts::cpu>(), v[i], optim_rtol<T>(), optim_atol<T>(),
                 "multi adam exp_avg_sq " + std::to_string(i));
  }
}

TYPED_TEST(CudaOptim, SgdMatchesCpuForEveryFlagCombination) {
  using T = TypeParam;
  const ts::SGDStepOptions cases[] = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true},
      {.lr = 0.02, .momentum = 0.5, .maximize = true}};
  int c = 0;
  for (const auto& o : cases) {
    const int64_t n = 1000 + 37 * c;  // not a multiple of any block
    auto w = sample<T>({n}, 60 + c), buf = ts::zeros<T, ts::cpu>({n});
    auto dw = w.template to<ts::cuda>(), dbuf = buf.template to<ts::cuda>();
    for (int step = 0; step < 4; ++step) {
      const auto g = sample<T>({n}, 100 * c + step);
      ts::sgd_step(w, g, o.momentum > 0 ? buf : HostT<T>(), o, step == 0);
      ts::sgd_step(dw, g.template to<ts::cuda>(), o.momentum > 0 ? dbuf : DevT<T>(), o, step == 0);
    }
    const std::string what = "sgd case " + std::to_string(c);
    expect_close(dw.template to<ts::cpu>(), w, optim_rtol<T>(), optim_atol<T>(), what + " param");
    if (o.momentum > 0)
      expect_close(dbuf.template to<ts::cpu>(), buf, optim_rtol<T>(), optim_atol<T>(),
                   what + " buffer");
    ++c;
  }
}

TYPED_TEST(CudaOptim, AdamAndAdamWMatchCpu) {
  using T = TypeParam;
  const ts::AdamStepOptions cases[] = {
      {.lr = 1e-2},
      {.lr = 1e-2, .weight_decay = 1e-2},
      {.lr = 1e-2, .weight_decay = 1e-2, .decoupled_weight_decay = true},
      {.lr = 1e-2, .amsgrad = true}};
  int c = 0;
  for (const auto& o : cases) {
    const int64_t n = 777 + c;
    auto w = sample<T>({n}, 70 + c), m = ts::zeros<T, ts::cpu>({n}), v = ts::zeros<T, ts::cpu>({n}),
         vmax = ts::zeros<T, ts::cpu>({n});
    auto dw = w.template to<ts::cuda>(), dm = m.template to<ts::cuda>(),
         dv = v.template to<ts::cuda>(), dvmax = vmax.template to<ts::cuda>();
    for (int step = 1; step <= 4; ++step) {
      const auto g = sample<T>({n}, 200 * c + step);
      ts::adam_step(w, g, m, v, o.amsgrad ? vmax : HostT<T>(), step, o);
      ts::adam_step(dw, g.template to<ts::cuda>(), dm, dv, o.amsgrad ? dvmax : DevT<T>(), step, o);
    }
    const std::string what = "adam case " + std::to_string(c);
    expect_close(dw.template to<ts::cpu>(), w, optim_rtol<T>(), optim_atol<T>(), what + " param");
    expect_close(dm.template to<ts::cpu>(), m, optim_rtol<T>(), optim_atol<T>(), what + " exp_avg");
    expect_close(dv.template to<ts::cpu>(), v, optim_rtol<T>(), optim_atol<T>(),
                 what + " exp_avg_sq");
    ++c;
  }
}

}  // namespace
