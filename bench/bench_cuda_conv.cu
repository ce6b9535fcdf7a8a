// bench_cuda_conv - tessera's CUDA convolution next to cuDNN's, in one binary, on the same
// inputs and GPU (docs/benchmarks.md, "CUDA"): the shape set of bench_conv (the convolution
// issue's: LeNet, ResNet, VGG, strided and depthwise layers), forward, backward data and
// backward filter. Names (Google Benchmark appends /manual_time):
//
//   conv_<pass>/<math>/<impl>/<shape>   pass fwd | bwd_data | bwd_filter;
//                                       math fp32 | tf32 | fp16 | bf16;
//                                       impl tessera | tessera_planar | tessera_whole_k |
//                                            tessera_split32 | tessera_lowered |
//                                            tessera_winograd | cudnn
//
// tessera_planar (tf32, fp16 and bf16 forward and input gradient): the implicit GEMM on planar
// (NCHW) images through the register-staged kernel, with the pipelined kernels switched off;
// tessera then runs the channels-last implicit GEMM on them where the channels allow (16 bytes
// per group). tessera_whole_k (forward and weight gradient of lenet2, resnet14, stride2, whose
// products have few tiles): the default kernels with k never split (gemm_split.cuh).
// tessera_split32 (fp32 weight gradients of lenet1 and lenet2, the Fashion-MNIST CNN's two
// convolutions): k in 32 parts, what the split chose on an H100 before its cap of 32 parts went
// (2026-11-25; it now asks for 132 and 44): the default rows against these are its figure.
// tessera_lowered (weight gradient): implicit GEMM switched off, so the input is lowered into a
// column matrix in device memory and dy regrouped beside it, then one GEMM per chunk of images:
// what the implicit weight gradients (SIMT for fp32, the tensor-core kernel for the others) gain;
// (input gradient of the strided layer) W^T dy into a column matrix and col2im: what the
// per-stride-phase implicit GEMMs gain.
// tessera_winograd (fp32 passes of the 3x3 stride-1 layers of one group and at least 16 channels
// in and out): under set_float32_conv_algorithm(winograd), Winograd F(4x4, 3x3) forward and input
// gradient, F(3x3, 4x4) weight gradient (winograd.cuh), for comparison with cuDNN's Winograd
// algorithms where cudnnFind* picks them.
//
// math fp32: float inputs and products (tessera's default; cuDNN with CUDNN_FMA_MATH, which
// keeps it off the tensor cores); tf32: tessera under set_float32_matmul_precision(high), cuDNN
// with CUDNN_DEFAULT_MATH (tf32 tensor cores on sm_80+); fp16 / bf16: half or bfloat16 tensors
// (inputs, weights and outputs; NCHW for both libraries), products accumulated in float
// (cuDNN's pseudo-half configurations, with CUDNN_TENSOR_OP_MATH). cuDNN's algorithm for each
// case and pass is the fastest that cudnnFind* measured (on the pass's first row), with one
// workspace for the case; its name is the label of cuDNN's rows. Before timing, every tessera
// result is checked against cuDNN's on the same inputs (outputs poisoned first): the counter
// rel_err, and a benchmark beyond its bound fails with a message. Counters: median_us,
// TFLOP/s (2 * n * k * c/groups * r * s * ho * wo per pass). Without a GPU the program says so
// and exits 0.
#include <cudnn.h>

#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "conv_shapes.hpp"
#include "cuda_bench.cuh"

namespace {
using namespace cuda_bench;
using cuda_bench::check;  // overloaded below for the library's status type

void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(s));
}

using bench::conv_shape;  // the shape set of bench_conv (conv_shapes.hpp)

enum class pass { fwd, bwd_data, bwd_filter };
const char* pass_name(pass p) {
  return p == pass::fwd ? "fwd" : p == pass::bwd_data ? "bwd_data" : "bwd_filter";
}

cudnnHandle_t dnn() {
  static cudnnHandle_t h = [] {
    cudnnHandle_t x;
    check(cudnnCreate(&x), "cudnnCreate");
    check(cudnnSetStream(x, ts::cuda_stream()), "cudnnSetStream");
    return x;
  }();
  return h;
}

enum class math { fp32, tf32, fp16, bf16 };
const char* math_name(math m) {
  return m == math::fp32 ? "fp32" : m == math::tf32 ? "tf32" : m == math::fp16 ? "fp16" : "bf16";
}

/// cuDNN's name for the element type T.
template <class T>
cudnnDataType_t cudnn_type() {
  if constexpr (std::is_same_v<T, ts::half>)
    return CUDNN_DATA_HALF;
  else if constexpr (std::is_same_v<T, ts::bfloat16>)
    return CUDNN_DATA_BFLOAT16;
  else
    return CUDNN_DATA_FLOAT;
}

