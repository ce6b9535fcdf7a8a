// A backend defined in user code, without editing tessera: `counted` keeps tensors in host
// memory and reuses the CPU kernels, but counts every kernel launch. A real one would send some
// ops elsewhere (a BLAS library, an accelerator) the same way: specialise the primary
// templates of tessera/core/backend.hpp (memory, map_kernel, reduce_kernel, gemm_kernel,
// conv_kernel) for a new empty tag type.
#include <cmath>
#include <cstdio>
#include <tessera/tessera.hpp>

namespace ts = tessera;

struct counted {};  // the backend tag: an empty type

namespace launches {
inline int map = 0, reduce = 0, gemm = 0, conv = 0;
}

// Memory: the CPU's (host_accessible, so element access and printing work).
template <>
struct tessera::backend::memory<counted> : tessera::backend::memory<ts::cpu> {};

// Elementwise: count, then run the CPU kernel.
template <>
struct tessera::backend::map_kernel<counted> {
  template <class Out, class F, class... In>
  static void run(const F& f, ts::detail::strided<Out> out, ts::detail::strided<const In>... in) {
    ++launches::map;
    map_kernel<ts::cpu>::run<Out>(f, out, in...);
  }
};

// Reductions: the same.
template <>
struct tessera::backend::reduce_kernel<counted> {
  template <class R, class In, class Out>
  static void run(const R& red, ts::detail::strided<const In> in, int kept,
                  ts::detail::strided<Out> out) {
    ++launches::reduce;
    reduce_kernel<ts::cpu>::run(red, in, kept, out);
  }
};

// Matrix products: count, then run the CPU GEMM (a real backend could call a vendor BLAS here).
template <>
struct tessera::backend::gemm_kernel<counted> {
  template <class TA, class TB, class Acc>
  static void run(const ts::detail::gemm_problem<TA, TB, Acc>& problem) {
    ++launches::gemm;
    gemm_kernel<ts::cpu>::run(problem);
  }
};

// Convolutions: one entry point per pass (forward, input gradient, weight gradient), each taking
// a detail::conv_*_problem; forward all of them to the CPU kernels.
template <>
struct tessera::backend::conv_kernel<counted> {
  template <class Problem>
  static void run(const Problem& problem) {
    ++launches::conv;
    conv_kernel<ts::cpu>::run(problem);
  }
};

static_assert(ts::backend_tag<counted>);

int main() {
  ts::Generator rng(1);
  // Every op works on the new backend; tensors move between backends with to<>().
  auto x = ts::randn<float, counted>({4, 8}, rng);
  auto y = ts::relu(x * 2.0f + 1.0f);
  auto m = ts::mean(y, {1}, /*keepdim=*/true);
  auto z = ts::map([](float a, float b) { return a - b; }, y, m);
  const float total = ts::sum(z).item();
  auto h = ts::linear(x, ts::ones<float, counted>({3, 8}));  // [4, 3], every row sums x's row
  auto on_cpu = z.to<ts::cpu>();
  // A 3x3 box filter of ones over a 5x5 image of ones, padded: 9 inside, 4 in the corners.
  auto img = ts::ones<float, counted>({1, 1, 5, 5});
  auto box = ts::conv2d(img, ts::ones<float, counted>({1, 1, 3, 3}), {.padding = {1, 1}});
  const bool conv_ok =
      box.to<ts::cpu>()(0, 0, 2, 2) == 9.0f && box.to<ts::cpu>()(0, 0, 0, 0) == 4.0f;

  std::printf("map launches: %d, reduce launches: %d, gemm launches: %d, conv launches: %d\n",
              launches::map, launches::reduce, launches::gemm, launches::conv);
  std::printf("sum of centred rows: %g (should be ~0)\n", total);
  std::printf("same values on the CPU backend: %s\n",
              ts::sum(on_cpu).item() == total ? "yes" : "no");
  const float row0 = ts::sum(x.select(0, 0)).item();
  const bool linear_ok = std::abs(h.to<ts::cpu>()(0, 2) - row0) < 1e-4f;
  std::printf("linear on the new backend: %s\n", linear_ok ? "right" : "WRONG");
  std::printf("conv2d on the new backend: %s\n", conv_ok ? "right" : "WRONG");
  const bool ok = launches::map >= 4 && launches::reduce == 3 && launches::gemm == 1 &&
                  launches::conv == 1 && std::abs(total) < 1e-4f && linear_ok && conv_ok;
  return ok ? 0 : 1;
}
