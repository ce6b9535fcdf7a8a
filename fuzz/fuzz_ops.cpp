// Structured fuzz harness: the input bytes decode into a tensor and a sequence of shape, view,
// broadcast, reduction and matmul calls. Each call runs on tessera and on a dense reference
// written here from the documented semantics (Python slices, NumPy broadcasting). The two must
// agree: the same values, or an error from tessera exactly when the reference says the call is
// invalid. Anything else aborts, which the fuzzer reports with the input that caused it.
//
// Values are small integers held in double, so every sum and product is exact and the
// comparison is bitwise (a sequence ends once a value passes 2^20, beyond which that could
// fail). Shapes whose element count would overflow int64 must be refused; shapes that are valid
// but larger than max_elements are skipped (not run), so one input cannot exhaust memory.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <tessera/tessera.hpp>
#include <vector>

namespace {
namespace ts = tessera;
using Ten = ts::Tensor<double, ts::cpu>;
using i128 = __int128;

constexpr int64_t max_elements = 4096;

/// FUZZ_OPS_TRACE=1 prints each call (to see what a crashing input does).
const bool trace = std::getenv("FUZZ_OPS_TRACE") != nullptr;

std::string dims(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

[[noreturn]] void mismatch(const char* what) {
  std::fprintf(stderr, "fuzz_ops: %s: tessera and the reference disagree\n", what);
  std::abort();
}

/// The input bytes, read front to back; zeros once exhausted.
struct bytes {
  const uint8_t* p;
  size_t n;
  uint8_t u8() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  bool done() const { return n == 0; }
  /// Mostly small values around 0, sometimes extremes (to reach the overflow checks).
  int64_t index() {
    const uint8_t k = u8();
    switch (k % 16) {
      case 0:
        return INT64_MAX - (u8() % 4);
      case 1:
        return INT64_MIN + (u8() % 4);
      case 2: {
        uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v = v << 8 | u8();
        return static_cast<int64_t>(v);
      }
      case 3:
        return (int64_t{1} << (u8() % 63)) * ((u8() & 1) ? -1 : 1);
      default:
        return static_cast<int64_t>(u8() % 13) - 6;
    }
  }
};

/// The reference: a dense row-major array.
struct ref {
  std::vector<int64_t> shape;
  std::vector<double> v;
  int rank() const { return static_cast<int>(shape.size()); }
};

/// Element count, or nullopt when the shape is invalid as a Shape: the product of its nonzero
/// extents must fit in int64 (so that strides do too), even when another extent is 0.
std::optional<int64_t> count_of(const std::vector<int64_t>& s) {
  i128 n = 1;
  bool empty = false;
  for (int64_t d : s) {
    if (d == 0) empty = true;
    if (d == 0) continue;
    n *= d;
    if (n > INT64_MAX) return std::nullopt;
  }
  return empty ? 0 : static_cast<int64_t>(n);
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& s) {
  std::vector<int64_t> st(s.size());
  int64_t a = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) st[i] = a, a *= s[i];
  return st;
}

/// Thrown by build for a valid shape of more than max_elements: the call is skipped, not run.
struct too_big {};

/// out[i] = f(index of i) over a dense array of shape s (a valid shape).
template <class F>
ref build(const std::vector<int64_t>& s, F f) {
  ref r{s, {}};
  const auto count = count_of(s);
  if (!count) mismatch("internal: build called for an invalid shape");
  const int64_t n = *count;
  if (n > max_elements) throw too_big{};
  r.v.resize(static_cast<size_t>(n));
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    r.v[static_cast<size_t>(i)] = f(idx);
    for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

double at(const ref& r, const std::vector<int64_t>& idx) {
  const auto st = strides_of(r.shape);
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
  return r.v[static_cast<size_t>(off)];
}

/// Axis as tessera wraps it (a scalar accepts 0 and -1), or -1 when out of range.
int wrap(int64_t axis, int rank) {
  const int r = rank < 1 ? 1 : rank;
  if (axis < -r || axis >= r) return -1;
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

void expect_equal(const ref& r, const Ten& t, const char* op) {
  if (static_cast<size_t>(t.rank()) != r.shape.size()) mismatch(op);
  for (int d = 0; d < t.rank(); ++d)
    if (t.shape()[d] != r.shape[static_cast<size_t>(d)]) mismatch(op);
  const std::vector<double> got = t.to_vector();
  if (got != r.v) mismatch(op);
}

/// Runs `call` on tessera. `want` is the reference result, or nullopt when the call must throw
/// a tessera::error. Returns the new tensor when it was valid.
template <class F>
std::optional<Ten> run(const char* op, const std::optional<ref>& want, F call) {
  if (trace)
    std::fprintf(stderr, "%s: reference %s\n", op,
                 want ? ("gives " + dims(want->shape)).c_str() : "refuses");
  std::optional<Ten> got;
  try {
    got = call();
  } catch (const ts::error& e) {
    if (trace) std::fprintf(stderr, "  tessera refuses: %s\n", e.what());
    if (want) mismatch(op);  // refused a valid call
    return std::nullopt;
  }
  if (!want) mismatch(op);  // accepted an invalid call
  expect_equal(*want, *got, op);
  return got;
}

// ---- the reference semantics of each call -----------------------------------------------------

std::optional<ref> slice_ref(const ref& x, int64_t dim, int64_t start, int64_t stop, int64_t step,
                             int& d_out) {
  if (x.rank() == 0 || step <= 0) return std::nullopt;
  const int d = wrap(dim, x.rank());
  if (d < 0) return std::nullopt;
  const i128 n = x.shape[static_cast<size_t>(d)];
  auto clampi = [n](i128 i) {
    if (i < 0) i += n;
    return i < 0 ? i128{0} : (i > n ? n : i);
  };
  const i128 b = clampi(start), e = clampi(stop);
  const i128 len = e > b ? (e - b + step - 1) / step : 0;
  std::vector<int64_t> s = x.shape;
  s[static_cast<size_t>(d)] = static_cast<int64_t>(len);
  d_out = d;
  return build(s, [&](std::vector<int64_t> idx) {
    idx[static_cast<size_t>(d)] =
        static_cast<int64_t>(b + i128{idx[static_cast<size_t>(d)]} * step);
    return at(x, idx);
  });
}

std::optional<ref> select_ref(const ref& x, int64_t dim, int64_t index) {
  const int d = wrap(dim, x.rank());
  if (d < 0 || x.rank() == 0) return std::nullopt;
  const int64_t n = x.shape[static_cast<size_t>(d)];
  if (index < -n || index >= n) return std::nullopt;
  const int64_t i = index < 0 ? index + n : index;
  std::vector<int64_t> s = x.shape;
  s.erase(s.begin() + d);
  return build(s, [&](std::vector<int64_t> idx) {
    idx.insert(idx.begin() + d, i);
    return at(x, idx);
  });
}

std::optional<ref> transpose_ref(const ref& x, int64_t d0, int64_t d1) {
  const int a = wrap(d0, x.rank()), b = wrap(d1, x.rank());
  if (a < 0 || b < 0) return std::nullopt;
  if (x.rank() == 0) return x;
  std::vector<int64_t> s = x.shape;
  std::swap(s[static_cast<size_t>(a)], s[static_cast<size_t>(b)]);
  return build(s, [&](std::vector<int64_t> idx) {
    std::swap(idx[static_cast<size_t>(a)], idx[static_cast<size_t>(b)]);
    return at(x, idx);
  });
}

std::optional<ref> unsqueeze_ref(const ref& x, int64_t dim) {
  const int d = wrap(dim, x.rank() + 1);
  if (d < 0 || x.rank() == ts::max_rank) return std::nullopt;
  ref r = x;
  r.shape.insert(r.shape.begin() + d, 1);
  return r;
}

ref squeeze_ref(const ref& x, int64_t dim, bool& valid) {
  valid = true;
  if (x.rank() == 0) return x;
  const int d = wrap(dim, x.rank());
  if (d < 0) {
    valid = false;
    return x;
  }
  ref r = x;
  if (r.shape[static_cast<size_t>(d)] == 1) r.shape.erase(r.shape.begin() + d);
  return r;
}

/// reshape's rules: one -1 at most, no other negative extent, the counts equal. `too_big` is set
/// for a valid target larger than max_elements (not run).
std::optional<ref> reshape_ref(const ref& x, std::vector<int64_t> dims) {
  int infer = -1;
  i128 known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (infer >= 0) return std::nullopt;
      infer = static_cast<int>(i);
    } else if (dims[i] < 0) {
      return std::nullopt;
    } else {
      known *= dims[i];
      if (known > INT64_MAX) return std::nullopt;
    }
  }
  const int64_t n = static_cast<int64_t>(x.v.size());
  if (infer >= 0) {
    if (known == 0 || n % static_cast<int64_t>(known) != 0) return std::nullopt;
    dims[static_cast<size_t>(infer)] = n / static_cast<int64_t>(known);
  }
  const auto c = count_of(dims);
  if (!c || *c != n) return std::nullopt;
  return ref{dims, x.v};
}

/// expand's rules for a target given as a Shape (which refuses negative extents): at least x's
/// rank; an extent of 1 stretches to anything.
std::optional<ref> expand_ref(const ref& x, const std::vector<int64_t>& target) {
  const int r = static_cast<int>(target.size());
  if (r < x.rank()) return std::nullopt;
  for (int i = 0; i < r; ++i) {
    const int j = i - (r - x.rank());
    const int64_t src = j >= 0 ? x.shape[static_cast<size_t>(j)] : 1;
    const int64_t want = target[static_cast<size_t>(i)];
    if (want < 0 || (src != want && src != 1)) return std::nullopt;
  }
  if (!count_of(target)) return std::nullopt;
  return build(target, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> src(idx.end() - x.rank(), idx.end());
    for (int j = 0; j < x.rank(); ++j)
      if (x.shape[static_cast<size_t>(j)] == 1) src[static_cast<size_t>(j)] = 0;
    return at(x, src);
  });
}

