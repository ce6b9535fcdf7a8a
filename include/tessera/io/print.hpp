// tessera/io/print.hpp - readable printing: values (summarised when large), shape and dtype.
#pragma once

#include <iomanip>
#include <ostream>
#include <sstream>

#include "../ops/tensor_copy.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

template <class T>
void print_element(std::ostream& os, T v) {
  if constexpr (std::is_same_v<T, bool>)
    os << (v ? "true" : "false");
  else if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>)
    os << static_cast<int>(v);
  else if constexpr (is_low_precision_v<T>)
    os << static_cast<float>(v);
  else
    os << v;
}

// Prints dims [d, rank) of the row-major host copy starting at flat index `base`; long dims
// show their first and last `edge` entries around "...".
template <class T>
void print_rec(std::ostream& os, const std::vector<T>& v, const Shape& s, int d, int64_t base,
               bool summarize, int indent) {
  constexpr int64_t edge = 3;
  if (d == s.rank()) {
    print_element(os, v[static_cast<size_t>(base)]);
    return;
  }
  int64_t inner = 1;
  for (int k = d + 1; k < s.rank(); ++k) inner *= s[k];
  os << '[';
  for (int64_t i = 0; i < s[d]; ++i) {
    if (summarize && s[d] > 2 * edge && i == edge) {
      os << (d + 1 == s.rank() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = s[d] - edge - 1;
      continue;
    }
    print_rec(os, v, s, d + 1, base + i * inner, summarize, indent + 1);
    if (i + 1 < s[d]) os << (d + 1 == s.rank() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace detail

/// Prints `tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=float32)`; tensors over 1000 elements
/// are summarised with "...". Device tensors are copied to the host first.
template <element_type T, class B>
std::ostream& operator<<(std::ostream& os, const Tensor<T, B>& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::ostringstream ss;
  ss << std::setprecision(6);
  const auto v = t.to_vector();
  ss << "tensor(";
  detail::print_rec(ss, v, t.shape(), 0, 0, t.numel() > 1000, 7);
  ss << ", shape=" << t.shape() << ", dtype=" << dtype_name<T> << ")";
  return os << ss.str();
}

TESSERA_END_NAMESPACE
