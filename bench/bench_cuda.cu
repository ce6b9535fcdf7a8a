// bench_cuda - tessera's CUDA kernels next to the CUDA toolkit's libraries on the same inputs, in
// one binary, on one GPU (docs/benchmarks.md, "CUDA"). Names (Google Benchmark appends
// /manual_time):
//
//   ceiling/copy_d2d/<MiB>            cudaMemcpyAsync device to device: the bandwidth ceiling
//   stream/<op>/tessera/<MiB>         map(a*x+b) into a preallocated output, sum over everything
//   gemm_<type>/<impl>/<m>x<k>x<n>    C = A·B, row-major operands; impl tessera or cublas
//                                     (cublasGemmEx; fp8 through cublasLt, B given as Bᵀ
//                                     row-major because cublasLt's fp8 wants the TN layout);
//                                     for tf32, fp16 and bf16 squares also tessera_staged: the
//                                     register-staged tensor-core kernel, with the cp.async
//                                     pipelines (which tessera rows use) switched off; for tf32,
//                                     fp16, bf16, int8 and fp8 squares also tessera_mma: the
//                                     mma.sync kernel where tessera rows run wgmma (built for
//                                     sm_90a; tf32 B packed k-contiguous first); for
//                                     tf32, fp16, bf16, int8 and fp8 squares also tessera_cp_async:
//                                     the wgmma kernel fed by cp.async from every thread where
//                                     tessera rows feed it by TMA (gemm_wgmma_tma.cuh), and
//                                     tessera_narrow: TMA-fed with 128 x 128 tiles only (where
//                                     tessera rows may take 128 x 256 ones), and
//                                     tessera_linear_order: TMA-fed with tiles in linear rather
//                                     than grouped order (cuda_grouped_tile); for
//                                     tf32, fp16 and bf16 squares also tessera_wmma: the WMMA
//                                     pipeline where tessera rows run mma.sync; for int8 and fp8
//                                     squares also tessera_staged (the register-staged WMMA
//                                     kernel: for fp8 the exact fp16 route, where tessera rows run
//                                     fp8 wgmma or mma.sync); for int8 and tf32 squares also
//                                     tessera_tn: B handed over k-contiguous (the transposed view
//                                     of a copy of Bᵀ, the same values), which the pipelined
//                                     kernels read in place where tessera rows first pack B
//                                     (int8; tf32 on wgmma), or read by ldmatrix rather than
//                                     32-bit loads (tf32 on mma.sync)
//
// Types: fp32 (SIMT), tf32 (float in and out; tessera under set_float32_matmul_precision(high),
// cuBLAS with CUBLAS_COMPUTE_32F_FAST_TF32), fp16 and bf16 (fp16/bf16 out, float accumulation),
// int8 (int32 out), fp8 e4m3 (float out). Before timing, every tessera GEMM is checked against
// cuBLAS on the same random inputs (fp8: against cuBLAS's float product of the widened operands;
// output poisoned with NaN / a sentinel first): ‖tessera − cublas‖ / ‖cublas‖ is reported as the
// counter rel_err and a benchmark whose error exceeds its type's bound fails with an error message.
// Timing: device events around each call, after a warm-up call; the time Google Benchmark reports
// is the mean of the iterations, the counter median_us their median, and TFLOP/s or GB/s is
// computed from the median. Without a GPU the program says so and exits 0.
#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_bench.cuh"

namespace {
using namespace cuda_bench;
using cuda_bench::check;  // overloaded below for the library's status type

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
}

cublasHandle_t blas() {
  static cublasHandle_t h = [] {
    cublasHandle_t x;
    check(cublasCreate(&x), "cublasCreate");
    check(cublasSetStream(x, ts::cuda_stream()), "cublasSetStream");
    return x;
  }();
  return h;
}

// ---------------------------------------------------------------------------------------------
// Bandwidth: the copy ceiling, map and sum.

constexpr int64_t stream_floats = int64_t{256} << 20;  // 1 GiB: far past the L2 cache

DevT<float> stream_input() {
  ts::Generator g(7);
  return ts::randn<float, ts::cpu>({stream_floats}, g).to<ts::cuda>();
}

void set_bandwidth(benchmark::State& st, double bytes) {
  st.counters["GB/s"] = bytes / (st.counters["median_us"] * 1e-6) / 1e9;
}

