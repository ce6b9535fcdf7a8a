// tests/cuda_emu/include/cuda_runtime.h - a host emulation of the part of the CUDA runtime and
// execution model that tessera uses, so the CUDA backend's kernels and its test suite run on a
// machine without a GPU (CI). It stands in for the toolkit's <cuda_runtime.h> when the tests are
// compiled as C++ with -DTESSERA_CUDA_HOST_EMULATION and this directory first on the include
// path (tests/cuda_emu/CMakeLists.txt).
//
// What it models, and so checks:
//  - one device with sm_count multiprocessors and memory_bytes of memory; cudaMalloc returns
//    host memory filled with 0xff bytes (NaN / -1), so a kernel that reads an output it never
//    wrote, or a result the test never copied, shows up;
//  - copies check their kind: a "device" pointer must lie inside a live cudaMalloc block, so host
//    code that hands a host pointer to the device (or the reverse) fails with
//    cudaErrorInvalidValue, as the real runtime does for most such mistakes;
//  - launches check their configuration (threads per block, grid extents) like the driver;
//  - every thread of a block runs as a fiber on the launching host thread; __syncthreads()
//    switches to the next fiber, and a block whose threads do not all reach the same
//    __syncthreads (some exited, or waiting at another one) fails the launch with
//    cudaErrorLaunchFailure and a message naming the kernel, block and source line;
//  - blocks run one after another, in order (in reverse order under thread_order::reverse),
//    so a kernel whose result depends on how blocks are scheduled is caught only as far as the
//    two orders differ; warp semantics and the memory model are not modelled. Between two
//    barriers a block's threads run one at a time, each to its next barrier, in the order
//    thread_order sets (TESSERA_CUDA_EMU_ORDER=forward, reverse or mixed; mixed by default:
//    forward and reverse by turns, from one barrier interval and one block to the next). So a
//    missing __syncthreads between a write to shared memory and another thread's read of it
//    (or between a read and another thread's overwrite) gives the reader the wrong value in one
//    of the two orders: mixed catches it in a kernel of two or more blocks, or in a loop, in one
//    run. Build with -fsanitize=address to catch out-of-bounds accesses of device memory inside
//    kernels (fiber switches are annotated for ASan).
//  - dynamic shared memory (tessera's cuda_dynamic_smem()): a launch asking for more than 48 KB
//    fails unless cudaFuncSetAttribute raised the kernel's limit first (at most 227 KB, sm_90's),
//    and every block's buffer starts filled with 0xff bytes, so reads of unwritten shared
//    memory show up; so does static shared memory (TESSERA_CUDA_SHARED, the only way it can be
//    declared here), refilled when each block first reaches its declaration;
//  - asynchronous copies to shared memory (cp.async, through tessera's cuda_cp_async16): a copy
//    lands only when its thread waits for its group (cuda_cp_async_wait), never earlier, so a
//    kernel that reads a stage before waiting for it reads stale data; copies must be 16-byte
//    aligned at both ends, and a thread that exits with copies outstanding fails the launch;
//  - wgmma.mma_async (mma.h, through tessera's wgmma.cuh): each runs only when its thread's
//    wgmma.wait_group lets its group complete, reading shared memory and updating the
//    accumulators then, so a kernel that overwrites a stage, or reads its accumulators, before
//    that wait computes wrong results; a thread that exits with wgmma outstanding fails the
//    launch;
//  - mbarriers and the tensor memory accelerator (cuda.h here, through tessera's tma.cuh): a
//    thread waiting on a phase of an mbarrier parks (other threads run) until that phase
//    completes; a TMA copy lands only when its barrier's phase completes (its arrivals all made
//    and, at that moment, its bytes counted against those expected), so a thread that reads a
//    stage without waiting for its barrier reads stale data; threads that all wait on phases
//    that cannot complete (bytes or arrivals never coming) fail the launch, as do copies whose
//    bytes exceed those expected, arrivals beyond a phase's count and an uninitialised barrier;
//  - warp-collective instructions (ldmatrix here, mma.sync in mma.h, through tessera's
//    mma_sync.cuh): each lane publishes its operands, waits for the others (modelled as a block
//    barrier, so every warp of the block must make the same collective calls in the same order,
//    stricter than a GPU), and computes its own share of the result from the lanes' operands as
//    the PTX ISA assigns them, so a kernel that gets a fragment layout wrong gets wrong results.
//  - asynchrony and streams: kernels, asynchronous copies and memsets, event records and waits
//    are queued on their streams and run only when the host waits for them, unrelated streams'
//    work in the reverse of its call order (work_queue below), so host code that reads a result
//    or refills a pinned buffer without waiting, or a stream that uses another's result without
//    an event, sees stale data, as it may on a GPU.
// What it does not model: performance, work running concurrently, more than one device,
// atomics, shuffles and votes. A kernel that needs those
// does not compile here, which is the signal to extend this file.
#pragma once

#if defined(__CUDACC__)
#error "cuda_emu/cuda_runtime.h emulates CUDA for host compilers; nvcc must use the toolkit's"
#endif

#ifndef TESSERA_CUDA_HOST_EMULATION
#define TESSERA_CUDA_HOST_EMULATION 1
#endif

#include <ucontext.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_CUDA_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_CUDA_EMU_ASAN 1
#endif
#endif
#if defined(TESSERA_CUDA_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// ---------------------------------------------------------------------------------------------
// Language extensions: host-only meanings.

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Static shared memory is declared through tessera's TESSERA_CUDA_SHARED (block_shared.cuh):
// blocks run one at a time, so one static object per kernel instantiation serves every block,
// refilled with 0xff bytes when a block first reaches its declaration (undefined_at_block_start).
// A bare __shared__ would start at zero and keep the previous block's values, hiding reads of
// what the block never wrote: it does not compile here.
#define __shared__ declare_static_shared_memory_with_TESSERA_CUDA_SHARED
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__

struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
};
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
};

// Built-in variables of the running thread (set by the emulated scheduler).
inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};

// ---------------------------------------------------------------------------------------------
// Runtime types.

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMultiProcessorCount = 16,
};

struct CUstream_st {
  unsigned int flags = 0;
};
typedef struct CUstream_st* cudaStream_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

