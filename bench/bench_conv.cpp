// 2-D convolution throughput: tessera next to oneDNN in one binary, fp32, NCHW, on the same
// inputs, at 2 threads (--conv_threads=1,2 adds 1 thread). Counter "GFLOP/s": 2*N*K*(C/groups)*
// R*S*Ho*Wo per pass: once for the forward, three times for forward + backward (forward, input
// gradient, weight gradient; the bias gradient, a sum over dy, is not counted), twice where the
// input gradient is skipped.
//
// Names are <pass>/<impl>/<shape>/threads:<t> (Google Benchmark appends /min_time:../real_time);
// scripts/conv_report.py pairs them by <pass>, <shape> and <t>:
//   fwd       y = conv(x, w) + b
//   fwd_bwd   the forward, then dx = conv2d_backward_input(dy, w), dw = conv2d_backward_weight(dy,
//             x) and db = conv2d_backward_bias(dy) from a fixed dy (the gradient the next layer
//             would hand back). lenet1 is a network's first layer, whose input needs no gradient:
//             a framework skips dx there, so both libraries skip it (and the FLOP count is 2x).
// Shapes (x [N, C, H, W], K filters of R x S, stride, padding on all sides, groups):
//   lenet1 [64,1,28,28] 32 3x3 pad 1      lenet2 [64,32,14,14] 64 3x3 pad 1
//   resnet3x3 [8,64,56,56] 64 3x3 pad 1   resnet14 [8,256,14,14] 256 3x3 pad 1
//   resnet1x1 [8,256,56,56] 64 1x1        vgg112 [4,128,112,112] 128 3x3 pad 1
//   stride2 [8,128,56,56] 128 3x3 stride 2 pad 1
//   depthwise [8,128,56,56] 128 3x3 pad 1 groups 128
// impl:
//   tessera       ts::conv2d(x, w, b, opts, y) into a preallocated y (no allocation); the
//                 backward functions return fresh tensors, as the API does.
//   dnnl          oneDNN's primitives (convolution_forward: forward_inference for fwd,
//                 forward_training for fwd_bwd; convolution_backward_data;
//                 convolution_backward_weights with the bias gradient),
//                 algorithm::convolution_direct (--dnnl_algorithm=auto: convolution_auto, with
//                 which oneDNN 2.6 on AVX-512 picks Winograd (jit_wino_4x3) for some
//                 forward_training and backward primitives; the label names the implementation of
//                 each primitive; GFLOP/s still counts the direct convolution's work), with the
//                 memory formats the library picks (format_tag::any) for src, weights and dst, as a
//                 framework would create them. The tensors the user holds are NCHW (x, y, dx, dy:
//                 nchw; w, dw: oihw, goihw with groups; b, db: x), and every operation takes and
//                 returns them, as a framework holding NCHW tensors calls it (PyTorch's
//                 mkldnn_convolution and its backward on dense tensors): the timed region includes
//                 the reorders of each primitive's inputs from NCHW into its formats and of its
//                 outputs back to NCHW, every call. That includes the weights: they change at every
//                 training step, and a framework that does not prepack them (PyTorch with dense
//                 weights) reorders them at inference too. The backward is one operation (as
//                 PyTorch's): dy is reordered once when both backward primitives want the same
//                 format; x is reordered again for the weight gradient (the forward's reordered
//                 copy is not kept across operations). A reorder is skipped only where the
//                 primitive's format is the NCHW one already (lenet1's x).
//   tessera_winograd  the same calls under ts::set_float32_conv_algorithm(winograd), on the 3x3
//                 stride-1 layers Winograd F(4x4, 3x3) takes (lenet2, resnet3x3, resnet14,
//                 vgg112): all three passes run as Winograd (F(4x4, 3x3), the weight gradient
//                 F(3x3, 4x4)); its results are checked against tessera's direct ones (y, dx and
//                 dw within 1e-4 of their largest magnitude) before timing, counter "rel_diff"
//                 the largest such difference.
//   dnnl_blocked  the same primitives with every operand already in their formats: the timed
//                 region is the primitives alone, with the outputs left in those formats (what a
//                 framework keeping tensors in oneDNN's layouts between layers would pay).
// Threads: ts::set_num_threads(t) and omp_set_num_threads(t) (oneDNN here runs on OpenMP, the
// same libgomp as tessera); oneDNN primitives are created after the thread count is set.
//
// Before a shape is first timed at a thread count, both libraries' results (y, dx, dw, db) are
// compared over the whole tensors (max |tessera - oneDNN| relative to max |oneDNN|, at most
// 1e-4), and each library's results on 256 sampled elements with a float64 reference (error at
// most 1e-3 of the sum of |terms|, as bench_matmul). A disagreement is blamed on the library that
// is off the float64 reference at the worst element; its benchmarks then stop with SkipWithError
// (the message names the tensor, element and values; a wrong y stops both passes, a wrong dx, dw
// or db only fwd_bwd): a fast wrong kernel is worth nothing. The tessera runs report the largest
// relative difference as counter "rel_diff".
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tessera/tessera.hpp>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "conv_shapes.hpp"

