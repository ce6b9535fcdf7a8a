// tessera/dist/nccl_group.hpp - NcclGroup: the collectives of a ProcessGroup on CUDA tensors,
// over NCCL (the CUDA toolkit's collective library).
//
//   auto pg = ts::dist::init();            // MPI: ranks, and the bootstrap of NCCL
//   ts::dist::NcclGroup nccl(pg);          // rank 0's NCCL id reaches every rank over MPI
//   nccl.all_reduce(grad, ts::dist::reduce_op::avg);   // grad: Tensor<float, ts::cuda>
//
// Every operation is queued on the calling thread's current stream (cuda_stream()), in order
// with the ops before and after it, as LibTorch's NCCL group does. The blocking forms return
// once it has completed; the _async forms return a Work whose wait() blocks until then. As in
// ProcessGroup, the ranks first compare their calls over MPI (a mismatch is a dist_error on
// every rank), waits poll with the group's timeout, and a failure anywhere (a timeout, a rank's
// abort(), an NCCL error) aborts the communicator, so that no kernel waits for a peer forever.
// The NCCL group shares the ProcessGroup's state: when one breaks, both are broken.
//
// Include it from .cu sources (nvcc), and link tessera::dist and NCCL (libnccl, which the CUDA
// toolkit's packages install). Guide: docs/distributed.md, "CUDA tensors over NCCL".
#pragma once

#include <nccl.h>

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "../cuda.hpp"
#include "process_group.hpp"

TESSERA_BEGIN_NAMESPACE
namespace dist {
namespace detail {

/// Throws dist_error(op: "call failed: NCCL's reason") unless r is ncclSuccess.
inline void check_nccl(ncclResult_t r, std::string_view op, std::string_view call) {
  if (r != ncclSuccess)
    tessera::detail::fail<dist_error>(op, call, " failed: ", ncclGetErrorString(r));
}

/// NCCL's name for T's bytes. bool travels as uint8 (0 or 1).
template <class T>
constexpr ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  if constexpr (std::is_same_v<T, half>) return ncclFloat16;
  if constexpr (std::is_same_v<T, bfloat16>) return ncclBfloat16;
  if constexpr (std::is_same_v<T, float8_e4m3>) return ncclFloat8e4m3;
  if constexpr (std::is_same_v<T, float8_e5m2>) return ncclFloat8e5m2;
  if constexpr (std::is_same_v<T, int8_t>) return ncclInt8;
  if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>) return ncclUint8;
  if constexpr (std::is_same_v<T, int32_t>) return ncclInt32;
  if constexpr (std::is_same_v<T, int64_t>) return ncclInt64;
}

/// The NCCL operation for op on T, with the MPI path's meaning (mpi_types.hpp): on bool, sum and
/// max are a logical or, min and prod a logical and, avg an error; integer avg is a sum that the
/// caller divides (rounding toward zero), since NCCL averages floating types only.
template <class T>
ncclRedOp_t nccl_op(reduce_op op, std::string_view caller) {
  if constexpr (std::is_same_v<T, bool>) {
    if (op == reduce_op::avg)
      tessera::detail::fail<dist_error>(caller, "reduce_op avg is not defined for bool tensors");
    return op == reduce_op::sum || op == reduce_op::max ? ncclMax : ncclMin;
  }
  switch (op) {
    case reduce_op::sum:
      return ncclSum;
    case reduce_op::avg:
      return is_floating_v<T> ? ncclAvg : ncclSum;
    case reduce_op::max:
      return ncclMax;
    case reduce_op::min:
      return ncclMin;
    case reduce_op::prod:
      return ncclProd;
  }
  return ncclSum;
}

/// Bytes of one element of d.
constexpr int64_t element_bytes(dtype d) {
  switch (d) {
    case dtype::float64:
    case dtype::int64:
      return 8;
    case dtype::float32:
    case dtype::int32:
      return 4;
    case dtype::float16:
    case dtype::bfloat16:
      return 2;
    default:
      return 1;
  }
}

/// One NCCL communicator, shared by an NcclGroup's copies and its pending works.
struct nccl_state {
  ncclComm_t comm = nullptr;
  int device = 0;
  bool aborted = false;