/// Random normals of shape s as T on the device (drawn in float, then rounded).
template <class T>
DevT<T> random_tensor(const ts::Shape& s, ts::Generator& g) {
  return ts::randn<float, ts::cpu>(s, g).astype<T>().template to<ts::cuda>();
}

/// One shape's inputs (random normals) of element type T and cuDNN's descriptors, algorithms and
/// workspace for one math mode.
template <class T>
struct conv_case {
  conv_shape sh;
  DevT<T> x, w, dy;
  cudnnTensorDescriptor_t xd{}, yd{};
  cudnnFilterDescriptor_t wd{};
  cudnnConvolutionDescriptor_t cd{};
  // cuDNN's choices, made on each pass's first row (choose_algorithm).
  mutable bool chosen[3] = {false, false, false};
  mutable cudnnConvolutionFwdAlgo_t fwd_algo{};
  mutable cudnnConvolutionBwdDataAlgo_t data_algo{};
  mutable cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  mutable void* workspace = nullptr;
  mutable size_t workspace_bytes = 0;

  conv_case(const conv_shape& s, math m) : sh(s) {
    ts::Generator g(11 + s.c + s.k);
    x = random_tensor<T>({s.n, s.c, s.h, s.w}, g);
    w = random_tensor<T>(s.w_shape(), g);
    dy = random_tensor<T>({s.n, s.k, s.ho(), s.wo()}, g);
    const cudnnDataType_t type = cudnn_type<T>();
    check(cudnnCreateTensorDescriptor(&xd), "tensor descriptor");
    check(cudnnCreateTensorDescriptor(&yd), "tensor descriptor");
    check(cudnnCreateFilterDescriptor(&wd), "filter descriptor");
    check(cudnnCreateConvolutionDescriptor(&cd), "convolution descriptor");
    check(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, type, int(s.n), int(s.c), int(s.h),
                                     int(s.w)),
          "x descriptor");
    check(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, type, int(s.n), int(s.k), int(s.ho()),
                                     int(s.wo())),
          "y descriptor");
    check(cudnnSetFilter4dDescriptor(wd, type, CUDNN_TENSOR_NCHW, int(s.k), int(s.c / s.groups),
                                     int(s.r), int(s.s)),
          "w descriptor");
    check(cudnnSetConvolution2dDescriptor(cd, int(s.pad), int(s.pad), int(s.stride), int(s.stride),
                                          1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "convolution descriptor");
    // The products accumulate in float (CUDNN_DATA_FLOAT above) for every element type.
    check(cudnnSetConvolutionGroupCount(cd, int(s.groups)), "group count");
    check(cudnnSetConvolutionMathType(cd, m == math::fp32   ? CUDNN_FMA_MATH
                                          : m == math::tf32 ? CUDNN_DEFAULT_MATH
                                                            : CUDNN_TENSOR_OP_MATH),
          "math type");
  }
  ~conv_case() {
    if (workspace) cudaFree(workspace);
    cudnnDestroyConvolutionDescriptor(cd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyTensorDescriptor(xd);
  }
  conv_case(const conv_case&) = delete;
  conv_case& operator=(const conv_case&) = delete;

  /// The fastest algorithm of pass p as cudnnFind* measures it (first successful result), found
  /// on the pass's first row (a forward-only run finds no backward algorithms), and a workspace
  /// large enough for every pass found so far.
  void choose_algorithm(pass p) const {
    if (chosen[int(p)]) return;
    constexpr int kMax = 16;
    int found = 0;
    size_t bytes = 0;
    if (p == pass::fwd) {
      cudnnConvolutionFwdAlgoPerf_t f[kMax];
      check(cudnnFindConvolutionForwardAlgorithm(dnn(), xd, wd, cd, yd, kMax, &found, f),
            "find forward algorithm");
      fwd_algo = first_ok(f, found, "forward").algo;
      check(cudnnGetConvolutionForwardWorkspaceSize(dnn(), xd, wd, cd, yd, fwd_algo, &bytes), "ws");
    } else if (p == pass::bwd_data) {
      cudnnConvolutionBwdDataAlgoPerf_t d[kMax];
      check(cudnnFindConvolutionBackwardDataAlgorithm(dnn(), wd, yd, cd, xd, kMax, &found, d),
            "find backward data algorithm");
      data_algo = first_ok(d, found, "backward data").algo;
      check(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn(), wd, yd, cd, xd, data_algo, &bytes),
            "ws");
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t b[kMax];
      check(cudnnFindConvolutionBackwardFilterAlgorithm(dnn(), xd, yd, cd, wd, kMax, &found, b),
            "find backward filter algorithm");
      filter_algo = first_ok(b, found, "backward filter").algo;
      check(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn(), xd, yd, cd, wd, filter_algo,
                                                           &bytes),
            "ws");
    }
    if (bytes > workspace_bytes) {
      if (workspace) check(cudaFree(workspace), "cudaFree workspace");
      workspace = nullptr;
      check(cudaMalloc(&workspace, bytes), "cudaMalloc workspace");
      workspace_bytes = bytes;
    }
    chosen[int(p)] = true;
  }
  template <class Perf>
  static const Perf& first_ok(const Perf* p, int found, const char* what) {
    for (int i = 0; i < found; ++i)
      if (p[i].status == CUDNN_STATUS_SUCCESS) return p[i];
    throw std::runtime_error(std::string("cuDNN found no ") + what + " algorithm");
  }

  /// The name of the algorithm cudnnFind* chose for pass p (the enumerators without their
  /// prefix), the label of cuDNN's rows: whether it is Winograd or FFT says what tessera's
  /// implicit GEMM is up against.
  const char* cudnn_algorithm(pass p) const {
    static const char* const fwd[] = {
        "implicit_gemm", "implicit_precomp_gemm", "gemm", "direct", "fft", "fft_tiling",
        "winograd",      "winograd_nonfused"};
    static const char* const data[] = {"algo_0",     "algo_1",   "fft",
                                       "fft_tiling", "winograd", "winograd_nonfused"};
    static const char* const filter[] = {
        "algo_0", "algo_1", "fft", "algo_3", "winograd", "winograd_nonfused", "fft_tiling"};
    const auto pick = [](const auto& names, int i) {
      return i >= 0 && i < static_cast<int>(std::size(names)) ? names[i] : "unknown";
    };
    return p == pass::fwd        ? pick(fwd, fwd_algo)
           : p == pass::bwd_data ? pick(data, data_algo)
                                 : pick(filter, filter_algo);
  }

  void cudnn(pass p, const DevT<T>& out) const {
    const float one = 1, zero = 0;
    if (p == pass::fwd)
      check(cudnnConvolutionForward(dnn(), &one, xd, x.data(), wd, w.data(), cd, fwd_algo,
                                    workspace, workspace_bytes, &zero, yd, out.data()),
            "cudnnConvolutionForward");
    else if (p == pass::bwd_data)
      check(cudnnConvolutionBackwardData(dnn(), &one, wd, w.data(), yd, dy.data(), cd, data_algo,
                                         workspace, workspace_bytes, &zero, xd, out.data()),
            "cudnnConvolutionBackwardData");
    else
      check(
          cudnnConvolutionBackwardFilter(dnn(), &one, xd, x.data(), yd, dy.data(), cd, filter_algo,
                                         workspace, workspace_bytes, &zero, wd, out.data()),
          "cudnnConvolutionBackwardFilter");
  }

  /// tessera's pass into out (forward) or as a new tensor copied into out (the gradients have
  /// no out-parameter form; the copy is outside the timed call).
  DevT<T> tessera(pass p, const DevT<T>& out) const {
    if (p == pass::fwd) {
      ts::conv2d(x, w, DevT<T>{}, sh.opts(), out);
      return out;
    }
    if (p == pass::bwd_data) return ts::conv2d_backward_input(dy, w, x.shape(), sh.opts());
    return ts::conv2d_backward_weight(dy, x, w.shape(), sh.opts());
  }

  ts::Shape out_shape(pass p) const {
    return p == pass::fwd ? dy.shape() : p == pass::bwd_data ? x.shape() : w.shape();
  }
};