namespace tessera_cuda_emulation {

inline constexpr int sm_count = 2;
inline constexpr size_t memory_bytes = size_t{1} << 30;  // the OOM test fills most of it
inline constexpr size_t fiber_stack_bytes = size_t{256} << 10;

/// The runtime's error slot of the calling host thread (cudaGetLastError reads and clears it).
inline thread_local cudaError_t last_error = cudaSuccess;

inline cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

/// Live device blocks, start -> size.
/// Live blocks of memory by start address, and lookups of addresses in them.
struct block_map {
  std::mutex mu;
  std::map<uintptr_t, size_t> blocks;
  /// Whether [p, p + n) lies inside one live block.
  bool holds(const void* p, size_t n) {
    std::lock_guard lock(mu);
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = blocks.upper_bound(a);
    if (it == blocks.begin()) return false;
    --it;
    return a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
  }
};

/// The device's memory: the blocks cudaMalloc returned, and the bytes they hold.
struct device_memory : block_map {
  size_t used = 0;
  static device_memory& get() {
    static auto* m = new device_memory;  // never destroyed: tensors in statics outlive main
    return *m;
  }
};

/// Pinned host blocks (cudaHostAlloc): asynchronous copies to and from them are queued work;
/// copies to and from other (pageable) host memory are not (see cudaMemcpyAsync).
struct pinned_memory : block_map {
  static pinned_memory& get() {
    static auto* m = new pinned_memory;
    return *m;
  }
};

// ---------------------------------------------------------------------------------------------
// The execution model: one block at a time, its threads as fibers.

/// One cp.async of a thread: `bytes` of src, then zeros up to 16, land at dst when it completes.
struct async_copy {
  void* dst;
  const void* src;
  unsigned bytes;
};

/// A thread's asynchronous operations of one kind (cp.async copies, wgmma), in groups: issued
/// ones join the open group; commit closes it; complete(n, finish) finishes every committed
/// group but the newest n, oldest first (the wait_group instructions).
template <class Op>
struct async_groups {
  std::vector<Op> open;                   // issued, not yet committed
  std::deque<std::vector<Op>> committed;  // groups, oldest first
  void commit() {
    committed.push_back(std::move(open));
    open.clear();
  }
  template <class Finish>
  void complete(size_t newest_pending, Finish finish) {
    while (committed.size() > newest_pending) {
      for (Op& op : committed.front()) finish(op);
      committed.pop_front();
    }
  }
  bool empty() const { return open.empty() && committed.empty(); }
  void clear() {
    open.clear();
    committed.clear();
  }
};

// A fiber's saved execution context, and the switch between two. glibc's swapcontext makes a
// system call (sigprocmask) on every switch, and a kernel switches fibers at every barrier of
// every thread: on x86-64 the switch saves only what the ABI says a call preserves (callee-saved
// registers, the SSE and x87 control words) on the stack it leaves, about 20 instructions and no
// system call. Other targets keep ucontext.
#if defined(__x86_64__) && defined(__GNUC__)
struct context {
  void* sp = nullptr;  // the suspended stack, its saved registers on top
};

/// Saves the running context in *save and resumes *to; returns when something resumes *save.
[[gnu::naked, gnu::noinline]] inline void switch_context(context* /*save: rdi*/,
                                                         context* /*to: rsi*/) {
  asm(R"(
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq (%rsi), %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
  )");
}

/// A context that, once resumed, calls entry() on the given stack; entry must never return.
inline void make_context(context& c, char* stack, size_t bytes, void (*entry)()) {
#if defined(TESSERA_CUDA_EMU_ASAN)
  // A fiber that ended left its frames (and their poisoned redzones) on the stack it reuses.
  __asan_unpoison_memory_region(stack, bytes);
#endif
  auto** sp = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15});
  *--sp = nullptr;                              // entry's return address: none (ends backtraces)
  *--sp = reinterpret_cast<void*>(entry);       // where switch_context's ret goes
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12-r15
  // The SSE and x87 control words (rounding, exceptions masked) the fiber starts with: ours.
  uint16_t x87 = 0;
  asm("fnstcw %0" : "=m"(x87));
  const uint32_t control[2] = {__builtin_ia32_stmxcsr(), x87};
  std::memcpy(--sp, control, sizeof control);
  c.sp = sp;
}
#else
struct context {
  ucontext_t uc;
};
inline void switch_context(context* save, context* to) { swapcontext(&save->uc, &to->uc); }
inline void make_context(context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

struct fiber {
  context ctx;
  std::unique_ptr<char[]> stack;
  enum { ready, waiting, polling, done } state = ready;
  const char* barrier_file = nullptr;  // where it waits (a __syncthreads, or an mbarrier)
  int barrier_line = 0;
  uint32_t poll_barrier = 0;  // polling: the mbarrier (shared address) and phase parity
  unsigned poll_parity = 0;
  void* asan_fake_stack = nullptr;
  async_groups<async_copy> copies;  // cp.async: each lands when its group completes
  // wgmma.mma_async: each runs when a wgmma.wait_group lets its group complete.
  async_groups<std::function<void()>> wgmma;
  unsigned collectives = 0;  // warp-collective calls made (warp_share)
};

/// An mbarrier (in shared memory on a GPU; here beside it, by shared address): `count` arrivals
/// complete a phase once the transaction bytes expected (expect_tx) have all landed. TMA copies
/// wait in `copies` and land when the phase completes, the latest moment a GPU may land them.
struct mbarrier {
  int count = 0;       // arrivals per phase
  int pending = 0;     // arrivals the current phase still needs
  int64_t tx = 0;      // bytes expected by the current phase and not yet landed
  unsigned phase = 0;  // phases completed
  std::vector<std::pair<int64_t, std::function<void()>>> copies;  // bytes, the landing
};

/// Bytes of a lane's operands in one warp-collective call.
inline constexpr size_t warp_slot_bytes = 64;

struct block_run {
  std::vector<fiber>* fibers = nullptr;
  fiber* current = nullptr;
  context scheduler;
  const std::function<void()>* body = nullptr;
  void* scheduler_fake_stack = nullptr;
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_bytes = 0;
  bool failed = false;  // a thread broke a rule (message printed): the launch fails
  // Every thread's operands of its latest two warp-collective calls (by parity): a lane writes
  // call n + 1's while slower lanes may still read call n's.
  std::vector<unsigned char> exchange[2];
  std::map<uint32_t, mbarrier> barriers;  // the block's mbarriers, by shared address
};

inline thread_local block_run* running = nullptr;

// AddressSanitizer must be told about stack switches, or it reports false errors.
inline void asan_enter(void** fake_save, const void* bottom, size_t bytes) {
#if defined(TESSERA_CUDA_EMU_ASAN)
  __sanitizer_start_switch_fiber(fake_save, bottom, bytes);
#else
  (void)fake_save, (void)bottom, (void)bytes;
#endif
}
inline void asan_entered(void* fake, const void** old_bottom, size_t* old_bytes) {
#if defined(TESSERA_CUDA_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake, old_bottom, old_bytes);
#else
  (void)fake, (void)old_bottom, (void)old_bytes;
#endif
}

inline void fiber_main() {
  block_run& r = *running;
  asan_entered(nullptr, &r.scheduler_stack, &r.scheduler_stack_bytes);
  (*r.body)();
  if (!r.current->copies.empty() || !r.current->wgmma.empty()) {
    // On a GPU the copies would land (and wgmma read shared memory and write its registers) at
    // some later time, perhaps over shared memory that the block has reused since: a kernel must
    // wait for all of them.
    std::fprintf(stderr,
                 "tessera cuda emulation: thread (%u, %u, %u) exited with asynchronous copies or "
                 "wgmma outstanding\n",
                 threadIdx.x, threadIdx.y, threadIdx.z);
    r.failed = true;
  }
  r.current->state = fiber::done;
  asan_enter(nullptr, r.scheduler_stack, r.scheduler_stack_bytes);
  switch_context(&r.current->ctx, &r.scheduler);  // for good: a done fiber is never resumed
  std::abort();
}

/// Parks the running thread of block r in `state` (waiting at a __syncthreads, or polling an
/// mbarrier), noting where, and switches to the scheduler; returns when it runs again.
inline void park(block_run& r, decltype(fiber::state) state, const char* file, int line) {
  fiber& f = *r.current;
  f.state = state;
  f.barrier_file = file;
  f.barrier_line = line;
  asan_enter(&f.asan_fake_stack, r.scheduler_stack, r.scheduler_stack_bytes);
  switch_context(&f.ctx, &r.scheduler);
  asan_entered(f.asan_fake_stack, &r.scheduler_stack, &r.scheduler_stack_bytes);
}

/// __syncthreads(): park this thread until every thread of the block has arrived.
inline void sync_threads(const char* file, int line) {
  block_run* r = running;
  if (!r) {
    std::fprintf(stderr, "tessera cuda emulation: __syncthreads() outside a kernel (%s:%d)\n", file,
                 line);
    std::abort();
  }
  park(*r, fiber::waiting, file, line);
}

// A context switch returns when another switches back: the switches live in these small functions
// so that the scheduler's loop variables are not at risk of being clobbered (ucontext).
[[gnu::noinline]] inline void prepare_fiber(fiber& f) {
  if (!f.stack) f.stack.reset(new char[fiber_stack_bytes]);
  make_context(f.ctx, f.stack.get(), fiber_stack_bytes, fiber_main);
  f.state = fiber::ready;
  f.copies.clear();
  f.wgmma.clear();
  f.collectives = 0;
}

/// Runs f until it waits at a barrier or exits.
[[gnu::noinline]] inline void resume_fiber(fiber& f, block_run& r) {
  r.current = &f;
  asan_enter(&r.scheduler_fake_stack, f.stack.get(), fiber_stack_bytes);
  switch_context(&r.scheduler, &f.ctx);
  asan_entered(r.scheduler_fake_stack, nullptr, nullptr);
}

inline constexpr size_t default_dynamic_smem = size_t{48} << 10;
inline constexpr size_t max_dynamic_smem = size_t{227} << 10;  // sm_90's opt-in maximum

/// A kernel's dynamic shared memory limit: set (when bytes is given, by cudaFuncSetAttribute)
/// and returned.
inline size_t dynamic_smem_limit(const void* kernel, const size_t* bytes = nullptr) {
  static std::mutex mu;
  static std::map<const void*, size_t> limits;
  std::lock_guard lock(mu);
  if (bytes) limits[kernel] = *bytes;
  const auto it = limits.find(kernel);
  return it == limits.end() ? default_dynamic_smem : it->second;
}

/// The running block's number, counted over every launch (launches run one at a time).
inline uint64_t block_serial = 0;

/// Static shared memory (TESSERA_CUDA_SHARED): the first thread of each block to reach the
/// declaration fills the object with 0xff bytes, as a GPU leaves it undefined; `filled_for`
/// remembers the block that did.
inline void undefined_at_block_start(void* object, size_t bytes, uint64_t& filled_for) {
  if (filled_for == block_serial) return;
  filled_for = block_serial;
  std::memset(object, 0xff, bytes);
}

/// The running block's dynamic shared memory.
inline thread_local unsigned char* dynamic_smem = nullptr;
inline thread_local size_t dynamic_smem_bytes = 0;  // how many bytes the launch asked for

/// The shared-memory address of p (what __cvta_generic_to_shared gives on a GPU): its offset in
/// the running block's dynamic shared memory, the only shared memory whose address kernels take.
inline uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - dynamic_smem);
}