#ifdef TESSERA_BENCH_HAVE_DNNL
#include <dnnl.hpp>
#endif

namespace ts = tessera;

namespace {

void set_flops(benchmark::State& st, double flops_per_iter) {
  st.counters["GFLOP/s"] = benchmark::Counter(
      flops_per_iter, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// Each benchmark runs at least this long (one iteration of the largest, vgg112 forward +
// backward, takes about as long), unless --benchmark_min_time is given; the whole binary takes
// about a minute per thread count.
constexpr double kMinTime = 0.5;
bool user_min_time = false;  // --benchmark_min_time given: it applies instead

// ---------------------------------------------------------------- shapes
using bench::all_shapes;
using bench::conv_shape;

// ---------------------------------------------------------------- problems
// One set of inputs per shape, shared by every implementation and thread count.
struct problem {
  conv_shape sh;
  ts::Tensor<float> x, w, b, dy;  // dy: the output gradient the next layer hands back
  ts::Tensor<float> y;            // tessera's forward output (written in place)
};

problem& get_problem(size_t i) {
  static std::map<size_t, std::unique_ptr<problem>> cache;
  auto& p = cache[i];
  if (!p) {
    p = std::make_unique<problem>();
    const conv_shape& s = all_shapes()[i];
    p->sh = s;
    ts::Generator g(42);
    p->x = ts::rand<float>(s.x_shape(), g, -1.0, 1.0);
    p->w = ts::rand<float>(s.w_shape(), g, -1.0, 1.0);
    p->b = ts::rand<float>(ts::Shape{s.k}, g, -1.0, 1.0);
    p->dy = ts::rand<float>(s.y_shape(), g, -1.0, 1.0);
    p->y = ts::zeros<float>(s.y_shape());
  }
  return *p;
}

// ---------------------------------------------------------------- tessera
struct grads {
  ts::Tensor<float> dx, dw, db;  // dx undefined when the shape skips it
};

void tessera_forward(problem& p) { (void)ts::conv2d(p.x, p.w, p.b, p.sh.opts(), p.y); }

grads tessera_backward(const problem& p) {
  const ts::Conv2dOptions o = p.sh.opts();
  grads g;
  if (p.sh.input_grad) g.dx = ts::conv2d_backward_input(p.dy, p.w, p.x.shape(), o);
  g.dw = ts::conv2d_backward_weight(p.dy, p.x, p.w.shape(), o);
  g.db = ts::conv2d_backward_bias(p.dy);
  return g;
}

// ---------------------------------------------------------------- oneDNN
#ifdef TESSERA_BENCH_HAVE_DNNL
using dnnl::memory;
using tag = memory::format_tag;

dnnl::algorithm dnnl_algorithm = dnnl::algorithm::convolution_direct;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

memory::desc any_desc(const memory::dims& d) { return {d, memory::data_type::f32, tag::any}; }

memory user_memory(const memory::dims& d, tag t, float* data) {
  return memory({d, memory::data_type::f32, t}, engine(), data);
}

// One operand of a primitive: the NCHW memory the user holds and the memory in the primitive's
// format (the same memory where the formats agree), with the reorder between them.
struct operand {
  std::string name;
  memory user, prim;
  dnnl::reorder to_prim, to_user;
  bool reorders = false;
  void load(dnnl::stream& s) {
    if (reorders) to_prim.execute(s, user, prim);
  }
  void store(dnnl::stream& s) {
    if (reorders) to_user.execute(s, prim, user);
  }
};

operand bind(const char* name, const memory& user, const memory::desc& want, bool input) {
  operand o;
  o.name = name;
  o.user = user;
  if (user.get_desc() == want) {
    o.prim = user;
    return o;
  }
  o.prim = memory(want, engine());
  o.reorders = true;
  if (input)
    o.to_prim = dnnl::reorder(o.user, o.prim);
  else
    o.to_user = dnnl::reorder(o.prim, o.user);
  return o;
}

using args_t = std::unordered_map<int, memory>;

// "<impl> [reordered operands]" for the label.
std::string describe(const char* impl, std::initializer_list<const operand*> ops) {
  std::string out = std::string(impl) + " [";
  bool any = false;
  for (const operand* o : ops)
    if (o->reorders) out.append(any ? "," : "").append(o->name), any = true;
  return out.append(any ? "]" : "no reorder]");
}

// The primitives of one shape at one thread count (forward_inference alone, or forward_training
// with both backward primitives) and their results in NCHW.
struct dnnl_conv {
  bool input_grad = true;
  dnnl::stream strm{engine()};
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  operand src, wei, bias, dst;                             // forward
  operand bd_diff_dst, bd_wei, bd_diff_src;                // backward data
  operand bw_src, bw_diff_dst, bw_diff_wei, bw_diff_bias;  // backward weights
  args_t fwd_args, bd_args, bw_args;
  ts::Tensor<float> y, dx, dw, db;  // the NCHW results
  std::string info;  // per primitive: the implementation, [the operands the dnnl variant reorders]

  void forward(bool nchw) {
    if (nchw) src.load(strm), wei.load(strm), bias.load(strm);
    fwd.execute(strm, fwd_args);
    if (nchw) dst.store(strm);
    strm.wait();
  }
  void backward(bool nchw) {
    if (input_grad) {
      if (nchw) bd_diff_dst.load(strm), bd_wei.load(strm);
      bwd_data.execute(strm, bd_args);
      if (nchw) bd_diff_src.store(strm);
    }
    if (nchw) bw_src.load(strm), bw_diff_dst.load(strm);
    bwd_weights.execute(strm, bw_args);
    if (nchw) bw_diff_wei.store(strm), bw_diff_bias.store(strm);
    strm.wait();
  }
  // The dnnl_blocked variant's starting point: every input in its primitive's format.
  void load_inputs() {
    for (operand* o : {&src, &wei, &bias, &bd_diff_dst, &bd_wei, &bw_src, &bw_diff_dst})
      o->load(strm);
    strm.wait();
  }
};

std::unique_ptr<dnnl_conv> make_dnnl(problem& p, bool training) {
  const conv_shape& s = p.sh;
  auto d = std::make_unique<dnnl_conv>();
  d->input_grad = s.input_grad;
  const memory::dims src_dims{s.n, s.c, s.h, s.w}, dst_dims{s.n, s.k, s.ho(), s.wo()},
      bias_dims{s.k};
  const memory::dims wei_dims = s.groups > 1 ? memory::dims{s.groups, s.kg(), s.cg(), s.r, s.s}
                                             : memory::dims{s.k, s.cg(), s.r, s.s};
  const tag wei_tag = s.groups > 1 ? tag::goihw : tag::oihw;
  const memory::dims strides{s.stride, s.stride}, dilates{0, 0}, pad{s.pad, s.pad};

  d->y = ts::zeros<float>(s.y_shape());
  const dnnl::convolution_forward::primitive_desc fpd(
      dnnl::convolution_forward::desc(
          training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
          dnnl_algorithm, any_desc(src_dims), any_desc(wei_dims), any_desc(bias_dims),
          any_desc(dst_dims), strides, dilates, pad, pad),
      engine());
  d->fwd = dnnl::convolution_forward(fpd);
  d->src = bind("x", user_memory(src_dims, tag::nchw, p.x.data()), fpd.src_desc(), true);
  d->wei = bind("w", user_memory(wei_dims, wei_tag, p.w.data()), fpd.weights_desc(), true);
  d->bias = bind("b", user_memory(bias_dims, tag::x, p.b.data()), fpd.bias_desc(), true);
  d->dst = bind("y", user_memory(dst_dims, tag::nchw, d->y.data()), fpd.dst_desc(), false);
  d->fwd_args = {{DNNL_ARG_SRC, d->src.prim},
                 {DNNL_ARG_WEIGHTS, d->wei.prim},
                 {DNNL_ARG_BIAS, d->bias.prim},
                 {DNNL_ARG_DST, d->dst.prim}};
  d->info = "fwd " + describe(fpd.impl_info_str(), {&d->src, &d->wei, &d->bias, &d->dst});

  if (training) {
    const memory dy_user = user_memory(dst_dims, tag::nchw, p.dy.data());
    memory::desc bd_diff_dst_desc;
    if (s.input_grad) {
      d->dx = ts::zeros<float>(s.x_shape());
      const dnnl::convolution_backward_data::primitive_desc bpd(
          dnnl::convolution_backward_data::desc(dnnl_algorithm, any_desc(src_dims),
                                                any_desc(wei_dims), any_desc(dst_dims), strides,
                                                dilates, pad, pad),
          engine(), fpd);
      d->bwd_data = dnnl::convolution_backward_data(bpd);
      d->bd_diff_dst = bind("dy", dy_user, bpd.diff_dst_desc(), true);
      d->bd_wei = bind("w", user_memory(wei_dims, wei_tag, p.w.data()), bpd.weights_desc(), true);
      d->bd_diff_src =
          bind("dx", user_memory(src_dims, tag::nchw, d->dx.data()), bpd.diff_src_desc(), false);
      d->bd_args = {{DNNL_ARG_DIFF_DST, d->bd_diff_dst.prim},
                    {DNNL_ARG_WEIGHTS, d->bd_wei.prim},
                    {DNNL_ARG_DIFF_SRC, d->bd_diff_src.prim}};
      bd_diff_dst_desc = bpd.diff_dst_desc();
      d->info.append(", bwd_data ")
          .append(describe(bpd.impl_info_str(), {&d->bd_diff_dst, &d->bd_wei, &d->bd_diff_src}));
    }
    d->dw = ts::zeros<float>(s.w_shape());
    d->db = ts::zeros<float>(ts::Shape{s.k});
    const dnnl::convolution_backward_weights::primitive_desc wpd(
        dnnl::convolution_backward_weights::desc(dnnl_algorithm, any_desc(src_dims),
                                                 any_desc(wei_dims), any_desc(bias_dims),
                                                 any_desc(dst_dims), strides, dilates, pad, pad),
        engine(), fpd);
    d->bwd_weights = dnnl::convolution_backward_weights(wpd);
    d->bw_src = bind("x", user_memory(src_dims, tag::nchw, p.x.data()), wpd.src_desc(), true);
    d->bw_diff_dst = bind("dy", dy_user, wpd.diff_dst_desc(), true);
    if (s.input_grad && d->bw_diff_dst.reorders && wpd.diff_dst_desc() == bd_diff_dst_desc) {
      // One reorder of dy serves both backward primitives (backward_data loads it first).
      d->bw_diff_dst.prim = d->bd_diff_dst.prim;
      d->bw_diff_dst.reorders = false;
    }
    d->bw_diff_wei =
        bind("dw", user_memory(wei_dims, wei_tag, d->dw.data()), wpd.diff_weights_desc(), false);
    d->bw_diff_bias =
        bind("db", user_memory(bias_dims, tag::x, d->db.data()), wpd.diff_bias_desc(), false);
    d->bw_args = {{DNNL_ARG_SRC, d->bw_src.prim},
                  {DNNL_ARG_DIFF_DST, d->bw_diff_dst.prim},
                  {DNNL_ARG_DIFF_WEIGHTS, d->bw_diff_wei.prim},
                  {DNNL_ARG_DIFF_BIAS, d->bw_diff_bias.prim}};
    d->info.append(", bwd_weights ")
        .append(describe(wpd.impl_info_str(),
                         {&d->bw_src, &d->bw_diff_dst, &d->bw_diff_wei, &d->bw_diff_bias}));
  }
  return d;
}

// Created (and cached) after the thread count is set: oneDNN splits the work at creation.
dnnl_conv& get_dnnl(size_t shape, bool training, int t) {
  static std::map<std::tuple<size_t, bool, int>, std::unique_ptr<dnnl_conv>> cache;
  auto& d = cache[{shape, training, t}];
  if (!d) d = make_dnnl(get_problem(shape), training);
  return *d;
}
#endif

// ---------------------------------------------------------------- correctness checks
enum class result { y, dx, dw, db };
const char* result_name(result r) {
  switch (r) {
    case result::y:
      return "y";
    case result::dx:
      return "dx";
    case result::dw:
      return "dw";
    case result::db:
      return "db";
  }
  return "?";
}

// Float64 value of element idx of one result, and the sum of |terms| (the scale of the rounding
// error). Plain loops over the definitions: slow, used on a few elements.
std::pair<double, double> reference(const problem& p, result r, int64_t idx) {
  const conv_shape& s = p.sh;
  const float *x = p.x.data(), *w = p.w.data(), *b = p.b.data(), *dy = p.dy.data();
  const int64_t ho = s.ho(), wo = s.wo(), cg = s.cg(), kg = s.kg();
  double v = 0, mag = 0;
  const auto add = [&v, &mag](double t) { v += t, mag += std::abs(t); };
  if (r == result::y) {  // y[n, k, oh, ow]
    const int64_t ow = idx % wo, oh = idx / wo % ho, k = idx / (wo * ho) % s.k,
                  n = idx / (wo * ho * s.k);
    const int64_t g = k / kg;
    add(b[k]);
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t i = 0; i < s.r; ++i)
        for (int64_t j = 0; j < s.s; ++j) {
          const int64_t ih = oh * s.stride - s.pad + i, iw = ow * s.stride - s.pad + j;
          if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
          add(double(x[((n * s.c + g * cg + c) * s.h + ih) * s.w + iw]) *
              double(w[((k * cg + c) * s.r + i) * s.s + j]));
        }
  } else if (r == result::dx) {  // dx[n, c, ih, iw]
    const int64_t iw = idx % s.w, ih = idx / s.w % s.h, c = idx / (s.w * s.h) % s.c,
                  n = idx / (s.w * s.h * s.c);
    const int64_t g = c / cg, cl = c % cg;
    for (int64_t k = g * kg; k < (g + 1) * kg; ++k)
      for (int64_t i = 0; i < s.r; ++i)
        for (int64_t j = 0; j < s.s; ++j) {
          const int64_t th = ih + s.pad - i, tw = iw + s.pad - j;
          if (th < 0 || tw < 0 || th % s.stride || tw % s.stride) continue;
          const int64_t oh = th / s.stride, ow = tw / s.stride;
          if (oh >= ho || ow >= wo) continue;
          add(double(dy[((n * s.k + k) * ho + oh) * wo + ow]) *
              double(w[((k * cg + cl) * s.r + i) * s.s + j]));
        }
  } else if (r == result::dw) {  // dw[k, c, i, j]
    const int64_t j = idx % s.s, i = idx / s.s % s.r, cl = idx / (s.s * s.r) % cg,
                  k = idx / (s.s * s.r * cg);
    const int64_t c = k / kg * cg + cl;
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          const int64_t ih = oh * s.stride - s.pad + i, iw = ow * s.stride - s.pad + j;
          if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
          add(double(dy[((n * s.k + k) * ho + oh) * wo + ow]) *
              double(x[((n * s.c + c) * s.h + ih) * s.w + iw]));
        }
  } else {  // db[k]
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t q = 0; q < ho * wo; ++q) add(dy[(n * s.k + idx) * ho * wo + q]);
  }
  return {v, mag};
}