enum class impl {
  tessera,
  tessera_planar,
  tessera_whole_k,
  tessera_split32,
  tessera_lowered,
  tessera_winograd,
  cudnn
};
const char* impl_name(impl i) {
  return i == impl::tessera            ? "tessera/"
         : i == impl::tessera_planar   ? "tessera_planar/"
         : i == impl::tessera_whole_k  ? "tessera_whole_k/"
         : i == impl::tessera_split32  ? "tessera_split32/"
         : i == impl::tessera_lowered  ? "tessera_lowered/"
         : i == impl::tessera_winograd ? "tessera_winograd/"
                                       : "cudnn/";
}

template <class T>
void bm_conv(benchmark::State& st, const conv_shape& s, pass p, math m, impl who) {
  // Kept for the case's next row (kept_for; rows are registered case by case): its tensors are
  // drawn on the host and cudnnFind* runs once per pass.
  const auto& cc = kept_for<conv_case<T>>(std::string("conv ") + math_name(m) + "/" + s.name, s, m);
  cc.choose_algorithm(p);
  const precision_scope scope(m == math::tf32 ? ts::matmul_precision::high
                                              : ts::matmul_precision::highest);
  // tessera_planar: the pipelined GEMM kernels off for this row only.
  struct kernel_scope {
    using pipeline = ts::detail::cuda_gemm_pipeline;
    explicit kernel_scope(impl who) {
      ts::detail::cuda_gemm_start_at(who == impl::tessera_planar ? pipeline::none
                                                                 : pipeline::wgmma);
    }
    ~kernel_scope() { ts::detail::cuda_gemm_start_at(pipeline::wgmma); }
  } const kernels(who);
  const split_scope split(who == impl::tessera_whole_k ? 1 : who == impl::tessera_split32 ? 32 : 0);
  // tessera_lowered: implicit GEMM off for this row only.
  struct lowering_scope {
    explicit lowering_scope(impl who) {
      ts::detail::cuda_conv_implicit_gemm() = who != impl::tessera_lowered;
    }
    ~lowering_scope() { ts::detail::cuda_conv_implicit_gemm() = true; }
  } const lowering(who);
  // tessera_winograd: conv_algorithm::winograd for this row only.
  struct algorithm_scope {
    explicit algorithm_scope(impl who) {
      ts::set_float32_conv_algorithm(who == impl::tessera_winograd ? ts::conv_algorithm::winograd
                                                                   : ts::conv_algorithm::gemm);
    }
    ~algorithm_scope() { ts::set_float32_conv_algorithm(ts::conv_algorithm::gemm); }
  } const algorithm(who);
  auto out = poisoned<T>(cc.out_shape(p));
  if (who != impl::cudnn) {
    auto ref = poisoned<T>(cc.out_shape(p));
    cc.cudnn(p, ref);
    const auto got = cc.tessera(p, out);
    // float: summation order and cuDNN's algorithm (Winograd and FFT round differently); tf32:
    // both round inputs to tf32, possibly differently; fp16 / bf16: the outputs' rounding (2^-11
    // and 2^-8 relative), where the two float sums fall on different sides of a rounding step.
    const double bound = m == math::fp32   ? 1e-4
                         : m == math::tf32 ? 5e-3
                         : m == math::fp16 ? 5e-3
                                           : 2e-2;
    if (!within(st, rel_err(got, ref), bound, "cuDNN")) return;
    time_calls(st, [&] { benchmark::DoNotOptimize(cc.tessera(p, out)); });
  } else {
    time_calls(st, [&] { cc.cudnn(p, out); });
    st.SetLabel(cc.cudnn_algorithm(p));
  }
  st.counters["TFLOP/s"] = s.flops() / (st.counters["median_us"] * 1e-6) / 1e12;
}

