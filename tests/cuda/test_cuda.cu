// Tests of the CUDA backend's memory, copies and elementwise kernels: every result computed on
// the device is compared with the CPU backend's result on the same inputs (x.to<cuda>() ...
// .to<cpu>()). Every test skips, with a message, when no CUDA device is visible, so the suite
// builds and passes on GPU-less machines. Reductions are in test_cuda_reduce.cu.
#include <bit>
#include <limits>
#include <sstream>
#include <thread>

#include "cuda_test_util.cuh"

namespace ts = tessera;

// ---------------------------------------------------------------------------------------------
// Functions that define extended lambdas. nvcc requires the enclosing function to be a named,
// accessible function with a declared return type (a gtest body is a private member), so these
// live here rather than inside the tests.
namespace cuda_lambdas {

/// map_to with a plain __device__ lambda capturing a scalar: out = a * s - b.
inline const ts::Tensor<float, ts::cuda>& scaled_sub_into(const ts::Tensor<float, ts::cuda>& out,
                                                          const ts::Tensor<float, ts::cuda>& a,
                                                          const ts::Tensor<float, ts::cuda>& b,
                                                          float s) {
  return ts::map_to(
      out, [s] __device__(float x, float y) { return x * s - y; }, a, b);
}

/// map with a __host__ __device__ lambda of three inputs (its result type is visible on the
/// host, so map can allocate the output): a * b + c.
template <class B>
ts::Tensor<float, B> fma3(const ts::Tensor<float, B>& a, const ts::Tensor<float, B>& b,
                          const ts::Tensor<float, B>& c) {
  return ts::map([] __host__ __device__(float x, float y, float z) { return x * y + z; }, a, b, c);
}

/// True when ts::map can name the result type of F called on two floats.
template <class F>
concept map_sees_result_type = requires {
  typename ts::detail::map_result_t<F, float, float>;
};

/// map with a __device__ lambda with a trailing return type: |a - b|. Sets `supported` to false
/// (and returns an undefined tensor) where ts::map cannot see such a lambda's result type.
template <class T>
ts::Tensor<T, ts::cuda> absdiff(const ts::Tensor<T, ts::cuda>& a, const ts::Tensor<T, ts::cuda>& b,
                                bool& supported) {
  auto f = [] __device__(T x, T y) -> T { return x > y ? x - y : y - x; };
  if constexpr (map_sees_result_type<decltype(f)>) {
    supported = true;
    return ts::map(f, a, b);
  } else {
    supported = false;
    return {};
  }
}

}  // namespace cuda_lambdas