/// x + y with NumPy broadcasting.
std::optional<ref> add_ref(const ref& x, const ref& y) {
  const int r = std::max(x.rank(), y.rank());
  std::vector<int64_t> s(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    const int jx = i - (r - x.rank()), jy = i - (r - y.rank());
    const int64_t a = jx >= 0 ? x.shape[static_cast<size_t>(jx)] : 1;
    const int64_t b = jy >= 0 ? y.shape[static_cast<size_t>(jy)] : 1;
    if (a != b && a != 1 && b != 1) return std::nullopt;
    s[static_cast<size_t>(i)] = a == 1 ? b : a;
  }
  if (!count_of(s)) return std::nullopt;  // the broadcast shape overflows
  auto pick = [r](const ref& t, const std::vector<int64_t>& idx) {
    std::vector<int64_t> src(idx.end() - t.rank(), idx.end());
    for (int j = 0; j < t.rank(); ++j)
      if (t.shape[static_cast<size_t>(j)] == 1) src[static_cast<size_t>(j)] = 0;
    (void)r;
    return at(t, src);
  };
  return build(s, [&](const std::vector<int64_t>& idx) { return pick(x, idx) + pick(y, idx); });
}

/// Sum over one axis (all when axis is nullopt).
std::optional<ref> sum_ref(const ref& x, std::optional<int64_t> axis, bool keepdim) {
  if (!axis) {
    double s = 0;
    for (double v : x.v) s += v;
    ref r{keepdim ? std::vector<int64_t>(x.shape.size(), 1) : std::vector<int64_t>{}, {s}};
    return r;
  }
  const int d = wrap(*axis, x.rank());
  if (d < 0) return std::nullopt;
  if (x.rank() == 0) return ref{{}, x.v};
  std::vector<int64_t> s = x.shape;
  s[static_cast<size_t>(d)] = 1;
  ref r = build(s, [&](std::vector<int64_t> idx) {
    double acc = 0;
    for (int64_t k = 0; k < x.shape[static_cast<size_t>(d)]; ++k) {
      idx[static_cast<size_t>(d)] = k;
      acc += at(x, idx);
    }
    return acc;
  });
  if (!keepdim) r.shape.erase(r.shape.begin() + d);
  return r;
}

