// tessera/dist/process_group.hpp - ProcessGroup: the ranks of an MPI job and the collectives
// between them (all_reduce, broadcast, all_gather, reduce_scatter, send/recv, barrier) on CPU
// tensors of every element type, contiguous or not, blocking or asynchronous.
//
//   auto pg = ts::dist::init();            // under mpirun: MPI_Init from its environment
//   pg.all_reduce(grad, ts::dist::reduce_op::avg);
//   auto work = pg.broadcast_async(weights, 0);  ...  work.wait();
//
// Nothing hangs silently. Before each collective the ranks compare what they were asked to do
// (op, dtype, shape, root or reduction): a mismatch is a dist_error on every rank that names
// each rank's call. Every wait polls with a deadline (options::timeout), and a rank that fails
// can abort() the group: the others' waits then throw a dist_error naming it, at once. After a
// failure the group is broken and every later call on it throws.
#pragma once

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../data/dataset.hpp"
#include "../ops/creation.hpp"
#include "../ops/tensor_copy.hpp"
#include "mpi_types.hpp"
#include "ring_all_reduce.hpp"

TESSERA_BEGIN_NAMESPACE
namespace dist {

/// How a ProcessGroup behaves.
struct options {
  /// How long a wait may see no completion before it gives up with a dist_error.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// Whether each collective first checks that every rank made the same call (one extra small
  /// all_gather per call). DataParallel checks its buckets once and skips it per step.
  bool check_calls = true;

  /// The defaults, with the timeout from TESSERA_DIST_TIMEOUT (seconds) when it is set.
  static options from_environment() {
    options o;
    if (const char* s = std::getenv("TESSERA_DIST_TIMEOUT"); s && *s) {
      char* end = nullptr;
      const double seconds = std::strtod(s, &end);
      if (end == s || *end != '\0' || !(seconds > 0))
        tessera::detail::fail<dist_error>("dist::init", "TESSERA_DIST_TIMEOUT=\"", s,
                                          "\" is not a positive number of seconds");
      o.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    }
    return o;
  }
};

namespace detail {

// Tags on the control communicator.
inline constexpr int abort_tag = 1;

/// One process group's communicators and health, shared by its handles and pending works.
struct group_state {
  MPI_Comm comm = MPI_COMM_NULL;     // collectives and point-to-point messages
  MPI_Comm control = MPI_COMM_NULL;  // abort notices, apart from the data traffic
  MPI_Comm ring = MPI_COMM_NULL;     // ring all-reduces' messages, tagged by ring_count
  int64_t ring_count = 0;
  std::vector<std::weak_ptr<ring_all_reduce>> rings;  // in flight, oldest first
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  options opts;
  std::string broken;  // why the group can no longer be used; empty while it is healthy
  // This rank's abort notice (one buffer for every send: a vector of strings would move short
  // strings' characters while MPI still reads them) and the sends, kept until the group dies.
  std::string abort_message;
  std::vector<MPI_Request> abort_sends;
  bool aborted = false;
  // Run once when the group breaks: what else must stop then (an NCCL communicator's kernels).
  std::vector<std::function<void()>> break_hooks;

  group_state() = default;
  group_state(const group_state&) = delete;
  group_state& operator=(const group_state&) = delete;
  ~group_state() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Request& r : abort_sends)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    if (control != MPI_COMM_NULL) MPI_Comm_free(&control);
    if (ring != MPI_COMM_NULL) MPI_Comm_free(&ring);
  }