std::string element_name(result r, const ts::Tensor<float>& t, int64_t idx) {
  std::string out = result_name(r);
  const ts::Shape shape = t.shape();
  std::vector<int64_t> at(static_cast<size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    at[static_cast<size_t>(d)] = idx % shape[d];
    idx /= shape[d];
  }
  out.append("[");
  for (size_t d = 0; d < at.size(); ++d) out.append(d ? "," : "").append(std::to_string(at[d]));
  return out.append("]");
}

std::string format(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

constexpr double kRefTolerance = 1e-3;   // of the sum of |terms|, against float64
constexpr double kPairTolerance = 1e-4;  // max |a - b| over max |b|, tessera against oneDNN

// Empty when got matches the float64 reference on 256 elements spread over it (first and last
// included), else a message naming the first element off.
std::string verify(const problem& p, result r, const ts::Tensor<float>& got, const char* who) {
  const int64_t numel = got.numel(), samples = std::min<int64_t>(numel, 256);
  const float* g = got.data();
  for (int64_t q = 0; q < samples; ++q) {
    const int64_t idx = samples == numel ? q : q * (numel - 1) / (samples - 1);
    const auto [want, mag] = reference(p, r, idx);
    const double bound = kRefTolerance * mag;
    if (!(std::abs(double(g[idx]) - want) <= bound))
      return format("%s: %s computes a wrong %s = %.9g, float64 reference %.9g (allowed %.3g)",
                    p.sh.name.c_str(), who, element_name(r, got, idx).c_str(), double(g[idx]), want,
                    bound);
  }
  return "";
}

// The checks' findings: per library (0 tessera, 1 oneDNN) and stage (0 forward: y; 1 backward:
// dx, dw, db), the first error found. A forward error stops both passes of that library, a
// backward one its fwd_bwd pass only.
struct check_result {
  std::string error[2][2];
  double rel_diff = 0;  // largest over the results of max |tessera - oneDNN| / max |oneDNN|

  static int stage(result r) { return r == result::y ? 0 : 1; }
  bool ok(int lib, result r) const { return error[lib][stage(r)].empty(); }
  void note(int lib, result r, const std::string& msg) {
    if (ok(lib, r)) error[lib][stage(r)] = msg;
  }
  void note_all(int lib, const std::string& msg) {
    for (result r : {result::y, result::dw}) note(lib, r, msg);
  }
  const std::string& stopping(int lib, bool backward) const {
    return backward && error[lib][0].empty() ? error[lib][1] : error[lib][0];
  }
};

// Compares tessera's result with oneDNN's over the whole tensors (unless one is known wrong
// already); on a disagreement, blames the library (or both) whose value at the worst element is
// off the float64 reference by at least half the difference (one of them is, whatever the
// reference).
[[maybe_unused]] void compare(check_result& c, const problem& p, result r, const char* what,
                              const ts::Tensor<float>& t, const ts::Tensor<float>& d) {
  if (!c.ok(0, r) || !c.ok(1, r)) return;
  const float *a = t.data(), *b = d.data();
  double worst = -1, scale = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double diff = std::abs(double(a[i]) - double(b[i]));
    if (!(diff <= worst)) worst = diff, at = i;  // NaN counts as the worst
    scale = std::max(scale, std::abs(double(b[i])));
  }
  const double rel = worst / std::max(scale, 1e-30);
  c.rel_diff = std::max(c.rel_diff, std::isnan(rel) ? HUGE_VAL : rel);
  if (rel <= kPairTolerance) return;
  const double want = reference(p, r, at).first;
  const std::string msg = format(
      "%s: tessera and oneDNN (%s) disagree: max |diff| %.3g is %.3g of max |%s| %.3g (allowed "
      "%.0e); at %s tessera %.9g, oneDNN %.9g, float64 reference %.9g",
      p.sh.name.c_str(), what, worst, rel, result_name(r), scale, kPairTolerance,
      element_name(r, t, at).c_str(), double(a[at]), double(b[at]), want);
  const double half = 0.5 * std::abs(double(a[at]) - double(b[at]));
  const bool t_off = !(std::abs(double(a[at]) - want) < half);
  const bool d_off = !(std::abs(double(b[at]) - want) < half);
  if (t_off || !d_off) c.note(0, r, msg);
  if (d_off || !t_off) c.note(1, r, msg);
}

