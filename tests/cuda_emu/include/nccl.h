// nccl.h - a host emulation of the part of NCCL that tessera's NcclGroup uses
// (tessera/dist/nccl_group.hpp), for the CUDA host emulation (cuda_runtime.h beside this file).
//
// Each rank is an MPI process, as under mpirun with real NCCL. A communicator is an MPI
// communicator split from MPI_COMM_WORLD by the unique id, so every process of the job must
// create its communicators in the same order (true of tessera's tests). Collectives and
// point-to-point operations are queued on their stream like kernels and run when the host
// synchronizes; then they move the bytes with MPI and reduce them here, in each type's own
// arithmetic (the 16- and 8-bit floats through float, rounded once per step, as NCCL does),
// in rank order. So a wrong type, operation, count or root gives wrong values, as on a GPU.
//
// Failures: a peer that calls ncclCommAbort tells the others, whose pending operations then
// stop with ncclRemoteError (ncclCommGetAsyncError reports it); a peer that never joins stops
// them the same way after TESSERA_DIST_TIMEOUT seconds (default 300). Not modelled: NCCL's
// channels, protocols, speed, and one GPU per rank.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tessera/core/bfloat16.hpp>
#include <tessera/core/float8.hpp>
#include <tessera/core/half.hpp>
#include <type_traits>
#include <utility>
#include <vector>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION_CODE (NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH)
#define NCCL_UNIQUE_ID_BYTES 128

typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

// The values of the real header.
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

namespace tessera_nccl_emulation {

inline constexpr int abort_tag = 30001;  // on the communicator's own MPI communicator
inline constexpr int p2p_tag = 30002;

}  // namespace tessera_nccl_emulation

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
  ncclResult_t async_error = ncclSuccess;
  std::string last_error;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  bool aborted = false;
};
typedef struct ncclComm* ncclComm_t;

namespace tessera_nccl_emulation {

/// What an operation does after its MPI requests complete (reduce, copy out), or nothing.
using posted = std::function<ncclResult_t()>;
/// One operation: posts its MPI requests (appending them to the vector it is given) and returns
/// what remains to do once they complete.
struct queued_op {
  ncclComm_t comm;
  std::function<posted(std::vector<MPI_Request>&)> post;
};
/// Operations issued between ncclGroupStart and ncclGroupEnd, run as one queued item.
struct pending_group {
  int depth = 0;
  cudaStream_t stream = nullptr;
  std::vector<queued_op> ops;
};
inline pending_group& group() {
  static pending_group g;
  return g;
}

/// Fails the communicator's pending work: the first error stays, later ones keep it.
inline ncclResult_t set_error(ncclComm_t c, ncclResult_t e, const std::string& why) {
  if (c->async_error == ncclSuccess) c->async_error = e, c->last_error = why;
  return e;
}

/// Waits for reqs, polling: a peer's abort notice or the timeout stops the wait with
/// ncclRemoteError.
inline ncclResult_t wait(ncclComm_t c, std::vector<MPI_Request>& reqs) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return ncclSuccess;
    int notice = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, abort_tag, c->mpi, &notice, MPI_STATUS_IGNORE);
    const bool late = std::chrono::steady_clock::now() - start > c->timeout;
    if (notice || late)  // the requests stay pending: their buffers are never freed (run)
      return set_error(c, ncclRemoteError,
                       notice ? "a peer aborted the communicator" : "a peer did not join in time");
    usleep(20);
  }
}

inline size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

/// acc[i] = acc[i] op in[i] for n values of type T (integers wrap, as on the GPU).
template <class T>
void reduce_as(void* acc, const void* in, size_t n, ncclRedOp_t op) {
  auto* a = static_cast<T*>(acc);
  const auto* b = static_cast<const T*>(in);
  using W = std::conditional_t<std::is_integral_v<T>,
                               std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>,
                               std::conditional_t<std::is_same_v<T, double>, double, float>>;
  for (size_t i = 0; i < n; ++i) {
    const W x = static_cast<W>(a[i]), y = static_cast<W>(b[i]);
    W r = x;
    switch (op) {
      case ncclSum:
      case ncclAvg:
        r = x + y;
        break;
      case ncclProd:
        r = x * y;
        break;
      case ncclMax:
        r = y > x ? y : x;
        break;
      case ncclMin:
        r = y < x ? y : x;
        break;
    }
    a[i] = static_cast<T>(r);
  }
}

