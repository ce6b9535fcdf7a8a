// A backend defined in user code, without editing tessera (counted_backend.hpp): `counted` keeps
// tensors in host memory and reuses the CPU kernels, but counts every kernel launch. A real one
// would send some ops elsewhere (a BLAS library, an accelerator) the same way: specialise the
// primary templates of tessera/core/backend.hpp (memory, map_kernel, reduce_kernel, gemm_kernel,
// conv_kernel, pool_kernel, optim_kernel) for a new empty tag type. kernel/contract.hpp lists
// what each must provide; ts::complete_backend checks it at compile time.
#include <cmath>
#include <cstdio>
#include <tessera/tessera.hpp>

#include "counted_backend.hpp"

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
  // 2x2 max pooling of the box filter's output: the corner window holds 4, 6, 6, 9.
  auto pooled = ts::max_pool2d(box, {.kernel = {2, 2}, .stride = {2, 2}});
  const bool pool_ok =
      pooled.shape() == ts::Shape{1, 1, 2, 2} && pooled.to<ts::cpu>()(0, 0, 0, 0) == 9.0f;
  // One SGD step: w = 1 - 0.5 * 2 = 0 everywhere.
  auto w = ts::ones<float, counted>({5});
  ts::sgd_step(w, ts::full<float, counted>({5}, 2.0f), ts::Tensor<float, counted>(), {.lr = 0.5},
               true);
  const bool optim_ok = ts::max(ts::abs(w)).item() == 0.0f;

  std::printf("launches: map %d, reduce %d, gemm %d, conv %d, pool %d, optim %d\n", launches::map,
              launches::reduce, launches::gemm, launches::conv, launches::pool, launches::optim);
  std::printf("sum of centred rows: %g (should be ~0)\n", total);
  std::printf("same values on the CPU backend: %s\n",
              ts::sum(on_cpu).item() == total ? "yes" : "no");
  const float row0 = ts::sum(x.select(0, 0)).item();
  const bool linear_ok = std::abs(h.to<ts::cpu>()(0, 2) - row0) < 1e-4f;
  std::printf("linear on the new backend: %s\n", linear_ok ? "right" : "WRONG");
  std::printf("conv2d on the new backend: %s\n", conv_ok ? "right" : "WRONG");
  std::printf("max_pool2d on the new backend: %s\n", pool_ok ? "right" : "WRONG");
  std::printf("sgd_step on the new backend: %s\n", optim_ok ? "right" : "WRONG");
  const bool ok = launches::map >= 4 && launches::reduce >= 3 && launches::gemm == 1 &&
                  launches::conv == 1 && launches::pool == 1 && launches::optim == 1 &&
                  std::abs(total) < 1e-4f && linear_ok && conv_ok && pool_ok && optim_ok;
  return ok ? 0 : 1;
}