namespace {
using namespace cuda_test;

class Cuda : public CudaFixture {};
template <class T>
class CudaTyped : public CudaFixture {};
TYPED_TEST_SUITE(CudaTyped, Dtypes);

// ---------------------------------------------------------------------------------------------
// Memory and copies.

TEST_F(Cuda, AllocatorReusesFreedBlocksAndEmptiesCache) {
  ts::empty_cuda_cache();
  EXPECT_EQ(ts::cuda_cached_bytes(), 0u);
  void* p = ts::backend::memory<ts::cuda>::allocate(1000);
  ts::backend::memory<ts::cuda>::deallocate(p, 1000);
  EXPECT_GE(ts::cuda_cached_bytes(), 1000u);
  // Same rounded size: the cached block comes back instead of a new cudaMalloc.
  void* q = ts::backend::memory<ts::cuda>::allocate(900);
  EXPECT_EQ(p, q);
  ts::backend::memory<ts::cuda>::deallocate(q, 900);
  ts::empty_cuda_cache();
  EXPECT_EQ(ts::cuda_cached_bytes(), 0u);
}

// Out of device memory: cudaMalloc's failure first returns the cached blocks of other sizes to
// the driver and retries (a request that fits only without them succeeds), and a request that
// cannot fit at all is a backend_error naming the size and the free memory, not a crash.
TEST_F(Cuda, OutOfMemoryReleasesTheCacheThenFailsClearly) {
  using M = ts::backend::memory<ts::cuda>;
  ts::empty_cuda_cache();
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  constexpr size_t mib = size_t{1} << 20;
  const size_t first = free_bytes / 10 * 6 / mib * mib, second = free_bytes / 2 / mib * mib;
  void* a = M::allocate(first);
  M::deallocate(a, first);  // cached: the driver still counts it as used
  EXPECT_GE(ts::cuda_cached_bytes(), first);
  void* b = M::allocate(second);  // fits only once the cached block is released
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(ts::cuda_cached_bytes(), 0u) << "the cache was released to make room";
  M::deallocate(b, second);
  ts::empty_cuda_cache();

  const size_t huge = size_t{1} << 50;  // a petabyte: no device has it
  try {
    (void)M::allocate(huge);
    ADD_FAILURE() << "an allocation of 2^50 bytes succeeded";
  } catch (const ts::backend_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda allocate"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(huge)), std::string::npos) << what;
    EXPECT_NE(what.find("bytes free"), std::string::npos) << what;
  }
  // The failure left nothing behind: the device still allocates.
  void* c = M::allocate(1000);
  M::deallocate(c, 1000);
}

TEST_F(Cuda, RawCopiesAndZeroByteNoOps) {
  using M = ts::backend::memory<ts::cuda>;
  std::vector<int32_t> src(1000), back(1000, -1);
  for (int i = 0; i < 1000; ++i) src[i] = i * 7 - 3;
  void* a = M::allocate(4000);
  void* b = M::allocate(4000);
  M::copy_from_host(a, src.data(), 4000);
  M::copy(b, a, 4000);
  M::copy_to_host(back.data(), b, 4000);
  EXPECT_EQ(src, back);
  // Zero-byte copies touch nothing, even through null pointers.
  M::copy_from_host(nullptr, nullptr, 0);
  M::copy_to_host(nullptr, nullptr, 0);
  M::copy(nullptr, nullptr, 0);
  M::synchronize();
  M::deallocate(a, 4000);
  M::deallocate(b, 4000);
}

/// Waits for the stream made by f().
template <class F>
int64_t waits_during(F&& f) {
  const int64_t before = ts::cuda_activity_counts().host_waits;
  f();
  return ts::cuda_activity_counts().host_waits - before;
}

TEST_F(Cuda, UploadsReturnWithoutWaitingAndFreeTheSourceAtOnce) {
  using staging = ts::detail::cuda_upload_staging;
  ts::backend::memory<ts::cuda>::synchronize();  // every staging block free
  std::vector<float> src(50000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 7.f;
  const std::vector<float> want = src;
  const ts::Tensor<float> host = ts::from_vector(src, {50000});
  ts::Tensor<float, ts::cuda> dev;
  EXPECT_EQ(waits_during([&] { dev = host.to<ts::cuda>(); }), 0);
  const auto raw = static_cast<float*>(ts::backend::memory<ts::cuda>::allocate(200000));
  EXPECT_EQ(
      waits_during([&] { ts::backend::memory<ts::cuda>::copy_from_host(raw, src.data(), 200000); }),
      0);
  std::fill(src.begin(), src.end(), -1.f);  // the call has read the source: reusing it is safe
  std::vector<float> back(src.size());
  ts::backend::memory<ts::cuda>::copy_to_host(back.data(), raw, 200000);
  EXPECT_EQ(back, want);
  EXPECT_EQ(dev.to<ts::cpu>().to_vector(), want);
  ts::backend::memory<ts::cuda>::deallocate(raw, 200000);

  // Once the copies are done, their blocks serve the next ones: the pool does not grow.
  ts::backend::memory<ts::cuda>::synchronize();
  const size_t blocks = staging::instance().blocks();
  for (int i = 0; i < 5; ++i) {
    (void)host.to<ts::cuda>();
    ts::backend::memory<ts::cuda>::synchronize();
  }
  EXPECT_EQ(staging::instance().blocks(), blocks);
}

TEST_F(Cuda, UploadsInFlightStayWithinThePoolAndLargeOnesWait) {
  using staging = ts::detail::cuda_upload_staging;
  ts::backend::memory<ts::cuda>::synchronize();
  // 200 uploads of 1 MiB without a read in between: 200 MiB in flight would be 3 pools.
  constexpr int copies = 200;
  constexpr int64_t n = (int64_t{1} << 20) / 4;
  std::vector<ts::Tensor<float, ts::cuda>> dev;
  std::vector<float> src(static_cast<size_t>(n));
  const int64_t waits = waits_during([&] {
    for (int i = 0; i < copies; ++i) {
      for (int64_t e = 0; e < n; e += 997) src[static_cast<size_t>(e)] = static_cast<float>(i + e);
      dev.push_back(ts::from_vector(src, {n}).to<ts::cuda>());
    }
  });
  EXPECT_LE(staging::instance().held_bytes(), staging::pool_bytes);
  // A full pool waits once and then has every block free again; on a GPU the early copies may
  // well be done before the pool fills. The emulation keeps every copy pending until a wait.
  EXPECT_LE(waits, copies / 32);
#if defined(TESSERA_CUDA_HOST_EMULATION)
  EXPECT_GE(waits, 1);
#endif
  for (int i = 0; i < copies; ++i) {
    const std::vector<float> got = dev[static_cast<size_t>(i)].to<ts::cpu>().to_vector();
    for (int64_t e = 0; e < n; e += 997)
      ASSERT_EQ(got[static_cast<size_t>(e)], static_cast<float>(i + e)) << "copy " << i;
  }

  // Beyond max_copy_bytes a copy goes straight from the source and waits.
  const int64_t big = static_cast<int64_t>(staging::max_copy_bytes / 4) + 1000;
  std::vector<float> large(static_cast<size_t>(big));
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<float>(i % 4099);
  const ts::Tensor<float> large_host = ts::from_vector(large, {big});
  ts::Tensor<float, ts::cuda> large_dev;
  EXPECT_EQ(waits_during([&] { large_dev = large_host.to<ts::cuda>(); }), 1);
  EXPECT_EQ(large_dev.to<ts::cpu>().to_vector(), large);
}

// ---------------------------------------------------------------------------------------------
// Streams.

/// A non-blocking stream of the test's own, destroyed at scope exit (after a device wait).
struct scoped_stream {
  cudaStream_t s = nullptr;
  scoped_stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~scoped_stream() {
    ts::backend::memory<ts::cuda>::synchronize();
    (void)cudaStreamDestroy(s);
  }
};

TEST_F(Cuda, StreamGuardSetsTheCallingThreadsStream) {
  const scoped_stream a, b;
  EXPECT_EQ(ts::cuda_stream(), cudaStreamLegacy);
  {
    const ts::cuda_stream_guard ga(a.s);
    EXPECT_EQ(ts::cuda_stream(), a.s);
    {
      const ts::cuda_stream_guard gb(b.s);
      EXPECT_EQ(ts::cuda_stream(), b.s);
    }
    EXPECT_EQ(ts::cuda_stream(), a.s);
    cudaStream_t other = nullptr;  // another thread keeps its own current stream
    std::thread([&] { other = ts::cuda_stream(); }).join();
    EXPECT_EQ(other, cudaStreamLegacy);
  }
  EXPECT_EQ(ts::cuda_stream(), cudaStreamLegacy);
}

TEST_F(Cuda, OpsRunOnTheCurrentStream) {
  const scoped_stream st;
  ts::Generator gen(3);
  const auto x = ts::randn<float, ts::cpu>({70, 33}, gen),
             y = ts::randn<float, ts::cpu>({33, 20}, gen);
  const auto want_map = (x * 2.f + 1.f).to_vector(), want_mm = ts::matmul(x, y).to_vector();
  std::vector<float> got_map, got_mm, got_sum;
  {
    const ts::cuda_stream_guard g(st.s);
    const auto xd = x.to<ts::cuda>(), yd = y.to<ts::cuda>();
#if defined(TESSERA_CUDA_HOST_EMULATION)
    EXPECT_EQ(tessera_cuda_emulation::last_stream, st.s) << "upload";
#endif
    const auto m = xd * 2.f + 1.f;
#if defined(TESSERA_CUDA_HOST_EMULATION)
    EXPECT_EQ(tessera_cuda_emulation::last_stream, st.s) << "map";
#endif
    const auto p = ts::matmul(xd, yd);
#if defined(TESSERA_CUDA_HOST_EMULATION)
    EXPECT_EQ(tessera_cuda_emulation::last_stream, st.s) << "matmul";
#endif
    const auto total = ts::sum(xd);
#if defined(TESSERA_CUDA_HOST_EMULATION)
    EXPECT_EQ(tessera_cuda_emulation::last_stream, st.s) << "sum";
#endif
    got_map = m.to_vector(), got_mm = p.to_vector(), got_sum = total.to_vector();  // waits on st
  }
  ASSERT_EQ(got_map.size(), want_map.size());
  for (size_t i = 0; i < got_map.size(); ++i) EXPECT_NEAR(got_map[i], want_map[i], 1e-5) << i;
  ASSERT_EQ(got_mm.size(), want_mm.size());
  for (size_t i = 0; i < got_mm.size(); ++i) EXPECT_NEAR(got_mm[i], want_mm[i], 1e-4) << i;
  EXPECT_NEAR(got_sum.at(0), ts::sum(x).item(), 1e-3);
  // Back on the default stream.
  (void)(x.to<ts::cuda>() + 1.f);
#if defined(TESSERA_CUDA_HOST_EMULATION)
  EXPECT_EQ(tessera_cuda_emulation::last_stream, cudaStreamLegacy);
#endif
}

TEST_F(Cuda, AllocatorKeepsBlocksPerStream) {
  using M = ts::backend::memory<ts::cuda>;
  const scoped_stream st;
  M::synchronize();
  void* on_default = M::allocate(12345);
  M::deallocate(on_default, 12345);
  void* on_stream = nullptr;
  {
    const ts::cuda_stream_guard g(st.s);
    on_stream = M::allocate(12345);  // the default stream's free block is not handed over
    EXPECT_NE(on_stream, on_default);
  }
  M::deallocate(on_stream, 12345);  // back to its own stream's list, whoever frees it
  void* again = M::allocate(12345);
  EXPECT_EQ(again, on_default);
  {
    const ts::cuda_stream_guard g(st.s);
    void* again_on_stream = M::allocate(12345);
    EXPECT_EQ(again_on_stream, on_stream);
    M::deallocate(again_on_stream, 12345);
  }
  M::deallocate(again, 12345);
}

TEST_F(Cuda, RecordedBlocksWaitForTheOtherStream) {
  auto& cache = ts::detail::device_block_cache::instance();
  const scoped_stream st;
  ts::backend::memory<ts::cuda>::synchronize();
  auto t = ts::zeros<float, ts::cuda>({3000});
  void* const block = t.storage()->ptr;
  {
    const ts::cuda_stream_guard g(st.s);
    const auto u = t * 3.f;  // the other stream reads t
    ts::cuda_record_stream(t, st.s);
  }
  const size_t waiting = cache.waiting_blocks();
  t = {};  // freed: an event on st guards its reuse
  EXPECT_EQ(cache.waiting_blocks(), waiting + 1);
  ts::Tensor<float, ts::cuda> v;  // kept alive, so that its block is not the one reused below
#if defined(TESSERA_CUDA_HOST_EMULATION)
  // The emulated event is pending until a wait: the block is not reused yet.
  v = ts::zeros<float, ts::cuda>({3000});
  EXPECT_NE(v.storage()->ptr, block);
#endif
  ts::backend::memory<ts::cuda>::synchronize();
  const auto w = ts::zeros<float, ts::cuda>({3000});  // st's work done: the block is back
  EXPECT_EQ(w.storage()->ptr, block);
  EXPECT_EQ(cache.waiting_blocks(), waiting);
}

TYPED_TEST(CudaTyped, RoundTripKeepsBits) {
  using T = TypeParam;
  for (const ts::Shape& s : {ts::Shape{}, ts::Shape{0}, ts::Shape{1, 0, 3}, ts::Shape{1},
                             ts::Shape{33}, ts::Shape{7, 5, 3}}) {
    const auto x = sample<T>(s, 11);
    const auto d = x.template to<ts::cuda>();
    EXPECT_EQ(d.shape(), s);
    EXPECT_TRUE(same_bits(d.template to<ts::cpu>(), x)) << s;
    const auto dd = d.template to<ts::cuda>();  // device clone
    EXPECT_FALSE(dd.shares_storage_with(d));
    EXPECT_TRUE(same_bits(dd.template to<ts::cpu>(), x)) << s;
    const auto v = d.to_vector();
    const auto w = x.to_vector();
    ASSERT_EQ(v.size(), w.size());
    if (!v.empty()) {  // memcmp must not see the null data() of an empty vector
      EXPECT_EQ(std::memcmp(v.data(), w.data(), v.size() * sizeof(T)), 0);
    }
  }
  EXPECT_EQ(as_double(ts::full<T, ts::cuda>({}, T(5)).item()), 5.0);
  if constexpr (!std::is_integral_v<T>) {  // specials survive the trip
    const std::vector<T> sp = {T(std::numeric_limits<float>::quiet_NaN()),
                               T(std::numeric_limits<float>::infinity()),
                               T(-std::numeric_limits<float>::infinity()), T(-0.0f)};
    const auto x = ts::from_vector<T, ts::cpu>(sp);
    EXPECT_TRUE(same_bits(x.template to<ts::cuda>().template to<ts::cpu>(), x));
  }
}

TEST_F(Cuda, BoolTensorsRoundTrip) {
  const auto x = ts::from_vector<bool, ts::cpu>({true, false, true, true, false});
  const auto d = x.to<ts::cuda>();
  EXPECT_EQ(d.to_vector(), x.to_vector());
  EXPECT_EQ(d.to<ts::cpu>().to_vector(), x.to_vector());
}

TYPED_TEST(CudaTyped, ViewsCloneAndContiguous) {
  using T = TypeParam;
  const auto x = sample<T>({4, 6, 10}, 3);
  const auto d = x.template to<ts::cuda>();
  auto check = [&](const char* what, auto view) {
    const auto want = view(x).clone();
    const auto got_clone = view(d).clone();
    const auto got_contig = view(d).contiguous();
    EXPECT_TRUE(got_contig.is_contiguous()) << what;
    EXPECT_TRUE(same_bits(got_clone.template to<ts::cpu>(), want)) << what;
    EXPECT_TRUE(same_bits(got_contig.template to<ts::cpu>(), want)) << what;
    EXPECT_TRUE(same_bits(view(d).template to<ts::cpu>(), want)) << what;  // to() of a view
  };
  check("transpose", [](const auto& t) { return t.transpose(0, 2); });
  check("permute", [](const auto& t) { return t.permute({1, 2, 0}); });
  check("slice step", [](const auto& t) { return t.slice(2, 1, 9, 3); });
  check("slice offset", [](const auto& t) { return t.slice(0, 1, 3); });  // dense, unaligned start
  check("select", [](const auto& t) { return t.select(1, 4).transpose(0, 1); });
  check("expand", [](const auto& t) { return t.slice(1, 2, 3).expand({4, 5, 10}); });
  check("flat offset", [](const auto& t) { return t.reshape({-1}).slice(0, 1, 240); });
  // contiguous() of a contiguous tensor is the same tensor, not a copy.
  EXPECT_TRUE(d.contiguous().shares_storage_with(d));
}

TYPED_TEST(CudaTyped, Astype) {
  using T = TypeParam;
  const auto x = sample<T>({5, 13}, 4).transpose(0, 1);
  expect_same(
      "astype<float>", 0, 0, [](const auto& t) { return t.template astype<float>(); }, x);
  expect_same(
      "astype<int32>", 0, 0, [](const auto& t) { return t.template astype<int32_t>(); }, x);
  expect_same(
      "astype<half>", 0, 0, [](const auto& t) { return t.template astype<ts::half>(); }, x);
  expect_same(
      "astype<bool>", 0, 0, [](const auto& t) { return t.template astype<bool>(); }, x);
  expect_same(
      "astype<double>", 0, 0, [](const auto& t) { return t.template astype<double>(); }, x);
}

TEST_F(Cuda, AstypeSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  const auto x = ts::from_vector<float, ts::cpu>(
      {nan, inf, -inf, 3e9f, -3e9f, 70000.f, 65519.f, 1e-8f, -2.5f});
  expect_same(
      "to int32", 0, 0, [](const auto& t) { return t.template astype<int32_t>(); }, x);
  expect_same(
      "to int8", 0, 0, [](const auto& t) { return t.template astype<int8_t>(); }, x);
  expect_same(
      "to half", 0, 0, [](const auto& t) { return t.template astype<ts::half>(); }, x);
  expect_same(
      "to bfloat16", 0, 0, [](const auto& t) { return t.template astype<ts::bfloat16>(); }, x);
  expect_same(
      "to e4m3", 0, 0, [](const auto& t) { return t.template astype<ts::float8_e4m3>(); }, x);
}

TYPED_TEST(CudaTyped, Fill) {
  using T = TypeParam;
  EXPECT_TRUE(same_bits(ts::zeros<T, ts::cuda>({3, 4}).template to<ts::cpu>(),
                        ts::zeros<T, ts::cpu>({3, 4})));
  EXPECT_TRUE(same_bits(ts::ones<T, ts::cuda>({1029}).template to<ts::cpu>(),
                        ts::ones<T, ts::cpu>({1029})));
  EXPECT_TRUE(same_bits(ts::full<T, ts::cuda>({0, 3}, T(7)).template to<ts::cpu>(),
                        ts::full<T, ts::cpu>({0, 3}, T(7))));
  // fill_ through a strided view writes exactly the view's elements.
  const auto h = ts::zeros<T, ts::cpu>({6, 9});
  const auto d = h.template to<ts::cuda>();
  h.slice(1, 1, 9, 2).fill_(T(3));
  d.slice(1, 1, 9, 2).fill_(T(3));
  EXPECT_TRUE(same_bits(d.template to<ts::cpu>(), h));
}

// ---------------------------------------------------------------------------------------------
// map and the named elementwise ops.

// nvcc contracts a * b + c into one fused multiply-add (--fmad=true, its default) where the host
// compiler rounds twice, so results of such functors differ from the CPU's in the last bits:
// absolute tolerances below are a few float ulps of the products' magnitude (inputs ~N(0, 1)).
TEST_F(Cuda, MapWithLibraryFunctor) {
  const auto x = sample<float>({37, 29}, 5), y = sample<float>({37, 29}, 6);
  expect_same(
      "axpy", 5e-7, 1e-5,
      [](const auto& a, const auto& b) { return ts::map(ts::fn::axpy<float>{2.5f}, a, b); }, x, y);
  // Broadcast and strided operands through the same functor.
  const auto r = sample<float>({29}, 7);
  expect_same(
      "axpy broadcast", 5e-7, 1e-5,
      [](const auto& a, const auto& b) { return ts::map(ts::fn::axpy<float>{-1.5f}, a, b); },
      x.transpose(0, 1).contiguous().transpose(0, 1), r);
}

TEST_F(Cuda, MapWithHostDeviceLambda) {
  const auto a = sample<float>({8, 1, 5}, 8), b = sample<float>({7, 1}, 9),
             c = sample<float>({5}, 10);
  const auto want = cuda_lambdas::fma3(a, b, c);
  const auto got = cuda_lambdas::fma3(a.to<ts::cuda>(), b.to<ts::cuda>(), c.to<ts::cuda>());
  expect_close(got.to<ts::cpu>(), want, 5e-7, 1e-5, "fma3");
}

TEST_F(Cuda, MapToWithDeviceLambda) {
  const auto a = sample<float>({16, 33}, 12), b = sample<float>({33}, 13);
  const auto out = ts::empty<float, ts::cuda>({16, 33});
  cuda_lambdas::scaled_sub_into(out, a.to<ts::cuda>(), b.to<ts::cuda>(), 3.0f);
  expect_close(out.to<ts::cpu>(), ts::map(ts::fn::axpy<float>{3.0f}, a, -b), 5e-7, 1e-5, "map_to");
  // In place: the output is also the first input.
  const auto io = a.to<ts::cuda>();
  cuda_lambdas::scaled_sub_into(io, io, b.to<ts::cuda>(), 3.0f);
  expect_close(io.to<ts::cpu>(), out.to<ts::cpu>(), 0, 0, "map_to in place");
}

TEST_F(Cuda, MapWithDeviceLambda) {
  const auto a = sample<float>({3, 50}, 14), b = sample<float>({50}, 15);
  bool supported = false;
  const auto got = cuda_lambdas::absdiff(a.to<ts::cuda>(), b.to<ts::cuda>(), supported);
  if (!supported)
    GTEST_SKIP() << "ts::map cannot see a __device__ lambda's result type: map_result_t must "
                    "invoke F& (nvcc's host-side placeholder has a non-const call operator)";
  expect_close(got.to<ts::cpu>(), ts::abs(a - b), 0, 0, "device lambda");
}

TYPED_TEST(CudaTyped, NamedOpsWithBroadcasting) {
  using T = TypeParam;
  const double rt = ulps2<T>();
  const auto a = sample<T>({33, 17}, 20), b = sample<T>({17}, 21), c = sample<T>({33, 1}, 22);
  expect_same(
      "add [N,C]+[C]", rt, 0, [](const auto& x, const auto& y) { return x + y; }, a, b);
  expect_same(
      "mul [N,1]*[C]", rt, 0, [](const auto& x, const auto& y) { return x * y; }, c, b);
  expect_same(
      "sub strided", rt, 0, [](const auto& x, const auto& y) { return ts::sub(x, y); },
      a.transpose(0, 1), c.transpose(0, 1));
  expect_same(
      "scalar", rt, 0, [](const auto& x) { return 2 * x - 1; }, a);
  expect_same(
      "exp", ulps2<ts::compute_t<typename decltype(ts::exp(a))::value_type>>() * 4, 0,
      [](const auto& x) { return ts::exp(x); }, ts::clamp(a, -10, 10));
  expect_same(
      "maximum", 0, 0, [](const auto& x, const auto& y) { return ts::maximum(x, y); }, a, c);
  expect_same(
      "where", 0, 0,
      [](const auto& x, const auto& y, const auto& z) { return ts::where(x > y, x, z); }, a, b, c);
  expect_same(
      "lt", 0, 0, [](const auto& x, const auto& y) { return x < y; }, a, b);
  expect_same(
      "ge", 0, 0, [](const auto& x, const auto& y) { return x >= y; }, c, a);
  expect_same(
      "eq", 0, 0, [](const auto& x, const auto& y) { return ts::eq(x, y); }, a, a.slice(0, 0, 1));
  expect_same(
      "neg abs", 0, 0, [](const auto& x) { return ts::abs(-x); }, a);
  // Sizes around the 16-byte vector width and its tail, contiguous and offset by one element.
  for (int64_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 1029}) {
    const auto u = sample<T>({n + 1}, 30 + n), v = sample<T>({n + 1}, 60 + n);
    expect_same(
        "add n", rt, 0, [](const auto& x, const auto& y) { return x + y; }, u, v);
    expect_same(
        "add n offset", rt, 0, [](const auto& x, const auto& y) { return x + y; },
        u.slice(0, 1, n + 1), v.slice(0, 0, n));
  }
}

TEST_F(Cuda, UnaryMathFloat) {
  const auto x = sample<float>({1000}, 40);
  const auto p = ts::abs(x) + 0.01f;
  expect_same(
      "log", 5e-7, 0, [](const auto& t) { return ts::log(t); }, p);
  expect_same(
      "sqrt", 5e-7, 0, [](const auto& t) { return ts::sqrt(t); }, p);
  expect_same(
      "tanh", 5e-7, 1e-7, [](const auto& t) { return ts::tanh(t); }, x);
  expect_same(
      "sigmoid", 5e-7, 1e-7, [](const auto& t) { return ts::sigmoid(t); }, x);
  expect_same(
      "relu", 0, 0, [](const auto& t) { return ts::relu(t); }, x);
  expect_same(
      "gelu", 5e-7, 1e-6, [](const auto& t) { return ts::gelu(t); }, x);
  expect_same(
      "gelu_tanh", 5e-7, 1e-6, [](const auto& t) { return ts::gelu_tanh(t); }, x);
  expect_same(
      "round", 0, 0, [](const auto& t) { return ts::round(t * 3.0f); }, x);
  expect_same(
      "pow", 5e-6, 0, [](const auto& a, const auto& b) { return ts::pow(a, b); }, p, x);
}

TEST_F(Cuda, LargeElementwise) {
  const int64_t n = (int64_t{1} << 22) + 3;
  const auto x = sample<float>({n}, 41), y = sample<float>({n}, 42);
  expect_same(
      "large add", 0, 0, [](const auto& a, const auto& b) { return a + b; }, x, y);
  expect_same(
      "large bcast", 0, 0,
      [](const auto& a, const auto& b) {
        return a.reshape({-1, 1031}).slice(0, 0, 2000) * b;
      },
      x.slice(0, 0, 2000 * 1031), y.slice(0, 0, 1031));
}

TYPED_TEST(CudaTyped, CompoundAssignment) {
  using T = TypeParam;
  const double rt = ulps2<T>();
  const auto a = sample<T>({9, 12}, 50), b = sample<T>({12}, 51), c = sample<T>({9, 1}, 52);
  auto run = [&](const auto& x, const auto& y, const auto& z) {
    auto t = x.clone();
    t += y;
    t *= z;
    t -= 1;
    t *= 2;
    t.slice(1, 0, 12, 3) += z;  // through a strided view
    return t;
  };
  expect_same("compound", rt * 4, 0, run, a, b, c);
}

TEST_F(Cuda, ShapeErrorsAreThrownBeforeLaunch) {
  const auto a = ts::zeros<float, ts::cuda>({3}), b = ts::zeros<float, ts::cuda>({4});
  EXPECT_THROW((void)(a + b), ts::shape_error);
  EXPECT_THROW((void)ts::where(a > 0, a, b), ts::shape_error);
  const auto m = ts::zeros<float, ts::cuda>({2, 3});
  EXPECT_THROW(m += (ts::zeros<float, ts::cuda>({2, 1, 3})), ts::shape_error);
  EXPECT_THROW(ts::map_to(b, ts::fn::identity{}, a), ts::shape_error);
  EXPECT_THROW((void)ts::max(ts::zeros<float, ts::cuda>({0, 3})), ts::shape_error);
  EXPECT_THROW((void)ts::sum(m, {2}), ts::index_error);
  EXPECT_THROW((void)ts::argmax(ts::zeros<float, ts::cuda>({0})), ts::shape_error);
  // The failed ops left the operands untouched.
  EXPECT_EQ(m.to_vector(), std::vector<float>(6, 0.f));
}

TEST_F(Cuda, PrintsLikeTheCpuTensor) {
  const auto x = sample<float>({2, 3}, 95);
  std::ostringstream a, b;
  a << x;
  b << x.to<ts::cuda>();
  EXPECT_EQ(a.str(), b.str());
}

#if defined(TESSERA_CUDA_HOST_EMULATION)
// The emulation's thread order (tests/cuda_emu/include/cuda_runtime.h), which every kernel test
// here relies on to catch a missing __syncthreads: between two barriers a block's threads run
// one at a time, by increasing index, by decreasing index, or by turns (mixed, the default).
namespace order_probe {
/// Each round, thread t of a 64-thread block writes a number unique to (round, block, t) into
/// shared memory and reads its lower neighbour's (thread 0 its own), with or without a barrier
/// between the write and the read.
__global__ void neighbour(int* out, int rounds, bool barrier) {
  int* const s = reinterpret_cast<int*>(ts::detail::cuda_dynamic_smem());
  const int t = static_cast<int>(threadIdx.x), b = static_cast<int>(blockIdx.x);
  const int blocks = static_cast<int>(gridDim.x);
  for (int r = 0; r < rounds; ++r) {
    s[t] = (r * blocks + b) * 64 + t;
    if (barrier) __syncthreads();
    out[(r * blocks + b) * 64 + t] = s[t > 0 ? t - 1 : 0];
    __syncthreads();  // the next round's write waits for this round's reads
  }
}

/// Thread 0 of every block writes its block's number to the same place: the last block wins.
__global__ void last_block(int* out) {
  if (threadIdx.x == 0) *out = static_cast<int>(blockIdx.x);
}

/// Thread i writes v into p[i].
__global__ void fill(int* p, int v) { p[threadIdx.x] = v; }

/// Block `writer` fills a static shared array (100 + its thread's index); every block's threads
/// then read their slot of it.
__global__ void static_shared(int* out, int writer) {
  TESSERA_CUDA_SHARED(int, s, [64]);
  const int t = static_cast<int>(threadIdx.x), b = static_cast<int>(blockIdx.x);
  if (b == writer) s[t] = 100 + t;
  __syncthreads();
  out[b * 64 + t] = s[t];
}

/// Runs neighbour under `how` and returns, per (round, block), whether every thread read what
/// its neighbour wrote that round.
std::vector<bool> rounds_right(tessera_cuda_emulation::thread_order how, int blocks, int rounds,
                               bool barrier) {
  const auto saved = tessera_cuda_emulation::order;
  tessera_cuda_emulation::order = how;
  const ts::detail::cuda_scratch out(sizeof(int) * 64 * static_cast<size_t>(blocks * rounds));
  auto* const o = static_cast<int*>(out.get());
  ts::detail::cuda_launch_smem("neighbour", neighbour, dim3(static_cast<unsigned>(blocks)),
                               dim3(64), 64 * sizeof(int), o, rounds, barrier);
  tessera_cuda_emulation::order = saved;
  std::vector<int> got(64 * static_cast<size_t>(blocks * rounds));
  EXPECT_EQ(cudaMemcpy(got.data(), o, got.size() * sizeof(int), cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::vector<bool> right;
  for (int rb = 0; rb < blocks * rounds; ++rb) {
    bool all = true;
    for (int t = 0; t < 64; ++t)
      all = all && got[static_cast<size_t>(rb * 64 + t)] == rb * 64 + (t > 0 ? t - 1 : 0);
    right.push_back(all);
  }
  return right;
}
}  // namespace order_probe

TEST(CudaEmulationOrder, AMissingBarrierGivesAThreadItsNeighboursOldValue) {
  using order_probe::rounds_right;
  using tessera_cuda_emulation::thread_order;
  using v = std::vector<bool>;
  // With the barrier, every order reads what was written.
  for (const auto how : {thread_order::forward, thread_order::reverse, thread_order::mixed})
    EXPECT_EQ(rounds_right(how, 2, 2, true), v(4, true));
  // Without it, increasing order alone hides the race (each reader runs after its writer) ...
  EXPECT_EQ(rounds_right(thread_order::forward, 2, 2, false), v(4, true));
  // ... decreasing order runs every reader first ...
  EXPECT_EQ(rounds_right(thread_order::reverse, 2, 2, false), v(4, false));
  // ... and mixed turns the order from one block, and from one barrier interval, to the next:
  // block 1 of a launch, or round 2 of a loop, reads before its neighbour writes.
  EXPECT_EQ(rounds_right(thread_order::mixed, 2, 1, false), v({true, false}));
  EXPECT_EQ(rounds_right(thread_order::mixed, 1, 2, false), v({true, false}));
}

// The emulation's work queue: kernels, asynchronous copies and event records run when the host
// waits for the device, the latest moment a GPU may run them, so host code that reads a result
// or reuses a buffer a copy still reads without waiting sees what a slow GPU would show it.
TEST(CudaEmulationQueue, WorkRunsWhenTheHostWaits) {
  if (!tessera_cuda_emulation::defer_work) GTEST_SKIP() << "TESSERA_CUDA_EMU_DEFER=0";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const ts::detail::cuda_scratch dev(4 * sizeof(int));
  int* const d = static_cast<int*>(dev.get());      // host memory here: the test may look
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // a reused block's poison is queued
  std::fill(d, d + 4, 0);
  cudaEvent_t done;
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  ts::detail::cuda_launch("fill", order_probe::fill, dim3(1), dim3(4), d, 7);
  ASSERT_EQ(cudaEventRecord(done, nullptr), cudaSuccess);
  EXPECT_EQ(d[0], 0) << "the kernel ran at its launch";
  EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(std::vector<int>(d, d + 4), std::vector<int>(4, 7));
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess);

  // From pinned memory the copy reads the source when it runs; from pageable memory, at the call.
  int* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 4 * sizeof(int), 0), cudaSuccess);
  std::vector<int> pageable(4, 1);
  std::fill(pinned, pinned + 4, 1);
  ASSERT_EQ(cudaMemcpyAsync(d, pinned, 2 * sizeof(int), cudaMemcpyHostToDevice, nullptr),
            cudaSuccess);
  ASSERT_EQ(
      cudaMemcpyAsync(d + 2, pageable.data(), 2 * sizeof(int), cudaMemcpyHostToDevice, nullptr),
      cudaSuccess);
  std::fill(pinned, pinned + 4, 2);
  std::fill(pageable.begin(), pageable.end(), 2);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<int>(d, d + 4), (std::vector<int>{2, 2, 1, 1}));
  // Into pinned memory the copy lands when it runs; into pageable memory before the call returns.
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 4 * sizeof(int), cudaMemcpyDeviceToHost, nullptr),
            cudaSuccess);
  EXPECT_EQ(pinned[2], 2) << "the copy into pinned memory ran at its call";
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), d, 4 * sizeof(int), cudaMemcpyDeviceToHost, nullptr),
            cudaSuccess);
  EXPECT_EQ(pageable, (std::vector<int>{2, 2, 1, 1}));
  EXPECT_EQ(std::vector<int>(pinned, pinned + 4), (std::vector<int>{2, 2, 1, 1}))
      << "the copy into pageable memory waited for the queue";
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  ASSERT_EQ(cudaEventDestroy(done), cudaSuccess);
}

