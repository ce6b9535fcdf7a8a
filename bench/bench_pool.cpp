// Pooling throughput at 2 threads: tessera next to oneDNN (when found) and a plain OpenMP copy
// loop moving the same number of bytes (the memory-bandwidth ceiling), on the same inputs.
// Counter "GB/s": bytes read + written once per call (input, output, int64 indices where tessera
// produces or reads them; oneDNN's own workspace where it uses one).
//
// Names are <op>/<impl>/<N>x<C>x<H>x<W>  (Google Benchmark appends /real_time):
//   max2x2         2x2 stride 2 max pooling          max3x3s2p1   ResNet's 3x3 stride 2 pad 1
//   avg2x2         2x2 stride 2 average pooling       global_avg   mean of each plane
//   max2x2_bwd, max3x3s2p1_bwd   max_pool2d_backward from the forward's indices
// impl: tessera (out= form, values only), tessera_idx (max_pool2d_with_indices, out= form),
// tessera_alloc (a fresh result per call, through the caching allocator), onednn_inf
// (forward_inference, no workspace), onednn_train (forward_training, with its workspace),
// copy_ceiling / copy_ceiling_idx (an OpenMP copy of as many bytes as tessera / tessera_idx move).
// Both libraries read NCHW (oneDNN: format_tag::nchw, the layout tessera uses).
//
// Before timing, tessera's result is checked against oneDNN's (values, and indices through the
// backward pass) where both run; a mismatch stops that benchmark with an error.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tessera/tessera.hpp>
#include <unordered_map>
#include <vector>

#ifdef TESSERA_BENCH_HAVE_DNNL
#include <dnnl.hpp>
#endif

namespace ts = tessera;