/// [m, k] x [k, n] for 2-D x.
std::optional<ref> matmul_ref(const ref& a, const ref& b) {
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (!count_of({m, n})) return std::nullopt;  // the result's shape overflows
  return build({m, n}, [&](const std::vector<int64_t>& idx) {
    double acc = 0;
    for (int64_t i = 0; i < k; ++i) acc += at(a, {idx[0], i}) * at(b, {i, idx[1]});
    return acc;
  });
}

Ten tensor_of(const ref& r) {
  return ts::from_vector<double>(r.v, ts::Shape(std::span<const int64_t>(r.shape)));
}

/// A small operand of shape s with values from the input.
ref operand(bytes& in, const std::vector<int64_t>& s) {
  return build(s,
               [&](const std::vector<int64_t>&) { return static_cast<double>(in.u8() % 7) - 3; });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bytes in{data, size};
  // The starting tensor: rank 0..4, extents 0..5.
  std::vector<int64_t> s0(in.u8() % 5);
  for (auto& d : s0) d = in.u8() % 6;
  ref x = operand(in, s0);
  Ten t = tensor_of(x);
  // A view of it half of the time (a transposed or strided layout for the calls to start from).
  if (x.rank() >= 2 && (in.u8() & 1)) {
    t = t.transpose(0, 1).contiguous().transpose(0, 1);
  }
  for (int steps = 0; steps < 24 && !in.done(); ++steps) {
    // Sums of sums grow (2048 elements summed five times reach 2^55): past 2^20 the next sum
    // or product of up to max_elements terms might not be exact in double, and tessera's order
    // of addition may then round differently from the reference's. The sequence ends there.
    double largest = 0;
    for (const double v : x.v) largest = std::max(largest, std::abs(v));
    if (largest > 0x1p20) {
      if (trace) std::fprintf(stderr, "values reach %.17g: the sequence ends\n", largest);
      break;
    }
    const uint8_t op = in.u8() % 11;
    std::optional<ref> want;
    std::optional<Ten> got;
    try {
      switch (op) {
        case 0: {
          const int64_t dim = in.index(), start = in.index(), stop = in.index(), step = in.index();
          int d = 0;
          want = slice_ref(x, dim, start, stop, step, d);
          got = run("slice", want, [&] { return t.slice(dim, start, stop, step); });
          break;
        }
        case 1: {
          const int64_t d0 = in.index(), d1 = in.index();
          want = transpose_ref(x, d0, d1);
          got = run("transpose", want, [&] { return t.transpose(d0, d1); });
          break;
        }
        case 2: {
          const int64_t dim = in.index(), index = in.index();
          want = select_ref(x, dim, index);
          got = run("select", want, [&] { return t.select(dim, index); });
          break;
        }
        case 3: {
          const int64_t dim = in.index();
          want = unsqueeze_ref(x, dim);
          got = run("unsqueeze", want, [&] { return t.unsqueeze(dim); });
          break;
        }
        case 4: {
          const int64_t dim = in.index();
          bool valid = true;
          const ref r = squeeze_ref(x, dim, valid);
          if (valid) want = r;
          got = run("squeeze", want, [&] { return t.squeeze(dim); });
          break;
        }
        case 5: {
          std::vector<int64_t> d(in.u8() % 6);
          for (auto& e : d) e = (in.u8() % 4 == 0) ? in.index() : in.u8() % 7;
          if (d.size() > static_cast<size_t>(ts::max_rank)) break;
          if (trace)
            std::fprintf(stderr, "reshape %s to %s\n", dims(x.shape).c_str(), dims(d).c_str());
          want = reshape_ref(x, d);
          got = run("reshape", want, [&] { return t.reshape(std::span<const int64_t>(d)); });
          break;
        }
        case 6: {
          std::vector<int64_t> target(static_cast<size_t>(x.rank() + in.u8() % 3));
          if (target.size() > static_cast<size_t>(ts::max_rank)) break;
          for (auto& d : target) d = (in.u8() % 5 == 0) ? in.index() : in.u8() % 4 - 1;
          want = expand_ref(x, target);
          got = run("expand", want,
                    [&] { return t.expand(ts::Shape(std::span<const int64_t>(target))); });
          break;
        }
        case 7: {
          // An operand broadcastable or not: x's shape with some extents set to 1 or changed.
          std::vector<int64_t> s = x.shape;
          const size_t drop = s.empty() ? 0 : in.u8() % (s.size() + 1);
          s.erase(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(drop));
          for (auto& d : s) {
            const uint8_t k = in.u8() % 6;
            d = k == 0 ? 1 : (k == 1 && d < 8 ? d + 1 : d);
          }
          if (!count_of(s)) break;
          const ref y = operand(in, s);
          want = add_ref(x, y);
          got = run("add", want, [&] { return t + tensor_of(y); });
          break;
        }
        case 8: {
          const bool all = in.u8() & 1, keep = in.u8() & 1;
          const int64_t axis = in.index();
          want = sum_ref(x, all ? std::nullopt : std::optional<int64_t>(axis), keep);
          got = run("sum", want,
                    [&] { return all ? ts::sum(t, {}, keep) : ts::sum(t, ts::Axes{axis}, keep); });
          break;
        }
        case 9: {
          if (x.rank() != 2) break;
          const std::vector<int64_t> sb{x.shape[1], static_cast<int64_t>(in.u8() % 5)};
          if (!count_of(sb)) break;
          const ref b = operand(in, sb);
          want = matmul_ref(x, b);
          // The other operand as a transposed view, so the product reads strided memory too.
          const Ten tb = tensor_of(b).transpose(0, 1).contiguous().transpose(0, 1);
          got = run("matmul", want, [&] { return ts::matmul(t, tb); });
          break;
        }
        default: {
          want = x;
          got = run("contiguous", want, [&] { return (in.u8() & 1) ? t.contiguous() : t.clone(); });
          break;
        }
      }
    } catch (const too_big&) {
      continue;  // a valid call whose result is too large to compare
    }
    if (got) {
      x = *want;
      t = *got;
    }
  }
  return 0;
}