  nccl_state() = default;
  nccl_state(const nccl_state&) = delete;
  nccl_state& operator=(const nccl_state&) = delete;
  ~nccl_state() {
    if (!comm || aborted) return;
    ncclCommFinalize(comm);  // completes what is queued, then frees
    ncclCommDestroy(comm);
  }
  /// Stops the communicator's kernels and frees it (pending operations fail).
  void abort() {
    if (!comm || aborted) return;
    aborted = true;
    ncclCommAbort(comm);
  }

  /// Whether the work up to `done` (an event recorded after it) has completed. Throws through
  /// g.fail (the group breaks, the communicator aborts) on a stream or NCCL error, after checking
  /// for a peer's abort notice, which names the cause.
  bool poll(group_state& g, cudaEvent_t done, std::string_view op) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
    // The emulated device runs queued work only when the host waits for it.
    cudaError_t e = cudaEventSynchronize(done);
#else
    cudaError_t e = cudaEventQuery(done);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is left in the error slot
      e = cudaSuccess;
      if (check_async(g, op)) return false;
    }
#endif
    if (e != cudaSuccess) {
      g.poll_aborts(op);
      g.fail(op, std::string("the CUDA stream failed: ") + cudaGetErrorString(e));
    }
    return check_async(g, op);
  }
  /// true when NCCL reports no error; else fails the group (see poll).
  bool check_async(group_state& g, std::string_view op) {
    ncclResult_t r = ncclSuccess;
    if (!aborted) ncclCommGetAsyncError(comm, &r);
    if (r == ncclSuccess || r == ncclInProgress) return true;
    g.poll_aborts(op);
    g.fail(op, std::string("NCCL reported: ") + ncclGetErrorString(r) + " (" +
                   ncclGetLastError(comm) + ")");
  }
};

/// An event recorded on a stream, destroyed with the work that waits for it.
struct recorded_event {
  cudaEvent_t e = nullptr;
  explicit recorded_event(cudaStream_t stream) {
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaEventRecord(e, stream));
  }
  recorded_event(const recorded_event&) = delete;
  recorded_event& operator=(const recorded_event&) = delete;
  ~recorded_event() { cudaEventDestroy(e); }
};

}  // namespace detail

