// A backend defined in user code, without editing tessera: `counted` keeps tensors in host
// memory and reuses the CPU kernels, but counts every kernel launch. A real one would send some
// ops elsewhere (a BLAS library, an accelerator) the same way: specialise the three primary
// templates of tessera/backend/tags.hpp for a new empty tag type.
#include <cmath>
#include <cstdio>
#include <tessera/tessera.hpp>

namespace ts = tessera;

struct counted {};  // the backend tag: an empty type

namespace launches {
inline int map = 0, reduce = 0;
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

static_assert(ts::backend_tag<counted>);

int main() {
  ts::Generator rng(1);
  // Every op works on the new backend; tensors move between backends with to<>().
  auto x = ts::randn<float, counted>({4, 8}, rng);
  auto y = ts::relu(x * 2.0f + 1.0f);
  auto m = ts::mean(y, {1}, /*keepdim=*/true);
  auto z = ts::map([](float a, float b) { return a - b; }, y, m);
  const float total = ts::sum(z).item();
  auto on_cpu = z.to<ts::cpu>();

  std::printf("map launches: %d, reduce launches: %d\n", launches::map, launches::reduce);
  std::printf("sum of centred rows: %g (should be ~0)\n", total);
  std::printf("same values on the CPU backend: %s\n",
              ts::sum(on_cpu).item() == total ? "yes" : "no");
  const bool ok = launches::map >= 4 && launches::reduce == 2 && std::abs(total) < 1e-4f;
  return ok ? 0 : 1;
}
