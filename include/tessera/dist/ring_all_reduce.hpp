// tessera/dist/ring_all_reduce.hpp - an all-reduce of large buffers as a ring of point-to-point
// messages (reduce-scatter, then all-gather), progressed step by step by the caller's waits.
//
// Why: ProcessGroup must wait with a deadline and hear abort notices, so it cannot block in
// MPI_Allreduce; but OpenMPI's nonblocking MPI_Iallreduce (libnbc) ran 2-2.5x slower than the
// blocking call from 1 MiB up (docs/distributed.md, "Speed"). Nonblocking sends and receives
// are as fast as the blocking ones, and the ring moves the bandwidth-optimal 2 (P - 1) / P of
// the buffer per rank. MPI_Reduce_local reduces each received segment, with the same datatype
// and operation as MPI_Allreduce would (the low-precision floats' own operations included).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "mpi_types.hpp"

TESSERA_BEGIN_NAMESPACE
namespace dist {
namespace detail {

class ring_all_reduce {
 public:
  /// The unit a step's chunk travels in: a received segment is reduced while it is still in
  /// the L2 cache, and the scratch memory is two segments, whatever the buffer's size.
  /// 512 KiB: at 1 MiB, 128 and 256 KiB segments measured 5-15% slower (2 ranks, Zen 3).
  static constexpr int64_t segment_bytes = int64_t{512} << 10;

  /// Reduces count values of `type` at data (contiguous, in place) by `op` over comm's ranks.
  /// tag tells this operation's messages from those of other rings in flight on comm: every
  /// rank passes the same one (the group counts its rings).
  ring_all_reduce(MPI_Comm comm, int rank, int size, void* data, int64_t count, MPI_Datatype type,
                  MPI_Op op, int64_t elem_bytes, int tag)
      : comm_(comm),
        rank_(rank),
        size_(size),
        data_(static_cast<char*>(data)),
        count_(count),
        type_(type),
        op_(op),
        elem_(elem_bytes),
        segment_(std::max<int64_t>(1, segment_bytes / elem_bytes)),
        tag_(tag),
        tmp_(new char[static_cast<size_t>(2 * segment_ * elem_bytes)]) {}
  ring_all_reduce(const ring_all_reduce&) = delete;
  ring_all_reduce& operator=(const ring_all_reduce&) = delete;

  /// Advances as far as the messages allow; true once every rank's data holds the result.
  /// Throws dist_error (naming op) on an MPI error.
  bool progress(std::string_view op) {
    while (!done()) {
      if (!started_) start_step(op);
      if (!advance_step(op)) return false;
      started_ = false;
      ++step_;
    }
    return true;
  }
  bool done() const { return step_ == 2 * (size_ - 1); }

 private:
  // Chunk c: values [c * count / P, (c + 1) * count / P).
  int64_t chunk_begin(int c) const { return count_ * c / size_; }
  int64_t chunk_count(int c) const { return chunk_begin(c + 1) - chunk_begin(c); }
  char* at(int c, int64_t value = 0) const { return data_ + (chunk_begin(c) + value) * elem_; }
  int64_t segments(int c) const { return (chunk_count(c) + segment_ - 1) / segment_; }
  int64_t segment_count(int c, int64_t j) const {
    return std::min(segment_, chunk_count(c) - j * segment_);
  }
  int wrap(int c) const { return ((c % size_) + size_) % size_; }
  bool reducing() const { return step_ < size_ - 1; }
  // Reduce-scatter step s: send chunk r - s, receive r - s - 1 (rank r then owns r + 1 reduced).
  // All-gather step s: send chunk r + 1 - s, receive r - s.
  int send_chunk() const {
    return reducing() ? wrap(rank_ - step_) : wrap(rank_ + 1 - (step_ - (size_ - 1)));
  }
  int recv_chunk() const {
    return reducing() ? wrap(rank_ - step_ - 1) : wrap(rank_ - (step_ - (size_ - 1)));
  }