/// The shared address where the 128-byte swizzle puts the byte at address `at`: its 16-byte chunk
/// bits (4-6) XORed with its bits 7-9, as the hardware does for wgmma's operands and TMA's copies.
inline uint32_t swizzle_128b(uint32_t at) { return at ^ (at >> 7 & 7) << 4; }

/// The running block's mbarrier at shared address `at`; null (the launch failed, with a
/// message naming `op`) where none was initialised.
inline mbarrier* find_mbarrier(block_run& r, uint32_t at, const char* op) {
  const auto it = r.barriers.find(at);
  if (it != r.barriers.end()) return &it->second;
  std::fprintf(stderr, "tessera cuda emulation: %s on shared byte %u, where no mbarrier.init ran\n",
               op, at);
  r.failed = true;
  return nullptr;
}

/// Completes b's current phase if it can: its arrivals made, then its copies land (now, the
/// latest moment they could on a GPU), and if that brings the bytes expected to zero the phase
/// completes and the next one starts. Bytes beyond those expected fail the launch.
inline void mbarrier_settle(block_run& r, mbarrier& b) {
  if (b.pending != 0) return;
  for (auto& [bytes, land] : b.copies) {
    land();
    b.tx -= bytes;
  }
  b.copies.clear();
  if (b.tx < 0) {
    std::fprintf(stderr,
                 "tessera cuda emulation: TMA copies brought %lld bytes more than the mbarrier "
                 "phase expected\n",
                 static_cast<long long>(-b.tx));
    r.failed = true;
    b.tx = 0;
  }
  if (b.tx == 0) {
    ++b.phase;
    b.pending = b.count;
  }
}

/// Whether the phase of parity `parity` of the mbarrier at `at` has completed (its current
/// phase has the other parity), after settling what can complete.
inline bool mbarrier_passed(block_run& r, uint32_t at, unsigned parity) {
  mbarrier* const b = find_mbarrier(r, at, "mbarrier.try_wait");
  if (!b) return true;  // the launch has failed: let the thread run to its end
  mbarrier_settle(r, *b);
  return (b->phase & 1u) != (parity & 1u);
}

/// Seconds spent running kernels (in launch) by this process, and whether kernels run at all:
/// with skip_kernels (set from the environment variable TESSERA_CUDA_EMU_SKIP_KERNELS) a launch
/// checks its configuration and returns, so a program times the host code between launches alone
/// (the results are garbage). docs/perf/cuda_step_host.cpp uses both.
inline double kernel_seconds = 0;
inline const bool skip_kernels = std::getenv("TESSERA_CUDA_EMU_SKIP_KERNELS") != nullptr;

/// The order in which a block's threads run between two barriers (and blocks run): forward
/// (threads and blocks by increasing index), reverse (both by decreasing index), or mixed
/// (blocks forward; threads forward in block b's barrier interval j when b + j is even, in
/// reverse otherwise). Set from TESSERA_CUDA_EMU_ORDER; tests may change it between launches.
enum class thread_order { forward, reverse, mixed };