/// Calls f.template operator()<T>() with the C++ type of t; ncclInvalidArgument for none.
template <class F>
ncclResult_t with_type(ncclDataType_t t, F&& f) {
  namespace ts = tessera;
  switch (t) {
    case ncclInt8:
      f.template operator()<int8_t>();
      break;
    case ncclUint8:
      f.template operator()<uint8_t>();
      break;
    case ncclInt32:
      f.template operator()<int32_t>();
      break;
    case ncclUint32:
      f.template operator()<uint32_t>();
      break;
    case ncclInt64:
      f.template operator()<int64_t>();
      break;
    case ncclUint64:
      f.template operator()<uint64_t>();
      break;
    case ncclFloat16:
      f.template operator()<ts::half>();
      break;
    case ncclFloat32:
      f.template operator()<float>();
      break;
    case ncclFloat64:
      f.template operator()<double>();
      break;
    case ncclBfloat16:
      f.template operator()<ts::bfloat16>();
      break;
    case ncclFloat8e4m3:
      f.template operator()<ts::float8_e4m3>();
      break;
    case ncclFloat8e5m2:
      f.template operator()<ts::float8_e5m2>();
      break;
    default:
      return ncclInvalidArgument;
  }
  return ncclSuccess;
}

inline ncclResult_t reduce(void* acc, const void* in, size_t n, ncclDataType_t t, ncclRedOp_t op) {
  return with_type(t, [&]<class T>() { reduce_as<T>(acc, in, n, op); });
}
/// ncclAvg's last step: the sum divided by the ranks, in float (double for double). NCCL
/// averages floating types only.
inline ncclResult_t divide(void* acc, size_t n, ncclDataType_t t, int by) {
  bool integral = false;
  const ncclResult_t r = with_type(t, [&]<class T>() {
    if constexpr (std::is_integral_v<T>) {
      integral = true;
    } else {
      auto* a = static_cast<T*>(acc);
      using W = std::conditional_t<std::is_same_v<T, double>, double, float>;
      for (size_t i = 0; i < n; ++i)
        a[i] = static_cast<T>(static_cast<W>(a[i]) / static_cast<W>(by));
    }
  });
  return integral ? ncclInvalidArgument : r;
}

inline bool valid(ncclDataType_t t) { return t >= ncclInt8 && t < ncclNumTypes; }
inline bool valid(ncclRedOp_t op) { return op >= ncclSum && op <= ncclAvg; }

/// Runs operations issued together: posts every one's requests, waits for all of them, then
/// finishes each (so a send and a receive between two ranks cannot block each other).
inline void run(const std::vector<queued_op>& ops) {
  ncclComm_t c = ops.front().comm;
  std::vector<MPI_Request> reqs;
  std::vector<posted> then;
  for (const queued_op& op : ops) {
    if (op.comm->async_error != ncclSuccess) return;  // a failed communicator does nothing more
    then.push_back(op.post(reqs));
  }
  if (wait(c, reqs) != ncclSuccess) {
    // MPI may still write into the buffers the continuations hold: keep them for good.
    static auto* abandoned = new std::vector<std::vector<posted>>();
    abandoned->push_back(std::move(then));
    return;
  }
  for (const posted& f : then)
    if (f)
      if (const ncclResult_t r = f(); r != ncclSuccess) set_error(c, r, "a reduction failed");
}

/// Queues op on stream like a kernel, or adds it to the open group.
inline ncclResult_t issue(ncclComm_t c, cudaStream_t stream,
                          std::function<posted(std::vector<MPI_Request>&)> post) {
  if (!c) return ncclInvalidArgument;
  if (c->aborted) return ncclInvalidUsage;
  pending_group& g = group();
  if (g.depth > 0) {
    if (g.ops.empty()) g.stream = stream;
    g.ops.push_back({c, std::move(post)});
    return ncclSuccess;
  }
  std::vector<queued_op> ops{{c, std::move(post)}};
  // NCCL failures surface through ncclCommGetAsyncError, not as the stream's error.
  tessera_cuda_emulation::enqueue(stream, [ops] {
    run(ops);
    return cudaSuccess;
  });
  return ncclSuccess;
}

/// Appends a request slot to reqs and returns it.
inline MPI_Request* slot(std::vector<MPI_Request>& reqs) {
  reqs.push_back(MPI_REQUEST_NULL);
  return &reqs.back();
}

}  // namespace tessera_nccl_emulation

