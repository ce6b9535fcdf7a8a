// Compile-time budget check: the umbrella header and ten everyday ops (+, *, exp, tanh, relu,
// where, sum, mean, max, argmax) at -O2, timed against reference.cpp (plain standard-library
// C++) by a CTest script (measure.cmake). Compiled, not linked or run.
#include <tessera/tessera.hpp>

namespace ts = tessera;

int main() {
  ts::Generator rng(7);
  const auto x = ts::randn<float>({32, 64}, rng);
  const auto b = ts::arange<float>(64);

  const auto y = ts::relu(x * 2.0f + b);
  const auto e = ts::tanh(ts::exp(x * -0.5f));
  const auto w = ts::where(x > 0.0f, y, e);

  const auto row_sums = ts::sum(w, {1});
  const auto col_means = ts::mean(w, {0}, /*keepdim=*/true);
  const float peak = ts::max(w).item();
  const auto best = ts::argmax(w, 1);

  const bool ok =
      row_sums.numel() == 32 && col_means.numel() == 64 && best.numel() == 32 && peak > 0;
  return ok ? 0 : 1;
}