inline thread_order order_from_environment() {
  const char* v = std::getenv("TESSERA_CUDA_EMU_ORDER");
  if (!v || std::strcmp(v, "mixed") == 0) return thread_order::mixed;
  if (std::strcmp(v, "forward") == 0) return thread_order::forward;
  if (std::strcmp(v, "reverse") == 0) return thread_order::reverse;
  std::fprintf(stderr,
               "tessera cuda emulation: TESSERA_CUDA_EMU_ORDER=%s is not one of "
               "forward, reverse, mixed\n",
               v);
  std::abort();
}

inline thread_order order = order_from_environment();

/// When TMA copies land: late (default), when their barrier's phase completes, so a thread that
/// reads a stage without waiting for its barrier reads stale data; or early, at once when
/// issued, so a producer that refills a stage before the readers of its previous contents are
/// done (a barrier released too soon) overwrites what they still read (with wgmma running late,
/// the default). Tests run kernels both ways, and with wgmma_runs_early; a GPU lands them
/// anywhere in between.
inline bool tma_lands_early = false;
/// Whether wgmma.mma_async runs at once (the earliest moment) or at its wait (the latest).
inline bool wgmma_runs_early = false;

/// Whether work reaches the device as on a GPU: queued, to run when the host synchronizes (the
/// default), or at its call (TESSERA_CUDA_EMU_DEFER=0, for debugging).
inline const bool defer_work = [] {
  const char* v = std::getenv("TESSERA_CUDA_EMU_DEFER");
  return !(v && std::strcmp(v, "0") == 0);
}();

/// The device's work: kernels, asynchronous copies and memsets, event records and event waits,
/// each queued on its stream. Nothing runs until the host waits: cudaStreamSynchronize runs what
/// the stream's last item needs, cudaEventSynchronize what the event's record needs, a blocking
/// cudaMemcpy or a cudaMemcpyAsync to pageable memory what the copy needs, and
/// cudaDeviceSynchronize, cudaFree, cudaFreeHost and cudaEventDestroy everything. An item runs
/// after the one before it on its stream, after the event records its stream was told to wait
/// for (cudaStreamWaitEvent), and, between the legacy default stream and the blocking streams
/// (those made without cudaStreamNonBlocking), after the other side's last item, as the CUDA
/// model orders them; nothing else orders it. Of the items ready to run the latest queued runs
/// first, so work on different streams runs in the reverse of its call order unless something
/// orders it. So host code that reads a result or refills a pinned buffer without waiting for
/// the right work, or a stream that uses another's result without waiting for its event, sees the
/// data as it was before that work, as it may on a GPU. A queued item returns its error; the
/// first one is reported by the waiting call, as a GPU reports a kernel's fault.
struct work_queue {
  struct item {
    std::vector<uint64_t> after;  // items that must run first (some may have run)
    std::function<cudaError_t()> work;
  };
  struct stream_state {
    uint64_t last = 0;  // the last item queued on the stream (0: none)
    bool blocking = true;
  };
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<uint64_t, item> pending;              // by id, in call order
  std::map<cudaStream_t, stream_state> streams;  // the legacy stream under cudaStreamLegacy
  static work_queue& get() {
    static auto* q = new work_queue;  // never destroyed: work may be queued at exit
    return *q;
  }
  static cudaStream_t key(cudaStream_t s) { return s ? s : cudaStreamLegacy; }
  bool is_pending(uint64_t id) const { return id != 0 && pending.count(id) != 0; }
  /// Queues work on stream s, ordered after `extra` too; returns its id.
  uint64_t add(cudaStream_t s, std::function<cudaError_t()> work, uint64_t extra = 0) {
    const cudaStream_t k = key(s);
    stream_state& st = streams[k];
    if (k != cudaStreamLegacy && k != cudaStreamPerThread) st.blocking = (k->flags & 1u) == 0;
    item it{{}, std::move(work)};
    if (is_pending(st.last)) it.after.push_back(st.last);
    if (is_pending(extra)) it.after.push_back(extra);
    if (k == cudaStreamLegacy) {
      for (const auto& [other, o] : streams)
        if (other != k && o.blocking && is_pending(o.last)) it.after.push_back(o.last);
    } else if (st.blocking) {
      const auto legacy = streams.find(cudaStreamLegacy);
      if (legacy != streams.end() && is_pending(legacy->second.last))
        it.after.push_back(legacy->second.last);
    }
    const uint64_t id = next_id++;
    pending.emplace(id, std::move(it));
    st.last = id;
    return id;
  }
  /// Runs `targets` (0 for none) and every pending item they need, or everything (all); returns
  /// the first error one of them raised.
  cudaError_t run(std::vector<uint64_t> targets, bool all) {
    std::map<uint64_t, bool> needed;  // id -> whether run
    if (all)
      for (const auto& [id, it] : pending) needed.emplace(id, false);
    while (!targets.empty()) {
      const uint64_t id = targets.back();
      targets.pop_back();
      if (!is_pending(id) || !needed.emplace(id, false).second) continue;
      for (const uint64_t a : pending.at(id).after) targets.push_back(a);
    }
    cudaError_t first = cudaSuccess;
    for (size_t left = needed.size(); left > 0; --left) {
      // The latest queued item whose predecessors have all run.
      uint64_t pick = 0;
      for (auto it = needed.rbegin(); it != needed.rend() && pick == 0; ++it) {
        if (it->second) continue;
        bool ready = true;
        for (const uint64_t a : pending.at(it->first).after) ready = ready && !is_pending(a);
        if (ready) pick = it->first;
      }
      needed[pick] = true;
      const auto work = std::move(pending.at(pick).work);
      pending.erase(pick);
      const cudaError_t e = work();
      if (first == cudaSuccess) first = e;
    }
    return first;
  }
};

/// Queues `work` on `stream`, after `extra` as well (or, without defer_work, runs it now and
/// records its error); returns its id in the queue (0 when it ran).
inline uint64_t enqueue(cudaStream_t stream, std::function<cudaError_t()> work,
                        uint64_t extra = 0) {
  if (!defer_work) {
    record(work());
    return 0;
  }
  auto& q = work_queue::get();
  std::lock_guard lock(q.mu);
  return q.add(stream, std::move(work), extra);
}

/// Runs every queued item; returns the first error one raised.
inline cudaError_t run_queued_work() {
  auto& q = work_queue::get();
  std::lock_guard lock(q.mu);
  return q.run({}, true);
}

/// Runs item `id` and what it needs (nothing if it has run).
inline cudaError_t run_queued_item(uint64_t id) {
  auto& q = work_queue::get();
  std::lock_guard lock(q.mu);
  return q.run({id}, false);
}

/// Runs the last item queued on `stream` and what it needs.
inline cudaError_t run_queued_stream(cudaStream_t stream) {
  auto& q = work_queue::get();
  std::lock_guard lock(q.mu);
  const auto it = q.streams.find(work_queue::key(stream));
  return it == q.streams.end() ? cudaSuccess : q.run({it->second.last}, false);
}