  /// Throws when an earlier failure broke the group.
  void check_usable(std::string_view op) const {
    if (!broken.empty())
      tessera::detail::fail<dist_error>(op, "the process group is broken: ", broken);
  }
  /// Marks the group broken (the first reason stays) and runs the break hooks, once.
  void mark_broken(const std::string& why) {
    if (!broken.empty()) return;
    broken = why;
    for (auto& hook : std::exchange(break_hooks, {})) hook();
  }
  /// Marks the group broken and throws dist_error(op: what).
  [[noreturn]] void fail(std::string_view op, const std::string& what) {
    mark_broken(std::string(op) + ": " + what);
    tessera::detail::fail<dist_error>(op, what);
  }
  /// Advances every ring all-reduce in flight, as MPI progresses all its nonblocking
  /// collectives in any call: a wait on one bucket's all-reduce moves the others on too.
  void progress_rings(std::string_view op) {
    for (auto it = rings.begin(); it != rings.end();) {
      const auto r = it->lock();
      if (!r || r->progress(op))
        it = rings.erase(it);
      else
        ++it;
    }
  }
  /// Throws when another rank has sent an abort notice.
  void poll_aborts(std::string_view op) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, abort_tag, control, &flag, &st);
    if (!flag) return;
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string reason(static_cast<size_t>(n), '\0');
    MPI_Recv(reason.data(), n, MPI_CHAR, st.MPI_SOURCE, abort_tag, control, MPI_STATUS_IGNORE);
    std::ostringstream os;
    os << "rank " << st.MPI_SOURCE << " aborted: " << reason;
    fail(op, os.str());
  }
  /// Tests every request once: true when all completed (a failed receive also completes; its
  /// status says why). Throws dist_error on any other MPI error.
  bool test_all(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>* statuses,
                std::string_view op) {
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done,
                               statuses ? statuses->data() : MPI_STATUSES_IGNORE);
    if (rc == MPI_ERR_IN_STATUS && statuses) return true;
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING] = {};
      int len = 0;
      MPI_Error_string(rc, text, &len);
      fail(op, "MPI reported: " + std::string(text, static_cast<size_t>(len)));
    }
    return done != 0;
  }
  /// Completes every request, polling: throws dist_error on an MPI error, an abort notice from
  /// another rank, or no completion within the timeout. statuses: one per request, or empty.
  void wait_all(std::vector<MPI_Request>& reqs, std::string_view op,
                std::vector<MPI_Status>* statuses = nullptr) {
    wait_until([&] { return test_all(reqs, statuses, op); }, op);
  }
  /// Calls done() until it returns true (it may throw): throws dist_error on an abort notice
  /// from another rank, or when done() stays false for the timeout.
  template <class Done>
  void wait_until(Done&& done, std::string_view op) {
    const auto start = std::chrono::steady_clock::now();
    // MPI moves a nonblocking operation's data only inside MPI calls, so the loop keeps testing
    // (a sleep between tests stalled a 256 MiB all_reduce 2x). The abort notices and the clock
    // are checked every 64 tests; after a second of waiting, which means a slow or failed rank
    // rather than a long transfer, it sleeps 50 us between tests and leaves the core to others.
    for (uint64_t spin = 1;; ++spin) {
      if (done()) return;
      if (spin % 64 != 0) continue;
      poll_aborts(op);
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > opts.timeout) {
        std::ostringstream os;
        os << "rank " << rank << " waited " << opts.timeout.count()
           << " ms (the timeout) without completion: another rank failed, stopped, or is in a "
              "different call";
        fail(op, os.str());
      }
      if (waited > std::chrono::seconds(1))
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
};

/// What each rank says it is doing, compared across ranks before a collective.
struct call_desc {
  int64_t call = 0;  // which collective (an index into call_names)
  int64_t type = 0;  // dtype
  int64_t numel = 0;
  int64_t rank = 0;  // the tensor's rank; its first seven extents follow
  int64_t arg = 0;   // root, peer or reduce_op
  int64_t dims[7] = {};
};
inline constexpr std::string_view call_names[] = {"all_reduce",     "broadcast", "all_gather",
                                                  "reduce_scatter", "barrier",   "send"};
enum call_kind : int64_t {
  c_all_reduce,
  c_broadcast,
  c_all_gather,
  c_reduce_scatter,
  c_barrier,
  c_send
};

/// "float32 [4, 5]" (extents past the seventh print as ?).
inline std::string describe_tensor(const call_desc& d) {
  std::ostringstream os;
  os << name_of(static_cast<dtype>(d.type)) << " [";
  for (int64_t i = 0; i < d.rank; ++i) {
    os << (i ? ", " : "");
    if (i < 7)
      os << d.dims[i];
    else
      os << "?";
  }
  os << "]";
  return os.str();
}

