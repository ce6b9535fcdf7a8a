// The program both package-test consumers build: a few tessera calls whose results are known
// exactly. Exits nonzero (with a message) when anything is off.
#include <cstdio>
#include <cstring>
#include <tessera/tessera.hpp>
#include <vector>

namespace ts = tessera;

int main() {
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "package app: %s is wrong\n", what);
      ++failures;
    }
  };

  expect(std::strcmp(TESSERA_VERSION_STRING, "0.1.0") == 0, "TESSERA_VERSION_STRING");

  // 0 + 1 + ... + 99 = 4950, exact in float.
  const auto a = ts::arange<float>(100);
  expect(ts::sum(a).item() == 4950.0f, "sum(arange(100))");

  // [2,3] + [3] broadcasts along rows.
  const auto m = ts::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const auto b = ts::from_vector<float>({10, 20, 30});
  const std::vector<float> expected{11, 22, 33, 14, 25, 36};
  expect((m + b).to_vector() == expected, "broadcast add");

  // Column means of m: (1+4)/2, (2+5)/2, (3+6)/2.
  const std::vector<float> means{2.5f, 3.5f, 4.5f};
  expect(ts::mean(m, {0}).to_vector() == means, "mean over axis 0");

  if (failures == 0) std::printf("package app: ok\n");
  return failures == 0 ? 0 : 1;
}