/// Runs body (the kernel call) for every thread of grid x block, blocks in order, and records
/// launch errors in the host thread's error slot like the runtime. `kernel` identifies the kernel
/// for its dynamic shared memory limit.
/// The stream of the calling host thread's last launch, copy or memset (tests check which stream
/// an op used; work itself runs at once whatever the stream).
inline thread_local cudaStream_t last_stream = nullptr;

inline void run_launch(const char* what, dim3 grid, dim3 block, const std::function<void()>& body,
                       size_t smem_bytes, thread_order how);

/// Checks a launch's configuration as the driver does at the call (a bad one is recorded in the
/// calling thread's error slot) and queues the kernel run, with the thread order and the TMA and
/// wgmma timing in force now. `body` must hold the kernel's arguments by value.
inline void launch(const char* what, dim3 grid, dim3 block, std::function<void()> body,
                   size_t smem_bytes = 0, const void* kernel = nullptr,
                   cudaStream_t stream = nullptr) {
  last_stream = stream;
  if (running) {
    std::fprintf(stderr, "tessera cuda emulation: %s launched from device code\n", what);
    std::abort();
  }
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535) {
    record(cudaErrorInvalidConfiguration);
    return;
  }
  if (skip_kernels) return;
  if (smem_bytes > default_dynamic_smem && smem_bytes > dynamic_smem_limit(kernel)) {
    std::fprintf(stderr,
                 "tessera cuda emulation: %s asks for %zu bytes of dynamic shared memory "
                 "without cudaFuncSetAttribute allowing it\n",
                 what, smem_bytes);
    record(cudaErrorInvalidValue);
    return;
  }
  enqueue(stream, [what, grid, block, body = std::move(body), smem_bytes, how = order,
                   tma_early = tma_lands_early, wgmma_early = wgmma_runs_early] {
    const bool saved_tma = tma_lands_early, saved_wgmma = wgmma_runs_early;
    tma_lands_early = tma_early;
    wgmma_runs_early = wgmma_early;
    const cudaError_t saved_error = last_error;
    last_error = cudaSuccess;
    run_launch(what, grid, block, body, smem_bytes, how);
    const cudaError_t e = last_error;
    last_error = saved_error;
    tma_lands_early = saved_tma;
    wgmma_runs_early = saved_wgmma;
    return e;
  });
}

/// Whether the device can reach what a kernel argument points to: null, device memory (a live
/// cudaMalloc block, its end included) or pinned host memory; arguments that are not pointers
/// pass. A GPU faults when a kernel dereferences any other address (a host pointer handed over by
/// mistake), so the emulation refuses it at the launch.
template <class T>
bool device_reachable(const T&) {
  return true;
}
template <class T>
bool device_reachable(T* p) {
  return !p || device_memory::get().holds(p, 0) || pinned_memory::get().holds(p, 1);
}

/// kernel<<<grid, block, smem_bytes, stream>>>(args...): checks the pointer arguments, then
/// queues the kernel with its arguments (converted to the parameters' types, as a launch does).
template <class... P>
void launch_kernel(const char* what, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes,
                   cudaStream_t stream, std::type_identity_t<P>... args) {
  int bad = 0, i = 0;
  ((++i, bad = (bad != 0 || device_reachable(args)) ? bad : i), ...);
  if (bad) {
    std::fprintf(stderr,
                 "tessera cuda emulation: %s: argument %d points to memory the device cannot "
                 "reach (not device memory, not pinned)\n",
                 what, bad);
    last_stream = stream;
    record(cudaErrorInvalidValue);
    return;
  }
  launch(
      what, grid, block, [kernel, args...] { kernel(args...); }, smem_bytes,
      reinterpret_cast<const void*>(kernel), stream);
}