namespace {

constexpr int kThreads = 2;
using shape4 = std::array<int64_t, 4>;

void set_bytes(benchmark::State& st, double bytes_per_iter) {
  st.counters["GB/s"] = benchmark::Counter(
      bytes_per_iter, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

std::string shape_name(const shape4& s) {
  return std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]) + "x" +
         std::to_string(s[3]);
}

/// One pooling configuration.
struct pool_case {
  const char* name;
  shape4 in;
  ts::Pool2dOptions opts;
  enum kind { max, avg, global } k;
  shape4 out() const {
    if (k == global) return {in[0], in[1], 1, 1};
    auto ext = [&](int a) {
      const int64_t s = opts.stride[a] ? opts.stride[a] : opts.kernel[a];
      return (in[2 + a] + 2 * opts.padding[a] - opts.kernel[a]) / s + 1;
    };
    return {in[0], in[1], ext(0), ext(1)};
  }
  int64_t numel_in() const { return in[0] * in[1] * in[2] * in[3]; }
  int64_t numel_out() const {
    const auto o = out();
    return o[0] * o[1] * o[2] * o[3];
  }
  double bytes() const { return 4.0 * static_cast<double>(numel_in() + numel_out()); }
  double bytes_idx() const { return bytes() + 8.0 * static_cast<double>(numel_out()); }
  // backward: grad_out + indices read, grad_in written
  double bytes_bwd() const {
    return 4.0 * static_cast<double>(numel_out() + numel_in()) +
           8.0 * static_cast<double>(numel_out());
  }
};

/// Inputs and outputs of one case, made once and reused by every implementation.
struct buffers {
  ts::Tensor<float> x, y, gy;
  ts::Tensor<int64_t> idx;
  explicit buffers(const pool_case& c) {
    ts::Generator g(7);
    const auto o = c.out();
    x = ts::rand<float>({c.in[0], c.in[1], c.in[2], c.in[3]}, g, -1, 1);
    y = ts::zeros<float>({o[0], o[1], o[2], o[3]});
    gy = ts::rand<float>({o[0], o[1], o[2], o[3]}, g, -1, 1);
    idx = ts::zeros<int64_t>({o[0], o[1], o[2], o[3]});
    if (c.k == pool_case::max) ts::max_pool2d_with_indices(x, c.opts, y, idx);
  }
};
buffers& data(const pool_case& c) {
  static std::map<std::string, std::unique_ptr<buffers>> cache;
  auto& p = cache[std::string(c.name) + shape_name(c.in)];
  if (!p) p = std::make_unique<buffers>(c);
  return *p;
}

// ---------------------------------------------------------------- the ceiling
/// Source and destination of the copy loop, grown on demand and touched once.
float* copy_buffer(int which, int64_t n) {
  static std::vector<float> buf[2];
  if (static_cast<int64_t>(buf[which].size()) < n) buf[which].assign(static_cast<size_t>(n), 1.f);
  return buf[which].data();
}
void copy_ceiling(benchmark::State& st, double bytes) {
  const int64_t n = static_cast<int64_t>(bytes / 8);  // n floats read + n written
  const float* src = copy_buffer(0, n);
  float* dst = copy_buffer(1, n);
  for (auto _ : st) {
#pragma omp parallel for simd num_threads(kThreads) schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
    benchmark::ClobberMemory();
  }
  set_bytes(st, 8.0 * static_cast<double>(n));
}

// ---------------------------------------------------------------- tessera
void tessera_forward(benchmark::State& st, const pool_case& c, bool with_indices, bool alloc) {
  auto& d = data(c);
  ts::set_num_threads(kThreads);
  for (auto _ : st) {
    if (c.k == pool_case::global) {
      if (alloc)
        benchmark::DoNotOptimize(ts::global_avg_pool2d(d.x).data());
      else
        ts::global_avg_pool2d(d.x, d.y);
    } else if (c.k == pool_case::avg) {
      if (alloc)
        benchmark::DoNotOptimize(ts::avg_pool2d(d.x, c.opts).data());
      else
        ts::avg_pool2d(d.x, c.opts, d.y);
    } else if (with_indices) {
      if (alloc)
        benchmark::DoNotOptimize(ts::max_pool2d_with_indices(d.x, c.opts).values.data());
      else
        ts::max_pool2d_with_indices(d.x, c.opts, d.y, d.idx);
    } else {
      if (alloc)
        benchmark::DoNotOptimize(ts::max_pool2d(d.x, c.opts).data());
      else
        ts::max_pool2d(d.x, c.opts, d.y);
    }
    benchmark::ClobberMemory();
  }
  set_bytes(st, with_indices ? c.bytes_idx() : c.bytes());
}

void tessera_backward(benchmark::State& st, const pool_case& c) {
  auto& d = data(c);
  ts::set_num_threads(kThreads);
  const ts::Shape in{c.in[0], c.in[1], c.in[2], c.in[3]};
  (void)ts::max_pool2d_backward(d.gy, d.idx, in);  // warm-up: fills the allocator's cache
  for (auto _ : st) benchmark::DoNotOptimize(ts::max_pool2d_backward(d.gy, d.idx, in).data());
  set_bytes(st, c.bytes_bwd());
}

// ---------------------------------------------------------------- oneDNN
#ifdef TESSERA_BENCH_HAVE_DNNL
struct dnnl_env {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
};
dnnl_env& dnnl_ctx() {
  static dnnl_env e;
  return e;
}
dnnl::memory::dims dims_of(const shape4& s) { return {s[0], s[1], s[2], s[3]}; }

/// oneDNN's forward primitive for case c (its descriptor, so backward can take it as a hint).
dnnl::pooling_forward::primitive_desc dnnl_forward_pd(const pool_case& c, dnnl::prop_kind prop) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const auto o = c.out();
  const dnnl::memory::desc src(dims_of(c.in), dt::f32, tag::nchw),
      dst(dims_of(o), dt::f32, tag::nchw);
  dnnl::memory::dims kernel, strides, pl, pr;
  for (int a = 0; a < 2; ++a) {
    const int64_t k = c.k == pool_case::global ? c.in[2 + a] : c.opts.kernel[a];
    const int64_t s = c.k == pool_case::global ? 1 : (c.opts.stride[a] ? c.opts.stride[a] : k);
    const int64_t p = c.k == pool_case::global ? 0 : c.opts.padding[a];
    kernel.push_back(k), strides.push_back(s), pl.push_back(p);
    pr.push_back((o[2 + a] - 1) * s + k - c.in[2 + a] - p);
  }
  const auto alg = c.k == pool_case::max ? dnnl::algorithm::pooling_max
                                         : dnnl::algorithm::pooling_avg_include_padding;
  dnnl::pooling_forward::desc desc(prop, alg, src, dst, strides, kernel, pl, pr);
  return {desc, dnnl_ctx().eng};
}