  // Sends every segment of this step's chunk; receives them in order: straight into place in
  // the all-gather, through the two scratch slots in the reduce-scatter. reqs_ holds the
  // receives first (the two slots, or one per segment), then the sends: one MPI call tests them
  // all (each test runs MPI's progress engine, which costs when many rings are in flight).
  void start_step(std::string_view op) {
    const int next = wrap(rank_ + 1), prev = wrap(rank_ - 1);
    const int s = send_chunk(), r = recv_chunk();
    const int64_t recvs = reducing() ? 2 : segments(r);
    reqs_.assign(static_cast<size_t>(recvs + segments(s)), MPI_REQUEST_NULL);
    for (int64_t j = 0; j < segments(s); ++j)
      check_mpi(MPI_Isend(at(s, j * segment_), static_cast<int>(segment_count(s, j)), type_, next,
                          tag_, comm_, &reqs_[static_cast<size_t>(recvs + j)]),
                op, "MPI_Isend");
    next_recv_ = 0;
    if (reducing()) {
      for (int slot = 0; slot < 2; ++slot) post_scratch_recv(op, slot, prev);
    } else {
      for (int64_t j = 0; j < segments(r); ++j)
        check_mpi(MPI_Irecv(at(r, j * segment_), static_cast<int>(segment_count(r, j)), type_, prev,
                            tag_, comm_, &reqs_[static_cast<size_t>(j)]),
                  op, "MPI_Irecv");
    }
    started_ = true;
  }
  void post_scratch_recv(std::string_view op, int slot, int prev) {
    const int r = recv_chunk();
    if (next_recv_ >= segments(r)) return;
    slot_segment_[slot] = next_recv_++;
    check_mpi(MPI_Irecv(tmp_.get() + slot * segment_ * elem_,
                        static_cast<int>(segment_count(r, slot_segment_[slot])), type_, prev, tag_,
                        comm_, &reqs_[static_cast<size_t>(slot)]),
              op, "MPI_Irecv");
  }
  // Whether the step is complete; reduces each scratch segment as it arrives.
  bool advance_step(std::string_view op) {
    const int n = static_cast<int>(reqs_.size());
    if (!reducing()) {
      int done = 0;
      check_mpi(MPI_Testall(n, reqs_.data(), &done, MPI_STATUSES_IGNORE), op, "MPI_Testall");
      return done != 0;
    }
    const int r = recv_chunk(), prev = wrap(rank_ - 1);
    done_.resize(reqs_.size());
    for (bool moved = true; moved;) {
      moved = false;
      int completed = 0;
      check_mpi(MPI_Testsome(n, reqs_.data(), &completed, done_.data(), MPI_STATUSES_IGNORE), op,
                "MPI_Testsome");
      if (completed == MPI_UNDEFINED) return true;  // every request has completed
      for (int k = 0; k < completed; ++k) {
        const int slot = done_[static_cast<size_t>(k)];
        if (slot >= 2) continue;  // a send
        const int64_t j = slot_segment_[slot];
        check_mpi(MPI_Reduce_local(tmp_.get() + slot * segment_ * elem_, at(r, j * segment_),
                                   static_cast<int>(segment_count(r, j)), type_, op_),
                  op, "MPI_Reduce_local");
        post_scratch_recv(op, slot, prev);
        moved = true;
      }
    }
    for (const MPI_Request& q : reqs_)
      if (q != MPI_REQUEST_NULL) return false;
    return true;
  }

  MPI_Comm comm_;
  int rank_, size_;
  char* data_;
  int64_t count_;
  MPI_Datatype type_;
  MPI_Op op_;
  int64_t elem_, segment_;  // segment_: values per segment
  int tag_;
  std::unique_ptr<char[]> tmp_;    // two segments
  std::vector<MPI_Request> reqs_;  // this step's receives, then its sends
  std::vector<int> done_;          // MPI_Testsome's completed indices
  int64_t slot_segment_[2] = {0, 0};
  int64_t next_recv_ = 0;  // the next segment of the chunk to post a scratch receive for
  int step_ = 0;
  bool started_ = false;
};

}  // namespace detail
}  // namespace dist
TESSERA_END_NAMESPACE