/// Registers every benchmark of this program (called only when a GPU is visible).
void add_benchmarks() {
  // Case by case (shape and math), so that the rows of one case share it (kept_for).
  for (math m : {math::fp32, math::tf32, math::fp16, math::bf16})
    for (const conv_shape& s : bench::all_shapes())
      for (pass p : {pass::fwd, pass::bwd_data, pass::bwd_filter}) {
        if (p == pass::bwd_data && !s.input_grad) continue;
        for (impl who :
             {impl::tessera, impl::tessera_planar, impl::tessera_whole_k, impl::tessera_split32,
              impl::tessera_lowered, impl::tessera_winograd, impl::cudnn}) {
          // The planar rows are there to compare with the channels-last path, which takes
          // tensor-core products only, and forward-shaped passes only.
          if (who == impl::tessera_planar && (m == math::fp32 || p == pass::bwd_filter)) continue;
          // Whole-k rows where the products have few tiles (split by default).
          const bool few_tiles = s.name == "lenet2" || s.name == "resnet14" || s.name == "stride2";
          if (who == impl::tessera_whole_k && (!few_tiles || p == pass::bwd_data)) continue;
          // 32-part rows where the old cap bound the split: the CNN's fp32 weight gradients.
          if (who == impl::tessera_split32 && (m != math::fp32 || p != pass::bwd_filter ||
                                               (s.name != "lenet1" && s.name != "lenet2")))
            continue;
          // Lowered rows: weight gradients, and strided input gradients (the column matrix and
          // col2im that the per-phase products replace).
          if (who == impl::tessera_lowered && p != pass::bwd_filter &&
              !(p == pass::bwd_data && s.stride > 1))
            continue;
          // Winograd rows where the Winograd path takes the layer.
          const bool winograd_layer = s.winograd();
          if (who == impl::tessera_winograd && (m != math::fp32 || !winograd_layer)) continue;
          const auto body = [=](benchmark::State& st) {
            if (m == math::fp16)
              bm_conv<ts::half>(st, s, p, m, who);
            else if (m == math::bf16)
              bm_conv<ts::bfloat16>(st, s, p, m, who);
            else
              bm_conv<float>(st, s, p, m, who);
          };
          add_timed(std::string("conv_") + pass_name(p) + "/" + math_name(m) + "/" +
                        impl_name(who) + s.name,
                    30, body);
        }
      }
}

}  // namespace

int main(int argc, char** argv) {
  return cuda_bench::run_main(argc, argv, "bench_cuda_conv", add_benchmarks);
}