/// "all_reduce(float32 [4, 5], sum)".
inline std::string describe(const call_desc& d) {
  std::ostringstream os;
  os << call_names[d.call] << "(";
  if (d.call != c_barrier) {
    os << describe_tensor(d);
    if (d.call == c_all_reduce || d.call == c_reduce_scatter)
      os << ", " << reduce_op_name(static_cast<reduce_op>(d.arg));
    if (d.call == c_broadcast) os << ", root " << d.arg;
  }
  os << ")";
  return os.str();
}

/// Empty when a receive into `expected` matches what rank src `sent`; else why not.
inline std::string recv_mismatch(const call_desc& sent, const call_desc& expected, int src) {
  if (std::memcmp(&sent, &expected, sizeof(sent)) == 0) return {};
  return "rank " + std::to_string(src) + " sent " + describe_tensor(sent) +
         " but this rank receives into " + describe_tensor(expected);
}

template <element_type T, backend_tag B>
call_desc describe_call(call_kind call, const Tensor<T, B>& t, int64_t arg) {
  call_desc d;
  d.call = call;
  d.type = static_cast<int64_t>(dtype_of<T>);
  d.numel = t.numel();
  d.rank = t.rank();
  for (int i = 0; i < t.rank() && i < 7; ++i) d.dims[i] = t.size(i);
  d.arg = arg;
  return d;
}

/// The state of one asynchronous operation: its requests, the tensors they use (kept alive by
/// finish's captures) and what runs once they complete (copy back, average, checks). A ring
/// all-reduce or an NCCL operation has no requests but `ready`, which advances it (the ring) or
/// asks its stream (NCCL) and says whether it has completed.
struct work_state {
  std::shared_ptr<group_state> group;
  std::string op;
  std::vector<MPI_Request> reqs;
  std::vector<MPI_Status> statuses;
  std::function<bool()> ready;
  std::function<void(work_state&)> finish;
  bool done = false;

  /// Whether the operation has completed (progressing it); throws as wait_until does.
  bool test() { return ready ? ready() : group->test_all(reqs, &statuses, op); }
  /// Blocks until it completes, with the group's timeout.
  void wait() {
    if (ready)
      group->wait_until(ready, op);
    else
      group->wait_all(reqs, op, &statuses);
  }

  ~work_state() {
    // MPI may still write into the buffers until the requests complete: wait, never throw. On
    // a broken group they may never complete, so the buffers (held by finish) are kept for the
    // rest of the process instead.
    if (done || (reqs.empty() && !ready)) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (group->broken.empty()) {
      try {
        wait();
        return;
      } catch (...) {
      }
    }
    static auto* abandoned = new std::vector<std::function<void(work_state&)>>();
    abandoned->push_back([f = std::move(finish), r = std::move(ready)](work_state&) {});
  }
  void complete() {
    done = true;
    if (finish) finish(*this);
  }
};

/// Gathers every rank's call_desc and throws dist_error on every rank when they differ.
inline void check_same_call(const std::shared_ptr<group_state>& g, const call_desc& mine,
                            std::string_view op) {
  if (g->size == 1) return;
  constexpr int words = sizeof(call_desc) / sizeof(int64_t);
  auto all = std::make_shared<std::vector<call_desc>>(static_cast<size_t>(g->size));
  auto sent = std::make_shared<call_desc>(mine);
  work_state w;
  w.group = g;
  w.op = op;
  w.reqs.assign(1, MPI_REQUEST_NULL);
  w.statuses.resize(1);
  w.finish = [all, sent](work_state&) {};  // keeps the buffers alive while MPI may use them
  check_mpi(MPI_Iallgather(sent.get(), words, MPI_INT64_T, all->data(), words, MPI_INT64_T, g->comm,
                           w.reqs.data()),
            op, "MPI_Iallgather");
  g->wait_all(w.reqs, op, &w.statuses);
  w.done = true;
  bool same = true;
  for (const call_desc& d : *all) same = same && std::memcmp(&d, &all->front(), sizeof(d)) == 0;
  if (same) return;
  std::ostringstream os;
  os << "the ranks disagree on the call:";
  for (int r = 0; r < g->size; ++r)
    os << (r ? ";" : "") << " rank " << r << ": " << describe((*all)[static_cast<size_t>(r)]);
  tessera::detail::fail<dist_error>(op, os.str());
}