void fill_nan(const ts::Tensor<float>& t) {
  std::fill(t.data(), t.data() + t.numel(), std::numeric_limits<float>::quiet_NaN());
}

// Runs each library once on shape i at t threads (the caller has set them) and checks the results.
const check_result& get_check(size_t i, int t) {
  static std::map<std::pair<size_t, int>, check_result> cache;
  const auto key = std::make_pair(i, t);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  check_result& c = cache[key];
  problem& p = get_problem(i);
  const bool dx = p.sh.input_grad;

  grads tg;
  try {
    fill_nan(p.y);
    tessera_forward(p);
    tg = tessera_backward(p);
    for (const auto& [r, got] : {std::pair{result::y, p.y}, std::pair{result::dw, tg.dw},
                                 std::pair{result::db, tg.db}, std::pair{result::dx, tg.dx}})
      if ((r != result::dx || dx) && c.ok(0, r)) c.note(0, r, verify(p, r, got, "tessera"));
  } catch (const std::exception& e) {
    c.note_all(0, p.sh.name + ": tessera throws: " + e.what());
  }
#ifdef TESSERA_BENCH_HAVE_DNNL
  try {
    dnnl_conv& inf = get_dnnl(i, false, t);
    dnnl_conv& tr = get_dnnl(i, true, t);
    fill_nan(inf.y), fill_nan(tr.y), fill_nan(tr.dw), fill_nan(tr.db);
    if (dx) fill_nan(tr.dx);
    inf.forward(true);
    tr.forward(true);
    tr.backward(true);
    for (const auto& [r, got] :
         {std::pair{result::y, inf.y}, std::pair{result::y, tr.y}, std::pair{result::dw, tr.dw},
          std::pair{result::db, tr.db}, std::pair{result::dx, tr.dx}})
      if ((r != result::dx || dx) && c.ok(1, r)) c.note(1, r, verify(p, r, got, "oneDNN"));
    compare(c, p, result::y, "forward_inference", p.y, inf.y);
    compare(c, p, result::y, "forward_training", p.y, tr.y);
    compare(c, p, result::dw, "backward_weights", tg.dw, tr.dw);
    compare(c, p, result::db, "backward_weights bias", tg.db, tr.db);
    if (dx) compare(c, p, result::dx, "backward_data", tg.dx, tr.dx);
  } catch (const dnnl::error& e) {
    c.note_all(1, p.sh.name + ": oneDNN fails: " + e.what());
  }
#endif
  for (const auto& lib : c.error)
    for (const std::string& e : lib)
      if (!e.empty()) std::fprintf(stderr, "bench_conv: %s\n", e.c_str());
  return c;
}