/// Runs a queued launch: every thread of grid x block, as fibers, in `how` order; a fault is
/// recorded in the running host thread's error slot.
inline void run_launch(const char* what, dim3 grid, dim3 block, const std::function<void()>& body,
                       size_t smem_bytes, thread_order how) {
  static std::mutex device_mu;  // one device: launches from several host threads take turns
  std::lock_guard lock(device_mu);
  const auto started = std::chrono::steady_clock::now();
  struct timed {
    std::chrono::steady_clock::time_point t0;
    ~timed() {
      kernel_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } time_it{started};
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  // 1024-byte aligned, so that shared addresses (offsets from here, smem_address) have the
  // alignment of the pointers, as in a GPU's shared window (wgmma's swizzle atoms rely on it).
  std::vector<unsigned char> smem(smem_bytes + 1024);
  unsigned char* const smem_base =
      smem.data() + (1024 - reinterpret_cast<uintptr_t>(smem.data()) % 1024) % 1024;
  dynamic_smem = smem_base;
  dynamic_smem_bytes = smem_bytes;
  static std::vector<fiber> fibers(1024);
  block_run r;
  r.fibers = &fibers;
  for (auto& e : r.exchange) e.assign(static_cast<size_t>(threads) * warp_slot_bytes, 0);
  r.body = &body;
  gridDim = grid;
  blockDim = block;
  running = &r;
  const auto n = static_cast<size_t>(threads);
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  for (uint64_t block_number = 0; block_number < blocks; ++block_number) {
    const uint64_t b = how == thread_order::reverse ? blocks - 1 - block_number : block_number;
    const unsigned bx = static_cast<unsigned>(b % grid.x);
    const unsigned by = static_cast<unsigned>(b / grid.x % grid.y);
    const unsigned bz = static_cast<unsigned>(b / (uint64_t{grid.x} * grid.y));
    blockIdx = uint3{bx, by, bz};
    std::memset(smem_base, 0xff, smem_bytes);  // undefined on a GPU
    ++block_serial;                            // and so is static shared memory
    r.barriers.clear();
    for (size_t i = 0; i < n; ++i) {
      fiber& f = fibers[i];
      prepare_fiber(f);
    }
    for (uint64_t interval = 0;; ++interval) {
      const bool backwards =
          how == thread_order::reverse || (how == thread_order::mixed && (b + interval) % 2 == 1);
      // Run the ready threads; then wake those whose mbarrier phase has completed, and again.
      for (bool woken = true; woken;) {
        for (size_t k = 0; k < n; ++k) {
          const size_t i = backwards ? n - 1 - k : k;
          fiber& f = fibers[i];
          if (f.state != fiber::ready) continue;
          threadIdx = uint3{static_cast<unsigned>(i % block.x),
                            static_cast<unsigned>(i / block.x % block.y),
                            static_cast<unsigned>(i / (uint64_t{block.x} * block.y))};
          resume_fiber(f, r);
        }
        woken = false;
        for (size_t i = 0; i < n; ++i) {
          fiber& f = fibers[i];
          if (f.state == fiber::polling && mbarrier_passed(r, f.poll_barrier, f.poll_parity)) {
            f.state = fiber::ready;
            woken = true;
          }
        }
      }
      // Every thread must wait at the same __syncthreads: count those at the first one's.
      // A thread still waiting on an mbarrier can never pass: its phase cannot complete.
      const fiber* first = nullptr;
      const fiber* other = nullptr;
      const fiber* stuck = nullptr;
      size_t waiting = 0, at_first = 0;
      for (size_t i = 0; i < n; ++i) {
        const fiber& f = fibers[i];
        if (f.state == fiber::polling && !stuck) stuck = &f;
        if (f.state != fiber::waiting) continue;
        ++waiting;
        if (!first) first = &f;
        if (f.barrier_line == first->barrier_line &&
            std::strcmp(f.barrier_file, first->barrier_file) == 0)
          ++at_first;
        else if (!other)
          other = &f;
      }
      if (stuck) {
        std::fprintf(stderr,
                     "tessera cuda emulation: %s, block (%u, %u, %u): a thread waits on the "
                     "mbarrier at shared byte %u (%s:%d) for a phase that cannot complete\n",
                     what, bx, by, bz, stuck->poll_barrier, stuck->barrier_file,
                     stuck->barrier_line);
        running = nullptr;
        dynamic_smem = nullptr;
        record(cudaErrorLaunchFailure);
        return;
      }
      if (waiting == 0) break;  // the block has finished
      if (at_first != n) {
        std::fprintf(stderr,
                     "tessera cuda emulation: %s, block (%u, %u, %u): %zu of %zu threads wait "
                     "at __syncthreads (%s:%d); ",
                     what, bx, by, bz, at_first, n, first->barrier_file, first->barrier_line);
        if (other)
          std::fprintf(stderr, "others at %s:%d\n", other->barrier_file, other->barrier_line);
        else
          std::fprintf(stderr, "the other %zu have exited\n", n - waiting);
        running = nullptr;
        dynamic_smem = nullptr;
        record(cudaErrorLaunchFailure);
        return;
      }
      for (size_t i = 0; i < n; ++i) fibers[i].state = fiber::ready;
    }
    for (const auto& [at, b] : r.barriers)
      if (!b.copies.empty()) {
        std::fprintf(stderr,
                     "tessera cuda emulation: the block ended with TMA copies on the mbarrier "
                     "at shared byte %u never waited for\n",
                     at);
        r.failed = true;
      }
    if (r.failed) {
      std::fprintf(stderr, "tessera cuda emulation: %s, block (%u, %u, %u) failed\n", what, bx, by,
                   bz);
      running = nullptr;
      dynamic_smem = nullptr;
      record(cudaErrorLaunchFailure);
      return;
    }
  }
  running = nullptr;
  dynamic_smem = nullptr;
}

/// The running thread's fiber (a kernel-only operation outside a kernel aborts).
inline fiber& current_fiber(const char* op) {
  if (!running) {
    std::fprintf(stderr, "tessera cuda emulation: %s outside a kernel\n", op);
    std::abort();
  }
  return *running->current;
}

/// cp.async.cg.shared.global [dst], [src], 16, bytes: queued until the thread waits for it.
inline void cp_async16(void* dst, const void* src, unsigned bytes) {
  fiber& f = current_fiber("cp.async");
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0 ||
      bytes > 16) {
    std::fprintf(stderr,
                 "tessera cuda emulation: cp.async of %u bytes from %p to %p: both addresses must "
                 "be 16-byte aligned, at most 16 bytes\n",
                 bytes, src, dst);
    running->failed = true;
    return;
  }
  f.copies.open.push_back(async_copy{dst, src, bytes});
}

/// cp.async.commit_group: the copies issued since the last commit form one group.
inline void cp_async_commit() { current_fiber("cp.async.commit_group").copies.commit(); }

/// cp.async.wait_group n: every committed group but the newest n has landed.
inline void cp_async_wait(size_t newest_pending) {
  current_fiber("cp.async.wait_group").copies.complete(newest_pending, [](const async_copy& c) {
    std::memcpy(c.dst, c.src, c.bytes);
    std::memset(static_cast<unsigned char*>(c.dst) + c.bytes, 0, 16 - c.bytes);
  });
}

/// wgmma.mma_async of the running thread (mma.h's wgmma_m64nN): `run` reads the shared-memory
/// operands and updates this thread's accumulators, not now but when a wgmma.wait_group lets its
/// group complete, the latest moment a GPU may do it. So a kernel that rewrites a stage before
/// waiting for the wgmma that read it, or reads its accumulators before the wait, computes
/// wrong results here.
/// With wgmma_runs_early (declared with launch), each runs at once instead, the earliest moment
/// a GPU may: then a kernel that issues wgmma on a stage before its data is final (copies
/// landed, tf32 rounding done) computes on the stale data.
inline void wgmma_issue(std::function<void()> run) {
  fiber& f = current_fiber("wgmma.mma_async");
  if (wgmma_runs_early)
    run();
  else
    f.wgmma.open.push_back(std::move(run));
}

/// wgmma.commit_group: the wgmma issued since the last commit form one group.
inline void wgmma_commit() { current_fiber("wgmma.commit_group").wgmma.commit(); }

/// wgmma.wait_group n: every committed group but the newest n completes (runs), oldest first.
inline void wgmma_wait(size_t newest_pending) {
  current_fiber("wgmma.wait_group").wgmma.complete(newest_pending, [](auto& run) { run(); });
}

/// mbarrier.init.shared::cta.b64 [at], count: a barrier whose phases complete after `count`
/// arrivals (8-byte aligned, inside the launch's dynamic shared memory).
inline void mbarrier_init(uint32_t at, unsigned count) {
  current_fiber("mbarrier.init");
  if (at % 8 != 0 || at + 8 > dynamic_smem_bytes || count == 0 || count >= (1u << 20)) {
    std::fprintf(stderr,
                 "tessera cuda emulation: mbarrier.init at shared byte %u with count %u: 8-byte "
                 "aligned inside the launch's shared memory, count in [1, 2^20)\n",
                 at, count);
    running->failed = true;
    return;
  }
  running->barriers[at] = mbarrier{static_cast<int>(count), static_cast<int>(count), 0, 0, {}};
}

/// mbarrier.arrive[.expect_tx] on the barrier at `at`: first adds tx bytes to those its current
/// phase expects, then counts this thread's arrival (which may complete the phase). An arrival
/// on a phase whose arrivals are all made (only copies outstanding) lands those first, as a GPU
/// would have by then; one beyond that fails the launch.
inline void mbarrier_arrive(uint32_t at, uint32_t tx = 0) {
  current_fiber("mbarrier.arrive");
  block_run& r = *running;
  mbarrier* const b = find_mbarrier(r, at, "mbarrier.arrive");
  if (!b) return;
  if (b->pending == 0) mbarrier_settle(r, *b);
  if (b->pending == 0) {
    std::fprintf(stderr,
                 "tessera cuda emulation: an arrival on the mbarrier at shared byte %u beyond its "
                 "phase's count of %d\n",
                 at, b->count);
    r.failed = true;
    return;
  }
  b->tx += tx;
  --b->pending;
  if (b->pending == 0 && b->copies.empty()) mbarrier_settle(r, *b);
}