inline const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}
inline const char* ncclGetLastError(ncclComm_t c) { return c ? c->last_error.c_str() : ""; }
inline ncclResult_t ncclGetVersion(int* v) {
  if (!v) return ncclInvalidArgument;
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

/// A fresh id: this process's pid and a counter (the communicator's MPI split colour).
inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  static uint32_t counter = 0;
  std::memset(id->internal, 0, sizeof(id->internal));
  const uint32_t colour = (static_cast<uint32_t>(getpid()) * 977u + ++counter) & 0x7fffffffu;
  std::memcpy(id->internal, &colour, sizeof(colour));
  return ncclSuccess;
}

/// Every process of the job must call it (an MPI split of MPI_COMM_WORLD); those passing the same
/// id form the communicator, whose size must then be nranks.
inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  int colour = 0;
  std::memcpy(&colour, id.internal, sizeof(colour));
  auto c = std::make_unique<ncclComm>();
  if (MPI_Comm_split(MPI_COMM_WORLD, colour, rank, &c->mpi) != MPI_SUCCESS) return ncclSystemError;
  MPI_Comm_rank(c->mpi, &c->rank);
  MPI_Comm_size(c->mpi, &c->size);
  if (c->size != nranks || c->rank != rank) {
    MPI_Comm_free(&c->mpi);
    return ncclInvalidUsage;
  }
  if (const char* s = std::getenv("TESSERA_DIST_TIMEOUT"); s && std::atof(s) > 0)
    c->timeout = std::chrono::milliseconds(static_cast<int64_t>(std::atof(s) * 1000));
  *comm = c.release();
  return ncclSuccess;
}
inline ncclResult_t ncclCommCount(const ncclComm_t c, int* n) {
  if (!c || !n) return ncclInvalidArgument;
  *n = c->size;
  return ncclSuccess;
}
inline ncclResult_t ncclCommUserRank(const ncclComm_t c, int* r) {
  if (!c || !r) return ncclInvalidArgument;
  *r = c->rank;
  return ncclSuccess;
}
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* e) {
  if (!c || !e) return ncclInvalidArgument;
  *e = c->async_error;
  return ncclSuccess;
}
/// Runs what is queued (NCCL: completes the communicator's operations).
inline ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  cudaDeviceSynchronize();
  return ncclSuccess;
}
/// Frees the communicator (after what is queued has run).
inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  cudaDeviceSynchronize();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
  delete c;
  return ncclSuccess;
}
/// Tells the peers (their pending operations stop with ncclRemoteError) and frees the
/// communicator without running its queued work.
inline ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    static const char notice = 1;
    for (int r = 0; r < c->size; ++r) {
      if (r == c->rank) continue;
      MPI_Request req = MPI_REQUEST_NULL;
      MPI_Isend(&notice, 1, MPI_CHAR, r, tessera_nccl_emulation::abort_tag, c->mpi, &req);
      MPI_Request_free(&req);
    }
  }
  // Queued items still point at c: they are left to fail; the communicator is kept.
  c->aborted = true;
  tessera_nccl_emulation::set_error(c, ncclRemoteError, "the communicator was aborted");
  return ncclSuccess;
}

inline ncclResult_t ncclGroupStart() {
  ++tessera_nccl_emulation::group().depth;
  return ncclSuccess;
}
/// Queues the group's operations as one item, on the first one's stream.
inline ncclResult_t ncclGroupEnd() {
  auto& g = tessera_nccl_emulation::group();
  if (g.depth == 0) return ncclInvalidUsage;
  if (--g.depth > 0 || g.ops.empty()) return ncclSuccess;
  std::vector<tessera_nccl_emulation::queued_op> ops = std::move(g.ops);
  g.ops.clear();
  tessera_cuda_emulation::enqueue(g.stream, [ops] {
    tessera_nccl_emulation::run(ops);
    return cudaSuccess;
  });
  return ncclSuccess;
}

inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                  ncclRedOp_t op, ncclComm_t c, cudaStream_t stream) {
  namespace e = tessera_nccl_emulation;
  if (!e::valid(type) || !e::valid(op) || (count > 0 && (!send || !recv)))
    return ncclInvalidArgument;
  return e::issue(c, stream, [=](std::vector<MPI_Request>& reqs) -> e::posted {
    const size_t bytes = count * e::type_size(type);
    auto all = std::make_shared<std::vector<char>>(bytes * static_cast<size_t>(c->size));
    MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, all->data(), static_cast<int>(bytes),
                   MPI_BYTE, c->mpi, e::slot(reqs));
    return [=] {
      if (bytes == 0) return ncclSuccess;  // the buffers may be null
      std::memcpy(recv, all->data(), bytes);
      for (int r = 1; r < c->size; ++r)
        e::reduce(recv, all->data() + bytes * static_cast<size_t>(r), count, type, op);
      return op == ncclAvg ? e::divide(recv, count, type, c->size) : ncclSuccess;
    };
  });
}

inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                                  int root, ncclComm_t c, cudaStream_t stream) {
  namespace e = tessera_nccl_emulation;
  if (!e::valid(type) || !c || root < 0 || root >= c->size || (count > 0 && !recv))
    return ncclInvalidArgument;
  return e::issue(c, stream, [=](std::vector<MPI_Request>& reqs) -> e::posted {
    const size_t bytes = count * e::type_size(type);
    if (c->rank == root && send != recv && bytes > 0) std::memmove(recv, send, bytes);
    MPI_Ibcast(recv, static_cast<int>(bytes), MPI_BYTE, root, c->mpi, e::slot(reqs));
    return nullptr;
  });
}

inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                                  ncclComm_t c, cudaStream_t stream) {
  namespace e = tessera_nccl_emulation;
  if (!e::valid(type) || (count > 0 && (!send || !recv))) return ncclInvalidArgument;
  return e::issue(c, stream, [=](std::vector<MPI_Request>& reqs) -> e::posted {
    const size_t bytes = count * e::type_size(type);
    auto mine = std::make_shared<std::vector<char>>(static_cast<const char*>(send),
                                                    static_cast<const char*>(send) + bytes);
    MPI_Iallgather(mine->data(), static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes),
                   MPI_BYTE, c->mpi, e::slot(reqs));
    return [mine] { return ncclSuccess; };
  });
}

/// recv (count values) = the reduction over the ranks of their send[rank * count ...].
inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count,
                                      ncclDataType_t type, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t stream) {
  namespace e = tessera_nccl_emulation;
  if (!e::valid(type) || !e::valid(op) || (count > 0 && (!send || !recv)))
    return ncclInvalidArgument;
  return e::issue(c, stream, [=](std::vector<MPI_Request>& reqs) -> e::posted {
    const size_t bytes = count * e::type_size(type), whole = bytes * static_cast<size_t>(c->size);
    auto all = std::make_shared<std::vector<char>>(whole * static_cast<size_t>(c->size));
    MPI_Iallgather(send, static_cast<int>(whole), MPI_BYTE, all->data(), static_cast<int>(whole),
                   MPI_BYTE, c->mpi, e::slot(reqs));
    return [=] {
      const size_t at = bytes * static_cast<size_t>(c->rank);
      if (bytes == 0) return ncclSuccess;  // the buffers may be null
      std::memcpy(recv, all->data() + at, bytes);
      for (int r = 1; r < c->size; ++r)
        e::reduce(recv, all->data() + whole * static_cast<size_t>(r) + at, count, type, op);
      return op == ncclAvg ? e::divide(recv, count, type, c->size) : ncclSuccess;
    };
  });
}

inline ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                             ncclComm_t c, cudaStream_t stream) {
  namespace e = tessera_nccl_emulation;
  if (!e::valid(type) || !c || peer < 0 || peer >= c->size || (count > 0 && !send))
    return ncclInvalidArgument;
  return e::issue(c, stream, [=](std::vector<MPI_Request>& reqs) -> e::posted {
    MPI_Isend(send, static_cast<int>(count * e::type_size(type)), MPI_BYTE, peer, e::p2p_tag,
              c->mpi, e::slot(reqs));
    return nullptr;
  });
}

inline ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t c,
                             cudaStream_t stream) {
  namespace e = tessera_nccl_emulation;
  if (!e::valid(type) || !c || peer < 0 || peer >= c->size || (count > 0 && !recv))
    return ncclInvalidArgument;
  return e::issue(c, stream, [=](std::vector<MPI_Request>& reqs) -> e::posted {
    MPI_Irecv(recv, static_cast<int>(count * e::type_size(type)), MPI_BYTE, peer, e::p2p_tag,
              c->mpi, e::slot(reqs));
    return nullptr;
  });
}