// ---------------------------------------------------------------- benchmarks
enum class pass { fwd, fwd_bwd };
enum class impl { tessera, tessera_winograd, dnnl, dnnl_blocked };

// Winograd's results against tessera's direct ones (checked by get_check): the largest
// |winograd - direct| relative to max |direct| over y, dw (and dx where the shape has it).
double winograd_rel_diff(problem& p) {
  const auto rel = [](const ts::Tensor<float>& a, const ts::Tensor<float>& b) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      worst = std::max(worst, std::abs(double(a.data()[i]) - double(b.data()[i])));
      scale = std::max(scale, std::abs(double(b.data()[i])));
    }
    return std::isnan(worst) ? 1.0 : worst / std::max(scale, 1e-30);
  };
  tessera_forward(p);
  const ts::Tensor<float> y_direct = p.y.clone();
  const grads direct = tessera_backward(p);
  ts::set_float32_conv_algorithm(ts::conv_algorithm::winograd);
  tessera_forward(p);
  const grads wino = tessera_backward(p);
  ts::set_float32_conv_algorithm(ts::conv_algorithm::gemm);
  double d = rel(p.y, y_direct);
  if (p.sh.input_grad) d = std::max(d, rel(wino.dx, direct.dx));
  d = std::max(d, rel(wino.dw, direct.dw));
  return d;
}