// Streams in the queue: work on different streams runs latest first unless an event wait, or
// the legacy stream's ordering with blocking streams, orders it; a stream's wait runs only what
// that stream needs.
TEST(CudaEmulationQueue, StreamsRunInWhateverOrderTheirWaitsAllow) {
  if (!tessera_cuda_emulation::defer_work) GTEST_SKIP() << "TESSERA_CUDA_EMU_DEFER=0";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const ts::detail::cuda_scratch xs(4 * sizeof(int)), ys(4 * sizeof(int));
  int* const x = static_cast<int*>(xs.get());
  int* const y = static_cast<int*>(ys.get());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // a reused block's poison is queued
  cudaStream_t a, b, c;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&c), cudaSuccess);  // blocking
  cudaEvent_t ev;
  ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
  const auto bytes_of = [](int v) { return v * 0x01010101; };
  const auto copy_x_to_y = [&](cudaStream_t s) {
    ASSERT_EQ(cudaMemcpyAsync(y, x, 4 * sizeof(int), cudaMemcpyDeviceToDevice, s), cudaSuccess);
  };
  std::fill(x, x + 4, 0);
  std::fill(y, y + 4, 0);
  // b copies what a writes, without waiting: b's copy runs first.
  ASSERT_EQ(cudaMemsetAsync(x, 1, 4 * sizeof(int), a), cudaSuccess);
  copy_x_to_y(b);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(x[0], bytes_of(1));
  EXPECT_EQ(y[0], 0) << "b's copy ran after a's memset without a wait";
  // With the wait, after it.
  ASSERT_EQ(cudaMemsetAsync(x, 2, 4 * sizeof(int), a), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ev, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, ev, 0), cudaSuccess);
  copy_x_to_y(b);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(y[0], bytes_of(2));
  // Waiting for b runs b's work, not a's.
  ASSERT_EQ(cudaMemsetAsync(x, 3, 4 * sizeof(int), a), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(y, 4, 4 * sizeof(int), b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(y[0], bytes_of(4));
  EXPECT_EQ(x[0], bytes_of(2)) << "waiting for b ran a's memset";
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(x[0], bytes_of(3));
  // The legacy stream waits for a blocking stream's work, not for a non-blocking one's.
  ASSERT_EQ(cudaMemsetAsync(x, 5, 4 * sizeof(int), c), cudaSuccess);
  copy_x_to_y(cudaStreamLegacy);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(y[0], bytes_of(5));
  ASSERT_EQ(cudaMemsetAsync(x, 6, 4 * sizeof(int), a), cudaSuccess);
  copy_x_to_y(cudaStreamLegacy);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(y[0], bytes_of(5)) << "the legacy stream waited for a non-blocking stream";
  ASSERT_EQ(cudaEventDestroy(ev), cudaSuccess);
  for (cudaStream_t s : {a, b, c}) ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// A kernel given a pointer the device cannot reach (host memory neither pinned nor device) would
// fault on a GPU when it dereferenced it; the emulation refuses the launch.
TEST(CudaEmulationLaunch, KernelsRefuseHostPointers) {
  std::vector<int> host(4, 0);
  EXPECT_THROW(ts::detail::cuda_launch("fill", order_probe::fill, dim3(1), dim3(4), host.data(), 1),
               ts::backend_error);
  const ts::detail::cuda_scratch dev(4 * sizeof(int));
  int* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 4 * sizeof(int), 0), cudaSuccess);
  for (int* p : {static_cast<int*>(dev.get()), pinned})
    EXPECT_NO_THROW(ts::detail::cuda_launch("fill", order_probe::fill, dim3(1), dim3(4), p, 1));
  ts::backend::memory<ts::cuda>::synchronize();
  EXPECT_EQ(std::vector<int>(pinned, pinned + 4), std::vector<int>(4, 1));
  EXPECT_EQ(host, std::vector<int>(4, 0));
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

// tessera's block cache hands a freed block out again; in the emulation it comes back filled with
// 0xff like a new cudaMalloc block (queued on its stream), so a kernel that reads what it never
// wrote shows it on reused memory too.
TEST(CudaEmulationQueue, AReusedBlockIsPoisonedLikeANewOne) {
  auto& cache = ts::detail::device_block_cache::instance();
  constexpr size_t bytes = 12800 + 77;  // a size of its own: no other block of it is cached
  auto* const p = static_cast<unsigned char*>(cache.allocate(bytes));
  ts::backend::memory<ts::cuda>::synchronize();
  std::memset(p, 0, bytes);
  cache.deallocate(p, bytes);
  auto* const q = static_cast<unsigned char*>(cache.allocate(bytes));
  ASSERT_EQ(q, p) << "not the cached block";
  ts::backend::memory<ts::cuda>::synchronize();
  EXPECT_EQ(q[0], 0xff);
  EXPECT_EQ(q[bytes - 1], 0xff);
  cache.deallocate(q, bytes);
}

// Static shared memory is undefined when a block starts, as on a GPU: the emulation fills it with
// 0xff bytes for every block, where its one static object per kernel would otherwise start at
// zero and then hold what the previous block (or launch) left.
TEST(CudaEmulationLaunch, StaticSharedMemoryStartsUndefinedInEveryBlock) {
  using tessera_cuda_emulation::thread_order;
  const auto saved = tessera_cuda_emulation::order;
  const ts::detail::cuda_scratch out(sizeof(int) * 64 * 3);
  auto* const o = static_cast<int*>(out.get());
  std::vector<int> got(64 * 3);
  for (const auto how : {thread_order::forward, thread_order::reverse}) {
    tessera_cuda_emulation::order = how;
    for (const int writer : {1, -1}) {  // the middle block, then none
      ts::detail::cuda_launch("static_shared", order_probe::static_shared, dim3(3), dim3(64), o,
                              writer);
      ASSERT_EQ(cudaMemcpy(got.data(), o, got.size() * sizeof(int), cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int b = 0; b < 3; ++b)
        for (int t = 0; t < 64; ++t)
          EXPECT_EQ(got[static_cast<size_t>(b * 64 + t)], b == writer ? 100 + t : -1)
              << "block " << b << ", thread " << t << ", writer " << writer;
    }
  }
  tessera_cuda_emulation::order = saved;
}

TEST(CudaEmulationOrder, ReverseRunsBlocksFromTheLast) {
  using tessera_cuda_emulation::thread_order;
  const auto saved = tessera_cuda_emulation::order;
  const ts::detail::cuda_scratch out(sizeof(int));
  auto* const o = static_cast<int*>(out.get());
  int last = -1;
  for (const auto how : {thread_order::forward, thread_order::mixed, thread_order::reverse}) {
    tessera_cuda_emulation::order = how;
    ts::detail::cuda_launch("last_block", order_probe::last_block, dim3(3, 2), dim3(32), o);
    ASSERT_EQ(cudaMemcpy(&last, o, sizeof last, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(last, how == thread_order::reverse ? 0 : 2);
  }
  tessera_cuda_emulation::order = saved;
}
#endif

// half on the device converts by cvt where the value is not NaN, by the format code otherwise
// (core/half.hpp): every half bit pattern decodes, and every float of a sweep that holds every
// half value, the midpoints between neighbours (ties) and a float either side of each, the
// overflow edge and NaNs with payloads encodes, to the same bits as on the host. On the host
// emulation both sides run the format code; on a GPU this checks cvt against it.
__global__ void half_conversions(const int32_t* hb, float* hf, int nh, const float* f, int32_t* fb,
                                 int nf) {
  const int step = static_cast<int>(gridDim.x * blockDim.x);
  const int first = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  for (int i = first; i < nh; i += step)
    hf[i] = static_cast<float>(ts::half::from_bits(static_cast<uint16_t>(hb[i])));
  for (int i = first; i < nf; i += step) fb[i] = ts::half(f[i]).bits;
}

TEST_F(Cuda, HalfConversionsOnTheDeviceEqualTheHosts) {
  std::vector<int32_t> patterns(65536);  // half bits, as int32 (tensors hold no uint16)
  for (int b = 0; b < 65536; ++b) patterns[static_cast<size_t>(b)] = b;
  std::vector<float> floats;
  const auto next = [](float x, int by) {
    return std::bit_cast<float>(std::bit_cast<uint32_t>(x) + static_cast<uint32_t>(by));
  };
  for (uint32_t b = 0; b < 0x7c00u; ++b) {  // every finite non-negative half and its neighbours
    const float v = ts::half::from_bits(static_cast<uint16_t>(b));
    const float mid =
        (v + static_cast<float>(ts::half::from_bits(static_cast<uint16_t>(b + 1)))) / 2;
    for (const float x : {v, mid, next(mid, -1), next(mid, 1)})
      floats.insert(floats.end(), {x, -x});
  }
  for (const float x :
       {65504.0f, 65519.0f, 65519.996f, 65520.0f, 65536.0f, 1e9f,
        std::numeric_limits<float>::infinity(), 0x1p-25f, next(0x1p-25f, 1), 0x1p-26f,
        std::numeric_limits<float>::denorm_min(), std::bit_cast<float>(0x7fc00001u),
        std::bit_cast<float>(0x7f812345u), std::bit_cast<float>(0xffc0abcdu)})
    floats.insert(floats.end(), {x, -x});
  const int nh = static_cast<int>(patterns.size()), nf = static_cast<int>(floats.size());
  const auto dev_h = ts::from_vector<int32_t, ts::cpu>(patterns, {nh}).to<ts::cuda>();
  const auto dev_f = ts::from_vector<float, ts::cpu>(floats, {nf}).to<ts::cuda>();
  auto hf = ts::zeros<float, ts::cuda>({nh});
  auto fb = ts::zeros<int32_t, ts::cuda>({nf});
  ts::detail::cuda_launch("half_conversions", half_conversions, dim3(64), dim3(256), dev_h.data(),
                          hf.data(), nh, dev_f.data(), fb.data(), nf);
  const auto got_f = hf.to_vector();
  const auto got_b = fb.to_vector();
  int bad = 0;
  for (int i = 0; i < nh && bad < 10; ++i) {
    const float want = ts::half::from_bits(static_cast<uint16_t>(i));
    if (std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(got_f[static_cast<size_t>(i)])) {
      ++bad;
      ADD_FAILURE() << "half bits " << i << " decode to " << got_f[static_cast<size_t>(i)]
                    << " on the device, " << want << " on the host";
    }
  }
  for (int i = 0; i < nf && bad < 10; ++i) {
    const float x = floats[static_cast<size_t>(i)];
    if (ts::half(x).bits != got_b[static_cast<size_t>(i)]) {
      ++bad;
      ADD_FAILURE() << std::hexfloat << x << " encodes to " << got_b[static_cast<size_t>(i)]
                    << " on the device, " << ts::half(x).bits << " on the host";
    }
  }
  EXPECT_EQ(bad, 0);
}

#if !defined(TESSERA_CUDA_HOST_EMULATION)
#include <cuda_fp8.h>

// The device's own fp8 conversions (cuda_fp8.h) against tessera's, on a GPU only (the emulation
// has no cuda_fp8.h): every bit pattern of e4m3 and e5m2 decodes to the same float, and every
// float of a sweep over the finite range of each type rounds to the same pattern. The tensor
// cores read fp8 operands as the hardware defines them, so tessera's view of the bits must be
// the hardware's: a difference here would show as every fp8 product differing from cuBLAS.
__global__ void device_fp8_conversions(float* e4m3, float* e5m2, const float* from, uint8_t* to4,
                                       uint8_t* to5, int n) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    e4m3[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(i), __NV_E4M3)));
    e5m2[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(i), __NV_E5M2)));
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    to4[i] = __nv_cvt_float_to_fp8(from[i], __NV_SATFINITE, __NV_E4M3);
    to5[i] = __nv_cvt_float_to_fp8(from[i], __NV_SATFINITE, __NV_E5M2);
  }
}