bool same_values(const ts::Tensor<float>& a, const std::vector<float>& b) {
  const auto v = a.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (std::abs(v[i] - b[i]) > 1e-5f * (1 + std::abs(b[i]))) return false;
  return v.size() == b.size();
}

void onednn_forward(benchmark::State& st, const pool_case& c, bool training) {
  auto& d = data(c);
  omp_set_num_threads(kThreads);
  auto& ctx = dnnl_ctx();
  const auto pd = dnnl_forward_pd(
      c, training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference);
  const dnnl::pooling_forward prim(pd);
  std::vector<float> out(static_cast<size_t>(c.numel_out()));
  dnnl::memory src(pd.src_desc(), ctx.eng, d.x.data()), dst(pd.dst_desc(), ctx.eng, out.data());
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  double ws_bytes = 0;
  if (training && pd.workspace_desc().get_size() > 0) {
    args.insert({DNNL_ARG_WORKSPACE, dnnl::memory(pd.workspace_desc(), ctx.eng)});
    ws_bytes = static_cast<double>(pd.workspace_desc().get_size());
  }
  prim.execute(ctx.strm, args);
  ctx.strm.wait();
  ts::set_num_threads(kThreads);
  const auto want = c.k == pool_case::global ? ts::global_avg_pool2d(d.x)
                    : c.k == pool_case::avg  ? ts::avg_pool2d(d.x, c.opts)
                                             : ts::max_pool2d(d.x, c.opts);
  if (!same_values(want, out)) {
    st.SkipWithError("tessera and oneDNN disagree");
    return;
  }
  for (auto _ : st) {
    prim.execute(ctx.strm, args);
    ctx.strm.wait();
  }
  set_bytes(st, c.bytes() + ws_bytes);
}

void onednn_backward(benchmark::State& st, const pool_case& c) {
  auto& d = data(c);
  omp_set_num_threads(kThreads);
  auto& ctx = dnnl_ctx();
  const auto fpd = dnnl_forward_pd(c, dnnl::prop_kind::forward_training);
  std::vector<float> out(static_cast<size_t>(c.numel_out()));
  dnnl::memory src(fpd.src_desc(), ctx.eng, d.x.data()), dst(fpd.dst_desc(), ctx.eng, out.data());
  dnnl::memory ws(fpd.workspace_desc(), ctx.eng);
  dnnl::pooling_forward(fpd).execute(
      ctx.strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_WORKSPACE, ws}});
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const auto o = c.out();
  const dnnl::memory::desc dsrc(dims_of(c.in), dt::f32, tag::nchw),
      ddst(dims_of(o), dt::f32, tag::nchw);
  dnnl::memory::dims kernel, strides, pl, pr;
  for (int a = 0; a < 2; ++a) {
    const int64_t k = c.opts.kernel[a], s = c.opts.stride[a] ? c.opts.stride[a] : k;
    kernel.push_back(k), strides.push_back(s), pl.push_back(c.opts.padding[a]);
    pr.push_back((o[2 + a] - 1) * s + k - c.in[2 + a] - c.opts.padding[a]);
  }
  dnnl::pooling_backward::desc bdesc(dnnl::algorithm::pooling_max, dsrc, ddst, strides, kernel, pl,
                                     pr);
  dnnl::pooling_backward::primitive_desc bpd(bdesc, ctx.eng, fpd);
  const dnnl::pooling_backward prim(bpd);
  std::vector<float> gx(static_cast<size_t>(c.numel_in()));
  dnnl::memory dd(bpd.diff_dst_desc(), ctx.eng, d.gy.data()),
      ds(bpd.diff_src_desc(), ctx.eng, gx.data());
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_DIFF_SRC, ds}, {DNNL_ARG_WORKSPACE, ws}};
  prim.execute(ctx.strm, args);
  ctx.strm.wait();
  ts::set_num_threads(kThreads);
  const auto want =
      ts::max_pool2d_backward(d.gy, d.idx, ts::Shape{c.in[0], c.in[1], c.in[2], c.in[3]});
  if (!same_values(want, gx)) {
    st.SkipWithError("tessera and oneDNN disagree");
    return;
  }
  for (auto _ : st) {
    prim.execute(ctx.strm, args);
    ctx.strm.wait();
  }
  set_bytes(st, 4.0 * static_cast<double>(c.numel_out() + c.numel_in()) +
                    static_cast<double>(fpd.workspace_desc().get_size()));
}
#endif