/// A contiguous tensor MPI can read or write in place of `user`: user itself when it is
/// contiguous, else a copy (input) or new memory (output), copied back after the operation.
template <class T, class B>
struct staged {
  Tensor<T, B> user, buf;
  staged(const Tensor<T, B>& t, bool is_input)
      : user(t),
        buf(t.is_contiguous() ? t : (is_input ? t.contiguous() : empty<T, B>(t.shape()))) {}
  void* ptr() const { return static_cast<void*>(buf.data()); }
  /// After the operation wrote buf: makes user hold the result and counts the write.
  void publish() const {
    if (buf.data() != user.data())
      user.copy_(buf);
    else
      user.bump_version();
  }
};

}  // namespace detail

/// An asynchronous collective or message. wait() blocks until it completes (with the group's
/// timeout) and makes its result visible in the tensors; test() says whether it has, without
/// blocking. Destroying a pending Work waits for it (MPI still uses its buffers).
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::work_state> s) : s_(std::move(s)) {}

  /// Blocks until the operation completes; throws dist_error on a timeout, an abort notice or
  /// a mismatch found when it completes.
  void wait() {
    if (!s_ || s_->done) return;
    s_->wait();
    s_->complete();
  }
  /// Progresses the operation; true once it has completed (and its result is visible).
  bool test() {
    if (!s_ || s_->done) return true;
    if (!s_->test()) {
      s_->group->poll_aborts(s_->op);
      return false;
    }
    s_->complete();
    return true;
  }
  bool is_completed() const { return !s_ || s_->done; }

 private:
  std::shared_ptr<detail::work_state> s_;
};

class NcclGroup;

/// The processes of an MPI job (a communicator), with collectives on CPU tensors. A handle:
/// copies share the group. Make one with dist::init(), or over a communicator of your own.
/// NcclGroup (nccl_group.hpp) runs the same collectives on CUDA tensors over the same ranks.
class ProcessGroup {
 public:
  /// Whether all_reduce of `bytes` over `ranks` runs as a ring of point-to-point messages
  /// (ring_all_reduce.hpp) rather than one MPI_Iallreduce: from 256 KiB on up to 4 ranks, where
  /// it measured as fast as the blocking MPI_Allreduce and up to 2.4x faster than
  /// MPI_Iallreduce (docs/distributed.md, "Speed"). Below, OpenMPI's engine progresses many
  /// small all-reduces in flight together (DataParallel's small buckets) better than rings do.
  /// On more ranks only where each rank's chunk is at least 256 KiB, so that the ring's
  /// 2 (P - 1) message latencies stay small beside the transfer.
  static constexpr bool ring_all_reduce(int64_t bytes, int ranks) {
    return ranks > 1 && bytes >= (int64_t{256} << 10) &&
           (ranks <= 4 || bytes / ranks >= (int64_t{256} << 10));
  }