/// Waits (parking this thread, so the others run) until the phase of parity `parity` of the
/// mbarrier at `at` has completed: mbarrier.try_wait.parity in a loop.
inline void mbarrier_wait(uint32_t at, unsigned parity, const char* file, int line) {
  fiber& f = current_fiber("mbarrier.try_wait");
  block_run& r = *running;
  while (!mbarrier_passed(r, at, parity)) {
    f.poll_barrier = at;
    f.poll_parity = parity;
    park(r, fiber::polling, file, line);
  }
}

/// When TMA copies land: tma_lands_early, declared with launch.

/// Queues a TMA copy of `bytes` on the mbarrier at `at` (cuda.h's tma_load): `land` performs it
/// when the barrier's current phase completes (or now: tma_lands_early). A copy whose
/// destination covers a barrier fails the launch.
inline void mbarrier_queue_copy(uint32_t at, uint32_t dst, int64_t bytes,
                                std::function<void()> land) {
  current_fiber("cp.async.bulk.tensor");
  block_run& r = *running;
  mbarrier* const b = find_mbarrier(r, at, "cp.async.bulk.tensor");
  if (!b) return;
  const auto over = r.barriers.lower_bound(dst);
  if (over != r.barriers.end() && over->first < dst + bytes) {
    std::fprintf(stderr,
                 "tessera cuda emulation: a TMA copy to shared bytes [%u, %lld) covers the "
                 "mbarrier at %u\n",
                 dst, static_cast<long long>(dst + bytes), over->first);
    r.failed = true;
    return;
  }
  if (!tma_lands_early) {
    b->copies.emplace_back(bytes, std::move(land));
    return;
  }
  land();
  b->tx -= bytes;
  if (b->pending == 0) mbarrier_settle(r, *b);
}

/// A warp-collective call (op names it): publishes this lane's `bytes` of operands, waits until
/// every thread of the block has published (the block barrier stands in for the warp's), and
/// returns the operands of the 32 lanes of this thread's warp, warp_slot_bytes apart.
inline const unsigned char* warp_share(const void* mine, size_t bytes, const char* op) {
  fiber& f = current_fiber(op);
  block_run& r = *running;
  const auto t = static_cast<size_t>(&f - r.fibers->data());
  if (blockDim.x % 32 != 0 || bytes > warp_slot_bytes) {
    std::fprintf(stderr, "tessera cuda emulation: %s needs whole warps (blockDim.x %u)\n", op,
                 blockDim.x);
    std::abort();
  }
  unsigned char* const slots = r.exchange[f.collectives++ & 1].data();
  std::memcpy(slots + t * warp_slot_bytes, mine, bytes);
  sync_threads(op, 0);
  return slots + t / 32 * 32 * warp_slot_bytes;
}

/// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8i .. 8i + 7 give the rows of 8 x 8
/// matrix i (16 bytes each, 16-byte aligned); register i of lane L receives row L / 4, elements
/// 2 (L % 4) and 2 (L % 4) + 1 of matrix i, or with trans those of its transpose (column L / 4).
/// The lower-indexed element goes to the low 16 bits.
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr, "tessera cuda emulation: ldmatrix row address %p is not 16-byte aligned\n",
                 row);
    running->failed = true;
  }
  const unsigned char* const rows = warp_share(&row, sizeof row, "ldmatrix");
  const auto row_of = [&](int lane) {
    const void* p;
    std::memcpy(&p, rows + lane * warp_slot_bytes, sizeof p);
    return static_cast<const uint16_t*>(p);
  };
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (trans) {
      lo = row_of(8 * i + 2 * t)[g];
      hi = row_of(8 * i + 2 * t + 1)[g];
    } else {
      lo = row_of(8 * i + g)[2 * t];
      hi = row_of(8 * i + g)[2 * t + 1];
    }
    r[i] = uint32_t{lo} | uint32_t{hi} << 16;
  }
}

}  // namespace tessera_cuda_emulation

#define __syncthreads() ::tessera_cuda_emulation::sync_threads(__FILE__, __LINE__)
// A warp barrier, modelled as the block's: stricter than a GPU (every warp must reach the same
// __syncwarp), which the kernels that use it satisfy.
#define __syncwarp(...) ::tessera_cuda_emulation::sync_threads(__FILE__, __LINE__)

// ---------------------------------------------------------------------------------------------
// Runtime API.

inline cudaError_t cudaGetLastError() {
  const cudaError_t e = tessera_cuda_emulation::last_error;
  tessera_cuda_emulation::last_error = cudaSuccess;
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return tessera_cuda_emulation::last_error; }

inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
  }
  return "unknown error";
}

inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : tessera_cuda_emulation::record(cudaErrorInvalidDevice);
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  if (d != 0) return tessera_cuda_emulation::record(cudaErrorInvalidDevice);
  switch (a) {
    case cudaDevAttrMultiProcessorCount:
      *v = tessera_cuda_emulation::sm_count;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *v = 1024;
      return cudaSuccess;
  }
  return tessera_cuda_emulation::record(cudaErrorInvalidValue);
}
/// What the runtime reports about a compiled kernel: the architecture of its machine code and the
/// virtual architecture it was compiled for (here every kernel "runs" as sm_90, so
/// architecture-gated paths are taken).
struct cudaFuncAttributes {
  int binaryVersion;
  int ptxVersion;
};
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F*) {
  a->binaryVersion = 90;
  a->ptxVersion = 90;
  return cudaSuccess;
}
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};
/// Raises a kernel's dynamic shared memory limit (the only attribute modelled).
template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > tessera_cuda_emulation::max_dynamic_smem)
    return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  const size_t bytes = static_cast<size_t>(value);
  tessera_cuda_emulation::dynamic_smem_limit(reinterpret_cast<const void*>(kernel), &bytes);
  return cudaSuccess;
}
// Events. A record is queued work like any other: the event reports "not ready" until the
// queue runs (the next synchronization), as it would while the device is still busy, so code
// that keeps resources alive until their event completes is tested on that path.
struct CUevent_st {
  uint64_t recorded = 0;                       // records made
  uint64_t completed = 0;                      // records the device has reached (equal: complete)
  std::chrono::steady_clock::time_point at{};  // host time the latest record was reached
  uint64_t record_item = 0;                    // the latest record's item in the work queue
};
typedef struct CUevent_st* cudaEvent_t;
enum { cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2 };
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaDeviceSynchronize() {
  return tessera_cuda_emulation::record(tessera_cuda_emulation::run_queued_work());
}
/// The runtime lets an event be destroyed with its record still queued; here the queue runs
/// first, so that no queued record outlives its event.
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  const cudaError_t r = cudaDeviceSynchronize();
  delete e;
  return r;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream = nullptr) {
  if (!e) return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  tessera_cuda_emulation::last_stream = stream;
  const uint64_t n = ++e->recorded;
  e->record_item = tessera_cuda_emulation::enqueue(stream, [e, n] {
    e->completed = n;
    e->at = std::chrono::steady_clock::now();
    return cudaSuccess;
  });
  return cudaSuccess;
}
/// Milliseconds between two records: host time of their completion (the emulated device runs
/// the queued work between them).
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  if (!ms || !start || !stop) return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  *ms = std::chrono::duration<float, std::milli>(stop->at - start->at).count();
  return cudaSuccess;
}
/// Not ready until a synchronization; like the runtime, "not ready" is left in the error slot
/// (callers clear it).
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  return e->completed != e->recorded ? tessera_cuda_emulation::record(cudaErrorNotReady)
                                     : cudaSuccess;
}
// Waiting for a stream or an event runs what its last item, or the record, needs.
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return tessera_cuda_emulation::record(tessera_cuda_emulation::run_queued_stream(s));
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  return tessera_cuda_emulation::record(tessera_cuda_emulation::run_queued_item(e->record_item));
}
// Streams: distinct handles; their work is queued (work_queue).
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  *s = new CUstream_st{flags};
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread)
    return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  delete s;
  return cudaSuccess;
}
/// Work queued on s after the wait runs after the event's latest record.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int = 0) {
  if (!e) return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  tessera_cuda_emulation::enqueue(
      s, [] { return cudaSuccess; }, e->record_item);
  return cudaSuccess;
}

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  auto& m = tessera_cuda_emulation::device_memory::get();
  *p = nullptr;
  {
    std::lock_guard lock(m.mu);
    if (bytes > tessera_cuda_emulation::memory_bytes - m.used)
      return tessera_cuda_emulation::record(cudaErrorMemoryAllocation);
    m.used += bytes;
  }
  void* q = ::operator new (bytes ? bytes : 1, std::align_val_t{256});
  std::memset(q, 0xff, bytes);  // poison: NaN for floating types, -1 for integers
  std::lock_guard lock(m.mu);
  m.blocks.emplace(reinterpret_cast<uintptr_t>(q), bytes);
  *p = q;
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}