void add(pass ps, impl im, size_t shape, int t) {
  const char* impl_name = im == impl::tessera            ? "tessera"
                          : im == impl::tessera_winograd ? "tessera_winograd"
                          : im == impl::dnnl             ? "dnnl"
                                                         : "dnnl_blocked";
  const conv_shape& s = all_shapes()[shape];
  std::string name = ps == pass::fwd ? "fwd/" : "fwd_bwd/";
  name.append(impl_name).append("/").append(s.name).append("/threads:").append(std::to_string(t));
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
    ts::set_num_threads(t);
    omp_set_num_threads(t);
    problem& p = get_problem(shape);
    const check_result& c = get_check(shape, t);
    const bool ours = im == impl::tessera || im == impl::tessera_winograd;
    const std::string& error = c.stopping(ours ? 0 : 1, ps == pass::fwd_bwd);
    if (!error.empty()) {
      st.SkipWithError(error.c_str());
      return;
    }
    std::string label = std::string(impl_name) + " " + s.name + ": " + s.describe();
    std::function<void()> run;
    // tessera_winograd: the algorithm for this benchmark only, its results checked first.
    struct algorithm_scope {
      explicit algorithm_scope(bool on) {
        if (on) ts::set_float32_conv_algorithm(ts::conv_algorithm::winograd);
      }
      ~algorithm_scope() { ts::set_float32_conv_algorithm(ts::conv_algorithm::gemm); }
    };
    if (im == impl::tessera_winograd) {
      const double d = winograd_rel_diff(p);
      st.counters["rel_diff"] = d;
      if (!(d <= 1e-4)) {
        st.SkipWithError(
            format("%s: Winograd differs from the direct sums by %.3g", s.name.c_str(), d).c_str());
        return;
      }
    }
    const algorithm_scope algorithm(im == impl::tessera_winograd);
    if (ours) {
      if (ps == pass::fwd)
        run = [&p] { tessera_forward(p); };
      else
        run = [&p] {
          tessera_forward(p);
          const grads g = tessera_backward(p);
          benchmark::DoNotOptimize(g.dw.data());
        };
#ifdef TESSERA_BENCH_HAVE_DNNL
      if (im == impl::tessera) st.counters["rel_diff"] = c.rel_diff;
#endif
    } else {
#ifdef TESSERA_BENCH_HAVE_DNNL
      dnnl_conv& d = get_dnnl(shape, ps == pass::fwd_bwd, t);
      const bool nchw = im == impl::dnnl;
      if (!nchw) d.load_inputs();
      if (ps == pass::fwd)
        run = [&d, nchw] { d.forward(nchw); };
      else
        run = [&d, nchw] { d.forward(nchw), d.backward(nchw); };
      label.append("; ").append(d.info);
#endif
    }
    run();  // warm-up: caches, page faults, thread pools
    for (auto _ : st) {
      run();
      benchmark::ClobberMemory();
    }
    set_flops(st, ps == pass::fwd ? s.flops() : s.flops_fwd_bwd());
    st.SetLabel(label);
  });
  b->UseRealTime()->Unit(benchmark::kMillisecond);
  if (!user_min_time) b->MinTime(kMinTime);
}