/// Registers <op>/<impl>/<shape>.
template <class F>
void add(const std::string& op, const char* impl, const shape4& s, F f) {
  std::string name = op;
  name.append("/").append(impl).append("/").append(shape_name(s));
  benchmark::RegisterBenchmark(name.c_str(), f)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void register_all() {
  const ts::Pool2dOptions k2{.kernel = {2, 2}};
  const ts::Pool2dOptions k3{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const shape4 small{64, 32, 28, 28}, large{8, 64, 112, 112};
  const std::vector<pool_case> forward = {{"max2x2", small, k2, pool_case::max},
                                          {"max2x2", large, k2, pool_case::max},
                                          {"max3x3s2p1", large, k3, pool_case::max},
                                          {"avg2x2", small, k2, pool_case::avg},
                                          {"avg2x2", large, k2, pool_case::avg},
                                          {"global_avg", {8, 2048, 7, 7}, {}, pool_case::global},
                                          {"global_avg", {8, 256, 56, 56}, {}, pool_case::global}};
  for (const auto& c : forward) {
    const std::string op = c.name;
    add(op, "copy_ceiling", c.in, [c](benchmark::State& st) { copy_ceiling(st, c.bytes()); });
    add(op, "tessera", c.in, [c](benchmark::State& st) { tessera_forward(st, c, false, false); });
    add(op, "tessera_alloc", c.in,
        [c](benchmark::State& st) { tessera_forward(st, c, false, true); });
    if (c.k == pool_case::max) {
      add(op, "copy_ceiling_idx", c.in,
          [c](benchmark::State& st) { copy_ceiling(st, c.bytes_idx()); });
      add(op, "tessera_idx", c.in,
          [c](benchmark::State& st) { tessera_forward(st, c, true, false); });
    }
#ifdef TESSERA_BENCH_HAVE_DNNL
    add(op, "onednn_inf", c.in, [c](benchmark::State& st) { onednn_forward(st, c, false); });
    if (c.k == pool_case::max)
      add(op, "onednn_train", c.in, [c](benchmark::State& st) { onednn_forward(st, c, true); });
#endif
  }
  const std::vector<pool_case> backward = {{"max2x2_bwd", small, k2, pool_case::max},
                                           {"max2x2_bwd", large, k2, pool_case::max},
                                           {"max3x3s2p1_bwd", large, k3, pool_case::max}};
  for (const auto& c : backward) {
    const std::string op = c.name;
    add(op, "copy_ceiling", c.in, [c](benchmark::State& st) { copy_ceiling(st, c.bytes_bwd()); });
    add(op, "tessera", c.in, [c](benchmark::State& st) { tessera_backward(st, c); });
#ifdef TESSERA_BENCH_HAVE_DNNL
    add(op, "onednn", c.in, [c](benchmark::State& st) { onednn_backward(st, c); });
#endif
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