/// Like the runtime's, waits for the device first (queued work may still use the block).
inline cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return e;
  auto& m = tessera_cuda_emulation::device_memory::get();
  {
    std::lock_guard lock(m.mu);
    auto it = m.blocks.find(reinterpret_cast<uintptr_t>(p));
    if (it == m.blocks.end()) return tessera_cuda_emulation::record(cudaErrorInvalidValue);
    m.used -= it->second;
    m.blocks.erase(it);
  }
  ::operator delete (p, std::align_val_t{256});
  return cudaSuccess;
}

inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  auto& m = tessera_cuda_emulation::device_memory::get();
  std::lock_guard lock(m.mu);
  *total_bytes = tessera_cuda_emulation::memory_bytes;
  *free_bytes = tessera_cuda_emulation::memory_bytes - m.used;
  return cudaSuccess;
}

namespace tessera_cuda_emulation {
/// Whether a copy's direction agrees with where its ends are (device blocks live or not).
inline bool copy_ends_agree(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  auto& m = device_memory::get();
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  return !((dst_dev && !m.holds(dst, bytes)) || (src_dev && !m.holds(src, bytes)) ||
           (!dst_dev && kind != cudaMemcpyDefault && m.holds(dst, 1)) ||
           (!src_dev && kind != cudaMemcpyDefault && m.holds(src, 1)));
}

}  // namespace tessera_cuda_emulation

namespace tessera_cuda_emulation {
/// A copy on `stream` that returns when it is done: queued, then run with what it needs.
inline cudaError_t copy_and_wait(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  const uint64_t id = enqueue(stream, [dst, src, bytes] {
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  });
  return record(run_queued_item(id));
}
}  // namespace tessera_cuda_emulation

/// On the legacy default stream, and returns when the copy is done.
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (!tessera_cuda_emulation::copy_ends_agree(dst, src, bytes, kind))
    return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  return bytes ? tessera_cuda_emulation::copy_and_wait(dst, src, bytes, cudaStreamLegacy)
               : cudaSuccess;
}
// Pinned host memory: ordinary host memory here, and the device sees it at the same address
// (as under unified virtual addressing).
enum { cudaHostAllocDefault = 0, cudaHostAllocPortable = 1, cudaHostAllocMapped = 2 };
inline cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  *p = ::operator new (bytes ? bytes : 1, std::align_val_t{256});
  auto& m = tessera_cuda_emulation::pinned_memory::get();
  std::lock_guard lock(m.mu);
  m.blocks.emplace(reinterpret_cast<uintptr_t>(*p), bytes ? bytes : 1);
  return cudaSuccess;
}
inline cudaError_t cudaHostGetDevicePointer(void** d, void* host, unsigned int flags) {
  if (flags != 0 || !host) return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  *d = host;
  return cudaSuccess;
}
/// Like the runtime's, waits for the device first (queued copies may still use the block).
inline cudaError_t cudaFreeHost(void* p) {
  const cudaError_t e = cudaDeviceSynchronize();
  {
    auto& m = tessera_cuda_emulation::pinned_memory::get();
    std::lock_guard lock(m.mu);
    m.blocks.erase(reinterpret_cast<uintptr_t>(p));
  }
  ::operator delete (p, std::align_val_t{256});
  return e;
}

inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes,
                                   cudaStream_t stream = nullptr) {
  tessera_cuda_emulation::last_stream = stream;
  if (!tessera_cuda_emulation::device_memory::get().holds(dst, bytes))
    return tessera_cuda_emulation::record(cudaErrorInvalidValue);
  if (bytes)
    tessera_cuda_emulation::enqueue(stream, [dst, value, bytes] {
      std::memset(dst, value, bytes);
      return cudaSuccess;
    });
  return cudaSuccess;
}
/// Queued, as on a GPU, except where the runtime does otherwise with pageable host memory: a
/// copy from it reads the source before returning (the driver stages it), and a copy into it
/// returns when the data is there (so the queue runs first).
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
  namespace emu = tessera_cuda_emulation;
  emu::last_stream = stream;
  if (!emu::copy_ends_agree(dst, src, bytes, kind)) return emu::record(cudaErrorInvalidValue);
  if (!bytes) return cudaSuccess;
  auto& dev = emu::device_memory::get();
  const bool src_pageable = !dev.holds(src, 1) && !emu::pinned_memory::get().holds(src, 1);
  const bool dst_pageable = !dev.holds(dst, 1) && !emu::pinned_memory::get().holds(dst, 1);
  if (dst_pageable) return emu::copy_and_wait(dst, src, bytes, stream);
  if (src_pageable) {
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    emu::enqueue(stream, [dst, staged] {
      std::memcpy(dst, staged->data(), staged->size());
      return cudaSuccess;
    });
    return cudaSuccess;
  }
  emu::enqueue(stream, [dst, src, bytes] {
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  });
  return cudaSuccess;
}