// Takes --conv_threads=1,2 and --dnnl_algorithm=direct|auto out of argv; false on a bad value.
bool parse_own_flags(int& argc, char** argv, std::vector<int>& threads) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--conv_threads=", 0) == 0) {
      threads.clear();
      for (size_t pos = a.find('=') + 1; pos < a.size();) {
        const size_t end = std::min(a.find(',', pos), a.size());
        const int t = std::atoi(a.substr(pos, end - pos).c_str());
        if (t < 1) return false;
        threads.push_back(t);
        pos = end + 1;
      }
      if (threads.empty()) return false;
    } else if (a.rfind("--dnnl_algorithm=", 0) == 0) {
      const std::string v = a.substr(a.find('=') + 1);
      if (v != "direct" && v != "auto") return false;
#ifdef TESSERA_BENCH_HAVE_DNNL
      dnnl_algorithm =
          v == "auto" ? dnnl::algorithm::convolution_auto : dnnl::algorithm::convolution_direct;
#endif
    } else {
      if (a.rfind("--benchmark_min_time", 0) == 0) user_min_time = true;
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads{2};
  if (!parse_own_flags(argc, argv, threads)) {
    std::fprintf(stderr,
                 "bench_conv: own flags are --conv_threads=T[,T...] (default 2) and "
                 "--dnnl_algorithm=direct|auto (default direct)\n");
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
#ifdef TESSERA_BENCH_HAVE_DNNL
  benchmark::AddCustomContext("dnnl_algorithm", dnnl_algorithm == dnnl::algorithm::convolution_auto
                                                    ? "convolution_auto"
                                                    : "convolution_direct");
#endif
  for (size_t i = 0; i < all_shapes().size(); ++i)
    for (pass ps : {pass::fwd, pass::fwd_bwd})
      for (int t : threads) {
        add(ps, impl::tessera, i, t);
        if (all_shapes()[i].winograd()) add(ps, impl::tessera_winograd, i, t);
#ifdef TESSERA_BENCH_HAVE_DNNL
        add(ps, impl::dnnl, i, t);
        add(ps, impl::dnnl_blocked, i, t);
#endif
      }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