TEST_F(Cuda, Float8BitsMeanWhatTheDeviceSaysTheyMean) {
  std::vector<float> from;
  for (float v = 1.0f / 65536; v < 440; v *= 1.0137f) from.insert(from.end(), {v, -v});
  const int n = static_cast<int>(from.size());
  const auto dev_from = ts::from_vector<float, ts::cpu>(from, {n}).to<ts::cuda>();
  auto e4m3 = ts::zeros<float, ts::cuda>({256}), e5m2 = ts::zeros<float, ts::cuda>({256});
  auto to4 = ts::zeros<uint8_t, ts::cuda>({n}), to5 = ts::zeros<uint8_t, ts::cuda>({n});
  device_fp8_conversions<<<1, 256, 0, ts::cuda_stream()>>>(
      e4m3.data(), e5m2.data(), dev_from.data(), to4.data(), to5.data(), n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto d4 = e4m3.to_vector(), d5 = e5m2.to_vector();
  for (int b = 0; b < 256; ++b) {
    const float h4 = ts::float8_e4m3::from_bits(uint8_t(b)),
                h5 = ts::float8_e5m2::from_bits(uint8_t(b));
    EXPECT_TRUE(std::isnan(h4) ? std::isnan(d4[b]) : h4 == d4[b])
        << "e4m3 bits " << b << ": device " << d4[b] << ", tessera " << h4;
    EXPECT_TRUE(std::isnan(h5) ? std::isnan(d5[b]) : h5 == d5[b])
        << "e5m2 bits " << b << ": device " << d5[b] << ", tessera " << h5;
  }
  const auto t4 = to4.to_vector(), t5 = to5.to_vector();
  int bad = 0;
  for (int i = 0; i < n && bad < 10; ++i) {
    const uint8_t h4 = ts::float8_e4m3(from[i]).bits, h5 = ts::float8_e5m2(from[i]).bits;
    if (h4 != t4[i] || h5 != t5[i]) {
      ++bad;
      ADD_FAILURE() << from[i] << " rounds to e4m3 " << int(t4[i]) << " / e5m2 " << int(t5[i])
                    << " on the device, " << int(h4) << " / " << int(h5) << " in tessera";
    }
  }
}
#endif

}  // namespace