void bm_copy(benchmark::State& st) {
  const auto x = stream_input();
  DevT<float> y({stream_floats});
  const size_t bytes = static_cast<size_t>(stream_floats) * sizeof(float);
  time_calls(st, [&] {
    check(cudaMemcpyAsync(y.data(), x.data(), bytes, cudaMemcpyDeviceToDevice, ts::cuda_stream()),
          "cudaMemcpyAsync");
  });
  set_bandwidth(st, 2.0 * bytes);  // read + write
}

struct axpb {
  float a, b;
  __host__ __device__ float operator()(float v) const { return a * v + b; }
};

void bm_map(benchmark::State& st) {
  const auto x = stream_input();
  DevT<float> y({stream_floats});
  time_calls(st, [&] { ts::map_to(y, axpb{2.0f, 1.0f}, x); });
  const auto got = y.slice(0, 0, 4).to<ts::cpu>().to_vector();
  const auto in = x.slice(0, 0, 4).to<ts::cpu>().to_vector();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - (2 * in[i] + 1)) > 1e-6f * (1 + std::fabs(got[i])))
      st.SkipWithError("map(a*x+b) gave a wrong value");
  set_bandwidth(st, 2.0 * static_cast<double>(stream_floats) * sizeof(float));
}

void bm_sum(benchmark::State& st) {
  const auto x = stream_input();
  time_calls(st, [&] { benchmark::DoNotOptimize(ts::sum(x)); });
  set_bandwidth(st, static_cast<double>(stream_floats) * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// GEMM.

enum class kind { fp32, tf32, fp16, bf16, int8, fp8 };

struct gemm_case {
  kind k;
  const char* name;
  double tol;  // bound on rel_err against cuBLAS
};

template <kind K>
struct gemm_types;
template <>
struct gemm_types<kind::fp32> {
  using in = float;
  using out = float;
};
template <>
struct gemm_types<kind::tf32> : gemm_types<kind::fp32> {};
template <>
struct gemm_types<kind::fp16> {
  using in = ts::half;
  using out = ts::half;
};
template <>
struct gemm_types<kind::bf16> {
  using in = ts::bfloat16;
  using out = ts::bfloat16;
};
template <>
struct gemm_types<kind::int8> {
  using in = int8_t;
  using out = int32_t;
};
template <>
struct gemm_types<kind::fp8> {
  using in = ts::float8_e4m3;
  using out = float;
};

template <class T>
DevT<T> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  ts::Generator g(seed);
  if constexpr (std::is_same_v<T, int8_t>)
    return ts::randint<int8_t, ts::cpu>(-128, 128, {rows, cols}, g).to<ts::cuda>();
  else
    return ts::randn<float, ts::cpu>({rows, cols}, g).astype<T>().template to<ts::cuda>();
}

/// The operands of one product: A [m, k], B [k, n] and, for fp8, Bᵀ [n, k] (B is then its
/// transposed view, the same values).
template <kind K>
struct gemm_inputs {
  using in = typename gemm_types<K>::in;
  using out = typename gemm_types<K>::out;
  int64_t m, k, n;
  DevT<in> a, b, bt;
  gemm_inputs(int64_t m_, int64_t k_, int64_t n_) : m(m_), k(k_), n(n_) {
    a = random_matrix<in>(m, k, 1000 + m + k);
    if constexpr (K == kind::fp8) {
      bt = random_matrix<in>(n, k, 2000 + n + k);
      b = bt.transpose(0, 1);
    } else {
      b = random_matrix<in>(k, n, 2000 + n + k);
    }
  }
};

cudaDataType_t cuda_type(kind k, bool output) {
  switch (k) {
    case kind::fp32:
    case kind::tf32:
      return CUDA_R_32F;
    case kind::fp16:
      return CUDA_R_16F;
    case kind::bf16:
      return CUDA_R_16BF;
    case kind::int8:
      return output ? CUDA_R_32I : CUDA_R_8I;
    case kind::fp8:
      return output ? CUDA_R_32F : CUDA_R_8F_E4M3;
  }
  return CUDA_R_32F;
}

/// c = a·b through cuBLAS. Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: the operands swap.
template <kind K>
void cublas_gemm(const gemm_inputs<K>& in, const DevT<typename gemm_types<K>::out>& c) {
  const int m = int(in.m), n = int(in.n), k = int(in.k);
  if constexpr (K == kind::fp8) {
    // cublasLt's fp8 product wants op(A) = T, op(B) = N: A' = Bᵀ stored [n, k] row-major is the
    // column-major [k x n] matrix transposed; B' = A row-major [m, k] is column-major [k x m].
    static cublasLtHandle_t lt = [] {
      cublasLtHandle_t h;
      check(cublasLtCreate(&h), "cublasLtCreate");
      return h;
    }();
    static void* workspace = [] {
      void* p;
      check(cudaMalloc(&p, size_t{32} << 20), "cudaMalloc");
      return p;
    }();
    cublasLtMatmulDesc_t op;
    check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
          "TRANSA");
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
          "TRANSB");
    cublasLtMatrixLayout_t la, lb, lc;
    check(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, n, k), "layout A");
    check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, m, k), "layout B");
    check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, n), "layout C");
    const float alpha = 1, beta = 0;
    check(cublasLtMatmul(lt, op, &alpha, in.bt.data(), la, in.a.data(), lb, &beta, c.data(), lc,
                         c.data(), lc, nullptr, workspace, size_t{32} << 20, ts::cuda_stream()),
          "cublasLtMatmul fp8");
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
  } else if constexpr (K == kind::int8) {
    const int32_t alpha = 1, beta = 0;
    check(cublasGemmEx(blas(), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, in.b.data(), CUDA_R_8I, n,
                       in.a.data(), CUDA_R_8I, k, &beta, c.data(), CUDA_R_32I, n,
                       CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx int8");
  } else {
    const float alpha = 1, beta = 0;
    const cublasComputeType_t compute =
        K == kind::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    check(cublasGemmEx(blas(), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, in.b.data(),
                       cuda_type(K, false), n, in.a.data(), cuda_type(K, false), k, &beta, c.data(),
                       cuda_type(K, true), n, compute, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  }
}

/// The fp8 rows' reference: the product of the operands widened to float (exactly: every fp8
/// value is a float), by cuBLAS's float GEMM (full float accumulation, no tf32). fp8 products are
/// checked against it rather than against cuBLAS's fp8 GEMM, whose own accumulation on Hopper's
/// tensor cores keeps fewer bits than float: the cublas row reports its error from the same
/// reference (counter rel_err), so both are measured against one exact-to-rounding answer.
template <kind K>
DevT<float> widened_reference(const gemm_inputs<K>& in) {
  const auto a = in.a.template astype<float>().contiguous();
  const auto b = in.b.template astype<float>().contiguous();
  auto c = poisoned<float>({in.m, in.n});
  const float alpha = 1, beta = 0;
  const int m = int(in.m), n = int(in.n), k = int(in.k);
  check(cublasGemmEx(blas(), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b.data(), CUDA_R_32F, n,
                     a.data(), CUDA_R_32F, k, &beta, c.data(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx float reference");
  return c;
}

/// Which implementation a GEMM row times. tessera: the default kernel choice; tessera_mma: the
/// mma.sync kernel where the wgmma one would run (built for sm_90a; elsewhere the same kernel
/// as tessera); tessera_wmma: the WMMA pipeline where the mma.sync kernel would run (tf32, fp16,
/// bf16); tessera_staged: the register-staged kernel (pipelines off); tessera_tn: the default
/// choice with B given k-contiguous (int8, and tf32 on wgmma: no pack; tf32 on mma.sync: B's
/// fragments by ldmatrix rather than 32-bit loads); tessera_whole_k: the default choice with k
/// never split (what the split gains on products with few tiles, gemm_split.cuh);
/// tessera_cp_async: the wgmma kernel without its TMA feed (what TMA gains); tessera_narrow: the
/// TMA feed with 128 x 128 tiles only (what the 128 x 256 ones gain); tessera_linear_order: the
/// TMA feed with its tiles in linear order (what the grouped order gains); tessera_long_tiles:
/// the SIMT kernel's 128-row tiles where its 64-row ones run (fp32 products of at most 64 rows:
/// what the short tiles gain).
enum class impl {
  tessera,
  tessera_cp_async,
  tessera_narrow,
  tessera_linear_order,
  tessera_mma,
  tessera_wmma,
  tessera_staged,
  tessera_tn,
  tessera_whole_k,
  tessera_long_tiles,
  cublas
};

template <kind K>
void bm_gemm(benchmark::State& st, impl who, int64_t m, int64_t k, int64_t n, double tol) {
  using out = typename gemm_types<K>::out;
  // Kept for the shape's next row (kept_for): drawing 8192 x 8192 operands takes longer than
  // timing their product.
  const auto& in =
      kept_for<gemm_inputs<K>>("gemm " + std::to_string(int(K)) + ":" + std::to_string(m) + "x" +
                                   std::to_string(k) + "x" + std::to_string(n),
                               m, k, n);
  auto c = poisoned<out>({m, n});
  if (who != impl::cublas) {
    // The kernel switches for this row only.
    struct kernel_scope {
      using pipeline = ts::detail::cuda_gemm_pipeline;
      explicit kernel_scope(impl who) {
        ts::detail::cuda_gemm_start_at(who == impl::tessera_mma      ? pipeline::mma_sync
                                       : who == impl::tessera_wmma   ? pipeline::wmma
                                       : who == impl::tessera_staged ? pipeline::none
                                                                     : pipeline::wgmma);
      }
      ~kernel_scope() { ts::detail::cuda_gemm_start_at(pipeline::wgmma); }
    } const kernels(who);
    struct tma_scope {  // the wgmma kernel's TMA feed, off for tessera_cp_async rows
      explicit tma_scope(bool on) { ts::detail::cuda_wgmma_tma_choice().enabled = on; }
      ~tma_scope() { ts::detail::cuda_wgmma_tma_choice().enabled = true; }
    } const feed(who != impl::tessera_cp_async);
    struct wide_scope {  // the TMA feed's 128 x 256 tiles, off for tessera_narrow rows
      explicit wide_scope(bool on) { ts::detail::cuda_wgmma_tma_wide_choice().enabled = on; }
      ~wide_scope() { ts::detail::cuda_wgmma_tma_wide_choice().enabled = true; }
    } const width(who != impl::tessera_narrow);
    struct order_scope {  // the TMA feed's tile order, linear for tessera_linear_order rows
      int32_t saved = ts::detail::cuda_tile_group_rows();
      explicit order_scope(bool grouped) {
        if (!grouped) ts::detail::cuda_tile_group_rows() = 1;
      }
      ~order_scope() { ts::detail::cuda_tile_group_rows() = saved; }
    } const order(who != impl::tessera_linear_order);
    struct short_scope {  // the SIMT kernel's 64-row tiles, off for tessera_long_tiles rows
      explicit short_scope(bool on) { ts::detail::cuda_gemm_simt_short_choice().enabled = on; }
      ~short_scope() { ts::detail::cuda_gemm_simt_short_choice().enabled = true; }
    } const short_tiles(who != impl::tessera_long_tiles);
    const split_scope split(who == impl::tessera_whole_k ? 1 : 0);
    // tf32 is tessera's float product under matmul_precision::high (restored on the way out).
    const precision_scope scope(K == kind::tf32 ? ts::matmul_precision::high
                                                : ts::get_float32_matmul_precision());
    const auto b =
        who == impl::tessera_tn ? in.b.transpose(0, 1).contiguous().transpose(0, 1) : in.b;
    // Checked first, against cuBLAS on the same inputs (fp8: on the widened operands).
    auto ref = poisoned<out>({m, n});
    if constexpr (K == kind::fp8)
      ref = widened_reference(in);
    else
      cublas_gemm(in, ref);
    ts::matmul(in.a, b, c);
    if (!within(st, rel_err(c, ref), tol, K == kind::fp8 ? "the float product" : "cuBLAS")) return;
    time_calls(st, [&] { ts::matmul(in.a, b, c); });
  } else {
    if constexpr (K == kind::fp8) {  // cuBLAS's own error, reported, not bounded
      cublas_gemm(in, c);
      st.counters["rel_err"] = rel_err(c, widened_reference(in));
    }
    time_calls(st, [&] { cublas_gemm(in, c); });
  }
  st.counters["TFLOP/s"] = 2.0 * m * n * k / (st.counters["median_us"] * 1e-6) / 1e12;
}

/// Rows for tessera and cuBLAS; with variants, also tessera's other kernels for K (the WMMA
/// pipeline for tf32 / fp16 / bf16, the register-staged kernel for the pipelined kinds and int8)
/// and, for int8 and tf32, B given k-contiguous; with whole_k, tessera with k never split; fp32
/// products of at most 64 rows also on the SIMT kernel's 128-row tiles.
template <kind K>
void add_gemm(const char* type, int64_t m, int64_t k, int64_t n, double tol, int iterations,
              bool variants = false, bool whole_k = false) {
  const std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  constexpr bool has_mma = K == kind::tf32 || K == kind::fp16 || K == kind::bf16;
  constexpr bool has_tn = K == kind::int8 || K == kind::tf32;
  // Kinds where tessera rows (B row-major) run wgmma when built for sm_90a.
  constexpr bool has_wgmma =
      K == kind::tf32 || K == kind::fp16 || K == kind::bf16 || K == kind::int8 || K == kind::fp8;
  for (impl who :
       {impl::tessera, impl::tessera_cp_async, impl::tessera_narrow, impl::tessera_linear_order,
        impl::tessera_mma, impl::tessera_wmma, impl::tessera_staged, impl::tessera_tn,
        impl::tessera_whole_k, impl::tessera_long_tiles, impl::cublas}) {
    if ((who == impl::tessera_whole_k && !whole_k) || (who == impl::tessera_staged && !variants) ||
        (who == impl::tessera_long_tiles && !(K == kind::fp32 && m <= 64)) ||
        ((who == impl::tessera_cp_async || who == impl::tessera_narrow ||
          who == impl::tessera_linear_order) &&  // the TMA feed takes every wgmma kind
         !(variants && has_wgmma)) ||
        (who == impl::tessera_mma && !(variants && has_wgmma)) ||
        (who == impl::tessera_wmma && !(variants && has_mma)) ||
        (who == impl::tessera_tn && !(variants && has_tn)))
      continue;
    const char* name = who == impl::tessera                ? "/tessera/"
                       : who == impl::tessera_cp_async     ? "/tessera_cp_async/"
                       : who == impl::tessera_narrow       ? "/tessera_narrow/"
                       : who == impl::tessera_linear_order ? "/tessera_linear_order/"
                       : who == impl::tessera_mma          ? "/tessera_mma/"
                       : who == impl::tessera_wmma         ? "/tessera_wmma/"
                       : who == impl::tessera_staged       ? "/tessera_staged/"
                       : who == impl::tessera_tn           ? "/tessera_tn/"
                       : who == impl::tessera_whole_k      ? "/tessera_whole_k/"
                       : who == impl::tessera_long_tiles   ? "/tessera_long_tiles/"
                                                           : "/cublas/";
    add_timed(std::string("gemm_") + type + name + shape, iterations,
              [=](benchmark::State& st) { bm_gemm<K>(st, who, m, k, n, tol); });
  }
}

template <kind K>
void add_gemm_squares(const char* type, double tol) {
  constexpr bool pipelined =
      K == kind::tf32 || K == kind::fp16 || K == kind::bf16 || K == kind::int8 || K == kind::fp8;
  for (int64_t s : {1024, 4096, 8192})
    add_gemm<K>(type, s, s, s, tol, s >= 8192 ? 10 : 50, pipelined);
}

/// Registers every benchmark of this program (called only when a GPU is visible).
void add_benchmarks() {
  const std::string mib = std::to_string(stream_floats * 4 >> 20);
  add_timed("ceiling/copy_d2d/" + mib, 50, bm_copy);
  add_timed("stream/map_axpb/tessera/" + mib, 50, bm_map);
  add_timed("stream/sum/tessera/" + mib, 50, bm_sum);

  // Bounds on ‖tessera − cuBLAS‖ / ‖cuBLAS‖: float-sum order for float results, the output's
  // rounding for 16-bit results (both round the same float sums), exact for int8; tf32 allows
  // for cuBLAS rounding its inputs to tf32 differently (up to 2^-11 relative per input).
  add_gemm_squares<kind::fp32>("fp32", 1e-5);
  add_gemm_squares<kind::tf32>("tf32", 2e-3);
  add_gemm_squares<kind::fp16>("fp16", 2e-3);
  add_gemm_squares<kind::bf16>("bf16", 1e-2);
  add_gemm_squares<kind::int8>("int8", 0);
  // fp8: against the float product of the widened operands. Hopper's fp8 tensor cores add with
  // fewer bits than float: cuBLAS's own product measured 1.26e-4 from it on an H200 at every size.
  add_gemm_squares<kind::fp8>("fp8e4m3", 2e-4);
  // The ML shapes of the matmul benchmarks (batch 64 MLP / CNN layers), with k whole beside the
  // default (few tiles: these are the products the split is for).
  for (const auto& s : {std::array<int64_t, 3>{64, 784, 256}, std::array<int64_t, 3>{64, 3136, 128},
                        std::array<int64_t, 3>{64, 256, 10}}) {
    add_gemm<kind::fp32>("fp32", s[0], s[1], s[2], 1e-5, 200, false, true);
    add_gemm<kind::bf16>("bf16", s[0], s[1], s[2], 1e-2, 200, false, true);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return cuda_bench::run_main(argc, argv, "bench_cuda", add_benchmarks);
}