/// The ranks of a ProcessGroup, with collectives and messages on CUDA tensors over NCCL. A
/// handle: copies share the communicator. Each rank uses one GPU.
class NcclGroup {
 public:
  /// A communicator over pg's ranks on GPU `device` (default: pg.local_rank() modulo the number
  /// of GPUs), which becomes the calling thread's current device. Collective: every rank of pg
  /// calls it.
  explicit NcclGroup(ProcessGroup pg, int device = -1)
      : pg_(std::move(pg)), s_(std::make_shared<detail::nccl_state>()) {
    constexpr std::string_view op = "dist::NcclGroup";
    pg_.start_call(op);
    int devices = 0;
    TESSERA_CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices == 0) tessera::detail::fail<dist_error>(op, "no CUDA device is visible");
    if (device < 0) device = pg_.local_rank() % devices;
    if (device >= devices)
      tessera::detail::fail<index_error>(op, "device ", device, " is not one of the ", devices,
                                         " CUDA devices");
    TESSERA_CUDA_CHECK(cudaSetDevice(device));
    s_->device = device;
    // Rank 0's unique id reaches the others over MPI, as bytes.
    Tensor<uint8_t, cpu> id_bytes = zeros<uint8_t, cpu>(Shape{NCCL_UNIQUE_ID_BYTES});
    ncclUniqueId id{};
    if (pg_.rank() == 0) {
      detail::check_nccl(ncclGetUniqueId(&id), op, "ncclGetUniqueId");
      std::memcpy(id_bytes.data(), id.internal, NCCL_UNIQUE_ID_BYTES);
    }
    pg_.broadcast(id_bytes, 0);
    std::memcpy(id.internal, id_bytes.data(), NCCL_UNIQUE_ID_BYTES);
    detail::check_nccl(ncclCommInitRank(&s_->comm, pg_.size(), id, pg_.rank()), op,
                       "ncclCommInitRank");
    pg_.g_->break_hooks.push_back([w = std::weak_ptr<detail::nccl_state>(s_)] {
      if (auto s = w.lock()) s->abort();
    });
  }

  int rank() const { return pg_.rank(); }
  int size() const { return pg_.size(); }
  /// The GPU this rank's communicator uses.
  int device() const { return s_->device; }
  /// The MPI group this one was made from (same ranks, same health).
  const ProcessGroup& process_group() const { return pg_; }
  ncclComm_t comm() const { return s_->comm; }

  // ---- collectives: every rank calls the same ones in the same order ----

  /// Reduces t element-wise across the ranks; every rank's t then holds the result.
  template <element_type T>
  void all_reduce(const Tensor<T, cuda>& t, reduce_op op = reduce_op::sum) const {
    all_reduce_async(t, op).wait();
  }
  template <element_type T>
  Work all_reduce_async(const Tensor<T, cuda>& t, reduce_op op = reduce_op::sum,
                        bool check_call = true) const {
    constexpr std::string_view name = "dist::all_reduce";
    start(name, t);
    const ncclRedOp_t nop = detail::nccl_op<T>(op, name);
    if (check_call && pg_.settings().check_calls)
      detail::check_same_call(
          pg_.g_, detail::describe_call(detail::c_all_reduce, t, static_cast<int64_t>(op)), name);
    auto s = std::make_shared<detail::staged<T, cuda>>(t, true);
    detail::check_nccl(ncclAllReduce(s->ptr(), s->ptr(), count(t), detail::nccl_type<T>(), nop,
                                     s_->comm, cuda_stream()),
                       name, "ncclAllReduce");
    if (op == reduce_op::avg) divide_integers(s->buf);
    s->publish();
    return queued(name, s);
  }

  /// Copies root's t into every other rank's t.
  template <element_type T>
  void broadcast(const Tensor<T, cuda>& t, int root = 0) const {
    broadcast_async(t, root).wait();
  }
  template <element_type T>
  Work broadcast_async(const Tensor<T, cuda>& t, int root = 0, bool check_call = true) const {
    constexpr std::string_view name = "dist::broadcast";
    start(name, t);
    pg_.check_rank(name, "root", root);
    if (check_call && pg_.settings().check_calls)
      detail::check_same_call(pg_.g_, detail::describe_call(detail::c_broadcast, t, root), name);
    auto s = std::make_shared<detail::staged<T, cuda>>(t, rank() == root);
    detail::check_nccl(ncclBroadcast(s->ptr(), s->ptr(), count(t), detail::nccl_type<T>(), root,
                                     s_->comm, cuda_stream()),
                       name, "ncclBroadcast");
    if (rank() != root) s->publish();
    return queued(name, s);
  }

  /// Gathers every rank's in into out, shaped [size(), in's shape...]: out[r] is rank r's in.
  template <element_type T>
  void all_gather(const Tensor<T, cuda>& out, const Tensor<T, cuda>& in) const {
    all_gather_async(out, in).wait();
  }
  template <element_type T>
  Work all_gather_async(const Tensor<T, cuda>& out, const Tensor<T, cuda>& in) const {
    constexpr std::string_view name = "dist::all_gather";
    start(name, out);
    start(name, in);
    pg_.check_stacked(name, "out", out, "in", in);
    if (pg_.settings().check_calls)
      detail::check_same_call(pg_.g_, detail::describe_call(detail::c_all_gather, in, 0), name);
    auto src = std::make_shared<detail::staged<T, cuda>>(
        in.shares_storage_with(out) ? in.clone() : in, true);
    auto dst = std::make_shared<detail::staged<T, cuda>>(out, false);
    detail::check_nccl(ncclAllGather(src->ptr(), dst->ptr(), count(in), detail::nccl_type<T>(),
                                     s_->comm, cuda_stream()),
                       name, "ncclAllGather");
    dst->publish();
    return queued(name, src, dst);
  }

  /// Reduces in, shaped [size(), out's shape...], across the ranks and gives rank r the
  /// reduction of every rank's in[r].
  template <element_type T>
  void reduce_scatter(const Tensor<T, cuda>& out, const Tensor<T, cuda>& in,
                      reduce_op op = reduce_op::sum) const {
    reduce_scatter_async(out, in, op).wait();
  }
  template <element_type T>
  Work reduce_scatter_async(const Tensor<T, cuda>& out, const Tensor<T, cuda>& in,
                            reduce_op op = reduce_op::sum) const {
    constexpr std::string_view name = "dist::reduce_scatter";
    start(name, out);
    start(name, in);
    pg_.check_stacked(name, "in", in, "out", out);
    const ncclRedOp_t nop = detail::nccl_op<T>(op, name);
    if (pg_.settings().check_calls)
      detail::check_same_call(
          pg_.g_, detail::describe_call(detail::c_reduce_scatter, out, static_cast<int64_t>(op)),
          name);
    auto src = std::make_shared<detail::staged<T, cuda>>(
        in.shares_storage_with(out) ? in.clone() : in, true);
    auto dst = std::make_shared<detail::staged<T, cuda>>(out, false);
    detail::check_nccl(ncclReduceScatter(src->ptr(), dst->ptr(), count(out), detail::nccl_type<T>(),
                                         nop, s_->comm, cuda_stream()),
                       name, "ncclReduceScatter");
    if (op == reduce_op::avg) divide_integers(dst->buf);
    dst->publish();
    return queued(name, src, dst);
  }

  /// Returns once every rank has reached it and the work queued before it on this thread's
  /// stream has completed.
  void barrier() const { barrier_async().wait(); }
  Work barrier_async() const {
    constexpr std::string_view name = "dist::barrier";
    pg_.start_call(name);
    if (pg_.settings().check_calls) {
      detail::call_desc d;
      d.call = detail::c_barrier;
      detail::check_same_call(pg_.g_, d, name);
    }
    auto token = std::make_shared<Tensor<uint8_t, cuda>>(zeros<uint8_t, cuda>(Shape{1}));
    detail::check_nccl(
        ncclAllReduce(token->data(), token->data(), 1, ncclUint8, ncclMax, s_->comm, cuda_stream()),
        name, "ncclAllReduce");
    return queued(name, token);
  }

  // ---- point to point: a send on one rank matches a recv of the same tag on the other ----
  // NCCL runs a send and a receive on one stream in call order: where every rank sends and
  // receives at once (a ring), use send_recv, which issues both together.

  /// Sends t to rank dst. The receiver's recv checks that dtype and shape match.
  template <element_type T>
  void send(const Tensor<T, cuda>& t, int dst, int tag = 0) const {
    send_async(t, dst, tag).wait();
  }
  template <element_type T>
  Work send_async(const Tensor<T, cuda>& t, int dst, int tag = 0) const {
    return exchange<T>("dist::send", &t, dst, nullptr, -1, tag);
  }

  /// Receives into t what rank src sent with the same tag. Throws dist_error when the sent
  /// tensor's dtype or shape differs from t's (the sent data is then received and dropped).
  template <element_type T>
  void recv(const Tensor<T, cuda>& t, int src, int tag = 0) const {
    recv_async(t, src, tag).wait();
  }
  template <element_type T>
  Work recv_async(const Tensor<T, cuda>& t, int src, int tag = 0) const {
    return exchange<T>("dist::recv", nullptr, -1, &t, src, tag);
  }

  /// Sends `out` to rank dst and receives into `in` from rank src, issued together (one NCCL
  /// group): the form for rings and halo exchanges.
  template <element_type T>
  void send_recv(const Tensor<T, cuda>& out, int dst, const Tensor<T, cuda>& in, int src,
                 int tag = 0) const {
    send_recv_async(out, dst, in, src, tag).wait();
  }
  template <element_type T>
  Work send_recv_async(const Tensor<T, cuda>& out, int dst, const Tensor<T, cuda>& in, int src,
                       int tag = 0) const {
    return exchange<T>("dist::send_recv", &out, dst, &in, src, tag);
  }

  /// Tells every other rank that this one failed and aborts the communicator (see
  /// ProcessGroup::abort).
  void abort(std::string_view reason) const { pg_.abort(reason); }

 private:
  template <class T>
  void start(std::string_view op, const Tensor<T, cuda>& t) const {
    pg_.start(op, t);
    if (s_->aborted) tessera::detail::fail<dist_error>(op, "the NCCL communicator was aborted");
  }
  template <class T>
  static size_t count(const Tensor<T, cuda>& t) {
    return static_cast<size_t>(t.numel());
  }
  /// Integer avg: NCCL summed, the quotient rounds toward zero (the MPI path's rule).
  template <class T>
  void divide_integers(const Tensor<T, cuda>& t) const {
    if constexpr (!is_floating_v<T> && !std::is_same_v<T, bool>) t /= size();
  }

  /// A Work that completes when what is queued on the current stream so far has run. `keep`
  /// holds the buffers the queued work uses until then.
  template <class... Keep>
  Work queued(std::string_view op, std::shared_ptr<Keep>... keep) const {
    auto ev = std::make_shared<detail::recorded_event>(cuda_stream());
    auto w = std::make_shared<detail::work_state>();
    w->group = pg_.g_;
    w->op = op;
    w->ready = [g = pg_.g_, s = s_, ev, op] { return s->poll(*g, ev->e, op); };
    w->finish = [keep...](detail::work_state&) {};
    return Work(std::move(w));
  }

  /// send (out to dst), recv (into in from src), or both in one NCCL group. The sender's
  /// description of the tensor travels over MPI first; the receiver compares it with its own.
  template <class T>
  Work exchange(std::string_view name, const Tensor<T, cuda>* out, int dst,
                const Tensor<T, cuda>* in, int src, int tag) const {
    if (out) start(name, *out), pg_.check_rank(name, "dst", dst);
    if (in) start(name, *in), pg_.check_rank(name, "src", src);
    ProcessGroup::check_tag(name, tag);
    detail::group_state& g = *pg_.g_;
    auto sent = std::make_shared<detail::call_desc>();
    auto got = std::make_shared<detail::call_desc>();
    std::vector<MPI_Request> headers;
    if (out) {
      *sent = detail::describe_call(detail::c_send, *out, tag);
      headers.push_back(MPI_REQUEST_NULL);
      detail::check_mpi(MPI_Isend(sent.get(), sizeof(detail::call_desc), MPI_BYTE, dst, 2 * tag,
                                  g.comm, &headers.back()),
                        name, "MPI_Isend");
    }
    if (in) {
      headers.push_back(MPI_REQUEST_NULL);
      detail::check_mpi(MPI_Irecv(got.get(), sizeof(detail::call_desc), MPI_BYTE, src, 2 * tag,
                                  g.comm, &headers.back()),
                        name, "MPI_Irecv");
    }
    g.wait_all(headers, name);
    // A tensor of another dtype or shape is still received (into scratch memory), so that the
    // sender's NCCL send completes; then the mismatch is reported here.
    const std::string mismatch =
        in ? detail::recv_mismatch(*got, detail::describe_call(detail::c_send, *in, tag), src)
           : std::string();
    auto src_buf = out ? std::make_shared<detail::staged<T, cuda>>(*out, true) : nullptr;
    auto dst_buf =
        in && mismatch.empty() ? std::make_shared<detail::staged<T, cuda>>(*in, false) : nullptr;
    std::shared_ptr<Tensor<uint8_t, cuda>> scratch;
    const cudaStream_t stream = cuda_stream();
    detail::check_nccl(ncclGroupStart(), name, "ncclGroupStart");
    ncclResult_t r = ncclSuccess;
    if (out)
      r = ncclSend(src_buf->ptr(), count(*out), detail::nccl_type<T>(), dst, s_->comm, stream);
    if (in && r == ncclSuccess) {
      if (dst_buf) {
        r = ncclRecv(dst_buf->ptr(), count(*in), detail::nccl_type<T>(), src, s_->comm, stream);
      } else {
        const int64_t bytes = detail::element_bytes(static_cast<dtype>(got->type)) * got->numel;
        scratch = std::make_shared<Tensor<uint8_t, cuda>>(empty<uint8_t, cuda>(Shape{bytes}));
        r = ncclRecv(scratch->data(), static_cast<size_t>(bytes), ncclUint8, src, s_->comm, stream);
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    detail::check_nccl(r, name, out && in ? "ncclSend/ncclRecv" : out ? "ncclSend" : "ncclRecv");
    detail::check_nccl(end, name, "ncclGroupEnd");
    if (!mismatch.empty()) {
      // The scratch receive must complete before its memory is freed.
      queued(name, scratch).wait();
      tessera::detail::fail<dist_error>("dist::recv", mismatch);
    }
    if (dst_buf) dst_buf->publish();
    return queued(name, src_buf, dst_buf);
  }

  ProcessGroup pg_;
  std::shared_ptr<detail::nccl_state> s_;
};

}  // namespace dist
TESSERA_END_NAMESPACE