  /// A group over a duplicate of comm (MPI must be initialised): its messages never mix with
  /// the caller's own traffic on comm.
  explicit ProcessGroup(MPI_Comm comm, options opts = options::from_environment())
      : g_(std::make_shared<detail::group_state>()) {
    using detail::check_mpi;
    constexpr std::string_view op = "dist::ProcessGroup";
    g_->opts = opts;
    check_mpi(MPI_Comm_dup(comm, &g_->comm), op, "MPI_Comm_dup");
    check_mpi(MPI_Comm_dup(comm, &g_->control), op, "MPI_Comm_dup");
    check_mpi(MPI_Comm_dup(comm, &g_->ring), op, "MPI_Comm_dup");
    // Errors come back as codes, which become dist_errors, instead of aborting the job.
    for (MPI_Comm c : {g_->comm, g_->control, g_->ring})
      MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Comm_rank(g_->comm, &g_->rank);
    MPI_Comm_size(g_->comm, &g_->size);
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(g_->comm, MPI_COMM_TYPE_SHARED, g_->rank, MPI_INFO_NULL, &node),
              op, "MPI_Comm_split_type");
    MPI_Comm_rank(node, &g_->local_rank);
    MPI_Comm_size(node, &g_->local_size);
    MPI_Comm_free(&node);
  }

  /// This process's index in the group, 0 .. size() - 1.
  int rank() const { return g_->rank; }
  int size() const { return g_->size; }
  /// The index among the group's processes on this machine (e.g. to pick a GPU), and how many
  /// there are.
  int local_rank() const { return g_->local_rank; }
  int local_size() const { return g_->local_size; }
  /// This rank's part of every global batch: `ts::data::batches(ds, b, rng, pg.shard())`.
  data::shard shard() const { return {g_->rank, g_->size}; }
  const options& settings() const { return g_->opts; }
  /// Why the group failed, or empty while it works.
  const std::string& broken_reason() const { return g_->broken; }

  // ---- collectives: every rank calls the same ones in the same order ----

  /// Reduces t element-wise across the ranks; every rank's t then holds the result.
  template <element_type T, backend_tag B>
  void all_reduce(const Tensor<T, B>& t, reduce_op op = reduce_op::sum) const {
    all_reduce_async(t, op).wait();
  }
  template <element_type T, backend_tag B>
  Work all_reduce_async(const Tensor<T, B>& t, reduce_op op = reduce_op::sum,
                        bool check_call = true) const {
    constexpr std::string_view name = "dist::all_reduce";
    host_only<B>();
    start(name, t);
    const MPI_Op mop = detail::mpi_op<T>(op, name);
    if (check_call && g_->opts.check_calls)
      detail::check_same_call(
          g_, detail::describe_call(detail::c_all_reduce, t, static_cast<int64_t>(op)), name);
    auto s = std::make_shared<detail::staged<T, B>>(t, true);
    const int size = g_->size;
    std::shared_ptr<detail::work_state> w;
    if (ring_all_reduce(t.numel() * static_cast<int64_t>(sizeof(T)), size)) {
      // Large: a ring of point-to-point messages that the waits progress (ring_all_reduce.hpp).
      w = make_work(name, 0);
      auto ring = std::make_shared<detail::ring_all_reduce>(
          g_->ring, g_->rank, size, s->ptr(), count(t, name), detail::mpi_type<T>(), mop,
          static_cast<int64_t>(sizeof(T)), static_cast<int>(g_->ring_count++ % 32768));
      g_->rings.push_back(ring);
      w->ready = [ring, g = g_.get(), name] {
        try {
          g->progress_rings(name);  // this ring is one of them, until it is done
          return ring->done();
        } catch (const dist_error& e) {
          g->mark_broken(e.what());
          throw;
        }
      };
    } else {
      w = make_work(name, 1);
      detail::check_mpi(MPI_Iallreduce(MPI_IN_PLACE, s->ptr(), count(t, name),
                                       detail::mpi_type<T>(), mop, g_->comm, w->reqs.data()),
                        name, "MPI_Iallreduce");
    }
    w->finish = [s, op, size](detail::work_state&) {
      if (op == reduce_op::avg) divide(s->buf, size);
      s->publish();
    };
    return Work(std::move(w));
  }

  /// Copies root's t into every other rank's t.
  template <element_type T, backend_tag B>
  void broadcast(const Tensor<T, B>& t, int root = 0) const {
    broadcast_async(t, root).wait();
  }
  template <element_type T, backend_tag B>
  Work broadcast_async(const Tensor<T, B>& t, int root = 0, bool check_call = true) const {
    constexpr std::string_view name = "dist::broadcast";
    host_only<B>();
    start(name, t);
    check_rank(name, "root", root);
    if (check_call && g_->opts.check_calls)
      detail::check_same_call(g_, detail::describe_call(detail::c_broadcast, t, root), name);
    auto s = std::make_shared<detail::staged<T, B>>(t, g_->rank == root);
    auto w = make_work(name, 1);
    detail::check_mpi(
        MPI_Ibcast(s->ptr(), count(t, name), detail::mpi_type<T>(), root, g_->comm, w->reqs.data()),
        name, "MPI_Ibcast");
    const bool receiver = g_->rank != root;
    w->finish = [s, receiver](detail::work_state&) {
      if (receiver) s->publish();
    };
    return Work(std::move(w));
  }

  /// Gathers every rank's in into out, shaped [size(), in's shape...]: out[r] is rank r's in.
  template <element_type T, backend_tag B>
  void all_gather(const Tensor<T, B>& out, const Tensor<T, B>& in) const {
    all_gather_async(out, in).wait();
  }
  template <element_type T, backend_tag B>
  Work all_gather_async(const Tensor<T, B>& out, const Tensor<T, B>& in) const {
    constexpr std::string_view name = "dist::all_gather";
    host_only<B>();
    start(name, out);
    start(name, in);
    check_stacked(name, "out", out, "in", in);
    if (g_->opts.check_calls)
      detail::check_same_call(g_, detail::describe_call(detail::c_all_gather, in, 0), name);
    // MPI forbids overlapping send and receive buffers: read in from a copy then.
    auto src =
        std::make_shared<detail::staged<T, B>>(in.shares_storage_with(out) ? in.clone() : in, true);
    auto dst = std::make_shared<detail::staged<T, B>>(out, false);
    auto w = make_work(name, 1);
    const MPI_Datatype type = detail::mpi_type<T>();
    const int n = count(in, name);
    detail::check_mpi(
        MPI_Iallgather(src->ptr(), n, type, dst->ptr(), n, type, g_->comm, w->reqs.data()), name,
        "MPI_Iallgather");
    w->finish = [src, dst](detail::work_state&) { dst->publish(); };
    return Work(std::move(w));
  }

  /// Reduces in, shaped [size(), out's shape...], across the ranks and gives rank r the
  /// reduction of every rank's in[r].
  template <element_type T, backend_tag B>
  void reduce_scatter(const Tensor<T, B>& out, const Tensor<T, B>& in,
                      reduce_op op = reduce_op::sum) const {
    reduce_scatter_async(out, in, op).wait();
  }
  template <element_type T, backend_tag B>
  Work reduce_scatter_async(const Tensor<T, B>& out, const Tensor<T, B>& in,
                            reduce_op op = reduce_op::sum) const {
    constexpr std::string_view name = "dist::reduce_scatter";
    host_only<B>();
    start(name, out);
    start(name, in);
    check_stacked(name, "in", in, "out", out);
    const MPI_Op mop = detail::mpi_op<T>(op, name);
    if (g_->opts.check_calls)
      detail::check_same_call(
          g_, detail::describe_call(detail::c_reduce_scatter, out, static_cast<int64_t>(op)), name);
    auto src =
        std::make_shared<detail::staged<T, B>>(in.shares_storage_with(out) ? in.clone() : in, true);
    auto dst = std::make_shared<detail::staged<T, B>>(out, false);
    auto w = make_work(name, 1);
    detail::check_mpi(
        MPI_Ireduce_scatter_block(src->ptr(), dst->ptr(), count(out, name), detail::mpi_type<T>(),
                                  mop, g_->comm, w->reqs.data()),
        name, "MPI_Ireduce_scatter_block");
    const int size = g_->size;
    w->finish = [src, dst, op, size](detail::work_state&) {
      if (op == reduce_op::avg) divide(dst->buf, size);
      dst->publish();
    };
    return Work(std::move(w));
  }

  /// Returns once every rank has called barrier.
  void barrier() const { barrier_async().wait(); }
  Work barrier_async() const {
    constexpr std::string_view name = "dist::barrier";
    start_call(name);
    if (g_->opts.check_calls) {
      detail::call_desc d;
      d.call = detail::c_barrier;
      detail::check_same_call(g_, d, name);
    }
    auto w = make_work(name, 1);
    detail::check_mpi(MPI_Ibarrier(g_->comm, w->reqs.data()), name, "MPI_Ibarrier");
    return Work(std::move(w));
  }

  // ---- point to point: a send on one rank matches a recv of the same tag on the other ----

  /// Sends t to rank dst. The receiver's recv checks that dtype and shape match.
  template <element_type T, backend_tag B>
  void send(const Tensor<T, B>& t, int dst, int tag = 0) const {
    send_async(t, dst, tag).wait();
  }
  template <element_type T, backend_tag B>
  Work send_async(const Tensor<T, B>& t, int dst, int tag = 0) const {
    constexpr std::string_view name = "dist::send";
    host_only<B>();
    start(name, t);
    check_rank(name, "dst", dst);
    check_tag(name, tag);
    auto header =
        std::make_shared<detail::call_desc>(detail::describe_call(detail::c_send, t, tag));
    auto s = std::make_shared<detail::staged<T, B>>(t, true);
    auto w = make_work(name, 2);
    detail::check_mpi(MPI_Isend(header.get(), sizeof(detail::call_desc), MPI_BYTE, dst, 2 * tag,
                                g_->comm, &w->reqs[0]),
                      name, "MPI_Isend");
    detail::check_mpi(MPI_Isend(s->ptr(), count(t, name), detail::mpi_type<T>(), dst, 2 * tag + 1,
                                g_->comm, &w->reqs[1]),
                      name, "MPI_Isend");
    w->finish = [header, s](detail::work_state&) {};
    return Work(std::move(w));
  }

  /// Receives into t what rank src sent with the same tag. Throws dist_error when the sent
  /// tensor's dtype or shape differs from t's.
  template <element_type T, backend_tag B>
  void recv(const Tensor<T, B>& t, int src, int tag = 0) const {
    recv_async(t, src, tag).wait();
  }
  template <element_type T, backend_tag B>
  Work recv_async(const Tensor<T, B>& t, int src, int tag = 0) const {
    constexpr std::string_view name = "dist::recv";
    host_only<B>();
    start(name, t);
    check_rank(name, "src", src);
    check_tag(name, tag);
    auto header = std::make_shared<detail::call_desc>();
    auto s = std::make_shared<detail::staged<T, B>>(t, false);
    auto w = make_work(name, 2);
    detail::check_mpi(MPI_Irecv(header.get(), sizeof(detail::call_desc), MPI_BYTE, src, 2 * tag,
                                g_->comm, &w->reqs[0]),
                      name, "MPI_Irecv");
    detail::check_mpi(MPI_Irecv(s->ptr(), count(t, name), detail::mpi_type<T>(), src, 2 * tag + 1,
                                g_->comm, &w->reqs[1]),
                      name, "MPI_Irecv");
    auto expected = detail::describe_call(detail::c_send, t, tag);
    w->finish = [header, s, expected, src](detail::work_state& ws) {
      if (const std::string why = detail::recv_mismatch(*header, expected, src); !why.empty())
        tessera::detail::fail<dist_error>("dist::recv", why);
      if (ws.statuses[1].MPI_ERROR != MPI_SUCCESS)
        detail::check_mpi(ws.statuses[1].MPI_ERROR, "dist::recv", "MPI_Irecv");
      s->publish();
    };
    return Work(std::move(w));
  }

  /// Tells every other rank that this one failed (their pending and later waits on the group
  /// throw a dist_error naming this rank and `reason`) and breaks the group here too. Use it
  /// where a rank catches an exception that the others cannot know about.
  void abort(std::string_view reason) const {
    if (g_->aborted) return;  // once: a group broken by a timeout can still tell the others
    g_->aborted = true;
    g_->mark_broken("this rank aborted: " + std::string(reason));
    g_->abort_message = reason;
    for (int r = 0; r < g_->size; ++r) {
      if (r == g_->rank) continue;
      const std::string& m = g_->abort_message;
      MPI_Request req = MPI_REQUEST_NULL;
      MPI_Isend(m.data(), static_cast<int>(m.size()), MPI_CHAR, r, detail::abort_tag, g_->control,
                &req);
      g_->abort_sends.push_back(req);
    }
  }

  /// The underlying communicator (a duplicate owned by the group).
  MPI_Comm comm() const { return g_->comm; }

 private:
  friend class NcclGroup;  // shares the state, the checks and the call descriptions
  template <class B>
  static void host_only() {
    static_assert(backend::memory<B>::host_accessible,
                  "tessera::dist: the MPI process group takes tensors in host memory; device "
                  "tensors need the NCCL backend");
  }
  void start_call(std::string_view op) const { g_->check_usable(op); }
  template <class T, class B>
  void start(std::string_view op, const Tensor<T, B>& t) const {
    start_call(op);
    t.check_defined(op);
  }
  void check_rank(std::string_view op, const char* what, int r) const {
    if (r < 0 || r >= g_->size)
      tessera::detail::fail<index_error>(op, what, " ", r, " is not a rank of a group of ",
                                         g_->size);
  }
  static void check_tag(std::string_view op, int tag) {
    if (tag < 0 || tag > 16383)
      tessera::detail::fail<index_error>(op, "tag ", tag, " is outside 0 .. 16383");
  }
  // MPI counts are int: one call moves at most 2^31 - 1 elements.
  template <class T, class B>
  static int count(const Tensor<T, B>& t, std::string_view op) {
    if (t.numel() > std::numeric_limits<int>::max())
      tessera::detail::fail<shape_error>(op, "a tensor of ", t.numel(),
                                         " elements is over MPI's 2^31 - 1 per call; split it");
    return static_cast<int>(t.numel());
  }
  // whole [size, part...] against part.
  template <class T, class B>
  void check_stacked(std::string_view op, const char* wn, const Tensor<T, B>& whole, const char* pn,
                     const Tensor<T, B>& part) const {
    bool ok = whole.rank() == part.rank() + 1 && whole.size(0) == g_->size;
    for (int i = 0; ok && i < part.rank(); ++i) ok = whole.size(i + 1) == part.size(i);
    if (!ok)
      tessera::detail::fail<shape_error>(op, wn, " of shape ", whole.shape(), " is not [", g_->size,
                                         ", ", pn, "'s shape...] for ", pn, " of shape ",
                                         part.shape(), " on a group of ", g_->size);
  }
  template <class T, class B>
  static void divide(const Tensor<T, B>& t, int size) {
    // t is the contiguous staging buffer; its values are divided in place (integers rounded
    // toward zero, low-precision floats through float).
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    T* p = t.data();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (is_floating_v<T>)
        p[i] = static_cast<T>(static_cast<F>(p[i]) / static_cast<F>(size));
      else
        p[i] = static_cast<T>(p[i] / size);
    }
  }
  std::shared_ptr<detail::work_state> make_work(std::string_view op, size_t requests) const {
    auto w = std::make_shared<detail::work_state>();
    w->group = g_;
    w->op = op;
    w->reqs.assign(requests, MPI_REQUEST_NULL);
    w->statuses.resize(requests);
    return w;
  }
  std::shared_ptr<detail::group_state> g_;
};

namespace detail {
inline void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
}  // namespace detail

/// The group of every process of the job (MPI_COMM_WORLD). Initialises MPI when no one has (it
/// reads the environment mpirun or srun set; a program started alone is a group of one) and
/// then finalises it at exit.
inline ProcessGroup init(options opts = options::from_environment()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    detail::check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided),
                      "dist::init", "MPI_Init_thread");
    std::atexit(detail::finalize_at_exit);
  }
  return ProcessGroup(MPI_COMM_WORLD, opts);
}

}  // namespace dist
TESSERA_END_NAMESPACE
