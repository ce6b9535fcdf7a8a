// Calibration for the compile-time test: ordinary standard-library C++ (containers, algorithms,
// strings, streams, regex), no tessera. Its compile time measures the machine, so that the
// budget of ten_ops.cpp is a ratio that holds on fast and slow machines alike.
#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <numeric>
#include <regex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

template <class T>
T summarize(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  std::stable_sort(v.begin(), v.end(), std::greater<>());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return std::accumulate(v.begin(), v.end(), T{}) + *std::max_element(v.begin(), v.end());
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  std::map<std::string, int> counts;
  std::unordered_map<std::string, double> weights;
  for (const auto& a : args) ++counts[a], weights[a] += static_cast<double>(a.size());
  const std::regex word("[a-z]+([0-9]*)");
  std::smatch m;
  int matched = 0;
  for (const auto& a : args) matched += std::regex_search(a, m, word);
  std::variant<int, double, std::string> v = matched;
  std::function<double(double)> f = [](double x) { return x * 2; };
  std::ostringstream os;
  os << summarize(std::vector<float>{3, 1, 2}) << summarize(std::vector<double>{1.5, 2.5})
     << summarize(std::vector<int>{4, 4, 1}) << summarize(std::vector<long>{7, 9})
     << std::visit(
            [](const auto& x) {
              std::ostringstream s;
              s << x;
              return s.str();
            },
            v)
     << f(weights.size()) << counts.size();
  std::cout << os.str() << '\n';
  return 0;
}
