// tessera/backend/cpu/gemm.hpp - the CPU backend's GEMM: blocking, packing, threading and the
// gemm_kernel<cpu> entry point (BLIS-style; the loop nest is drawn in gemm/blocking.hpp).
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <atomic>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../core/backend.hpp"
#include "../../kernel/gemm_problem.hpp"
#include "parallel.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Multiply-adds per thread below which a GEMM does not fork: a fork and join costs about 1 us
/// (measured on the 2-vCPU development machine), what 2^16 multiply-adds take at this kernel's
/// rate, and the split then still gains.
inline constexpr int64_t gemm_parallel_grain = int64_t{1} << 16;
/// Row blocks of the micro-tile up to which gemm_block runs each B strip across all of them.
inline constexpr int64_t gemm_strip_outer_rows = 4;
/// Threads one GEMM uses at most (the size of its block-claiming flags).
inline constexpr int max_gemm_threads = 256;

template <class T>
const gemm_block_sizes& cached_gemm_blocks() {
  static const gemm_block_sizes b = gemm_blocks<T>();
  return b;
}

/// Multiply-adds of an m x n x k product, saturating instead of overflowing.
inline int64_t gemm_work(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t top = std::numeric_limits<int64_t>::max();
  if (m == 0 || n == 0 || k == 0) return 0;
  if (m > top / n || m * n > top / k) return top;
  return m * n * k;
}

/// Which operands the micro-kernels read in place instead of from packed panels (full panels
/// only; ragged edges are always packed, zero-padded). For int8, whose packing changes the
/// representation, only B already in int8 panels.
/// - A: small problems (up to 128^3 multiply-adds, every operand L2-resident) of the kernel's
///   own type, where the packing pass would cost a large share of the time.
/// - B: the kernel's type with contiguous rows (unit column stride), when A is read in place
///   too or has at most 8 micro-tiles of rows (each packed B value would be used only m times);
///   and always when B is already in panels (gemm_problem::b_panel): packed once, read in place.
struct gemm_in_place {
  bool a = false, b = false;
};
template <class TA, class TB, class Acc>
gemm_in_place gemm_operands_in_place(const gemm_problem<TA, TB, Acc>& pr) {
  gemm_in_place r;
  if constexpr (gemm_tile<Acc>::kgroup == 1) {
    // The bfloat16 B kernel reads A packed only.
    r.a = std::is_same_v<TA, Acc> && !std::is_same_v<TB, bfloat16> &&
          gemm_work(pr.m, pr.n, pr.k) <= (int64_t{1} << 21);
    r.b = pr.b_panel > 0 ||
          (std::is_same_v<TB, Acc> && pr.b_cs == 1 && (r.a || pr.m <= 8 * gemm_tile<Acc>::mr));
  } else {
    r.b = pr.b_panel > 0;
  }
  return r;
}

/// Calls f.template operator()<E>() with E = edge_mr, one of the edge kernels' row counts.
template <class Acc, class F>
TESSERA_ALWAYS_INLINE void with_edge_mr(int edge_mr, F&& f) {
  constexpr int MR = gemm_tile<Acc>::mr;
  if constexpr (MR % 3 == 0) {
    if (edge_mr == MR / 3) return f.template operator()<MR / 3>();
    if (edge_mr == 2 * MR / 3) return f.template operator()<2 * MR / 3>();
  }
  f.template operator()<MR>();
}

/// Rows [i_begin, i_end) x columns [j_begin, j_end) of C for one matrix, on this thread.
template <class TA, class TB, class Acc>
void gemm_block(const gemm_problem<TA, TB, Acc>& pr, const TA* a, const TB* b, Acc* c,
                int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  using tile = gemm_tile<Acc>;
  constexpr int MR = tile::mr, NR = tile::nr, KG = tile::kgroup;
  constexpr bool is_int8 = KG == 4;
  // bfloat16 B multiplies from pairs of k (gemm/kernel_bf16.hpp); so does bfloat16 A where the
  // CPU has the bf16 dot product, else A is packed to float as for the float kernel.
  constexpr bool is_bf16 = std::is_same_v<TB, bfloat16> && std::is_same_v<Acc, float>;
  const bool bf16_dot = is_bf16 && std::is_same_v<TA, bfloat16> && bf16_dot_available();
  using PA = std::conditional_t<is_int8, uint8_t, Acc>;
  using PB = std::conditional_t<is_int8, int8_t, std::conditional_t<is_bf16, uint32_t, Acc>>;
  const gemm_block_sizes& bs = cached_gemm_blocks<Acc>();
  gemm_workspace& ws = thread_gemm_workspace();
  const int64_t m = i_end - i_begin, n = j_end - j_begin, k = pr.k;
  const int64_t mc = std::min(bs.mc, (m + MR - 1) / MR * MR);
  const int64_t nc = std::min(bs.nc, (n + NR - 1) / NR * NR);
  const int64_t kc = balanced_k_block(k, bs.kc);
  auto* abuf = static_cast<PA*>(ws.a.get(sizeof(PA) * static_cast<size_t>(mc * kc)));
  auto* bbuf = static_cast<PB*>(ws.b.get(sizeof(PB) * static_cast<size_t>(nc * kc)));
  // int8: row sums of packed A, column sums of packed B, and the corrections built from them.
  int32_t *row_sum = nullptr, *col_sum = nullptr, *row_corr = nullptr, *col_corr = nullptr;
  if constexpr (is_int8) {
    auto* s =
        static_cast<int32_t*>(ws.sums.get(sizeof(int32_t) * static_cast<size_t>(2 * (mc + nc))));
    row_sum = s, row_corr = s + mc, col_sum = s + 2 * mc, col_corr = s + 2 * mc + nc;
  }
  const gemm_in_place direct = gemm_operands_in_place(pr);
  const bool a_direct = direct.a, b_in_place = direct.b;

  for (int64_t ic = 0; ic < m; ic += mc) {
    const int64_t mb = std::min(mc, m - ic);
    for (int64_t pc = 0; pc < k; pc += kc) {
      const int64_t kb = std::min(kc, k - pc), kbp = (kb + KG - 1) / KG * KG;
      const int64_t kpairs = (kb + 1) / 2;  // bfloat16 B: words per column of a packed strip
      const TA* a_blk = a + (i_begin + ic) * pr.a_rs + pc * pr.a_cs;
      // Full micro-panels of A (read in place for small problems, else packed), then a ragged
      // edge packed for the edge kernel's row count (gemm_edge_mr), after the full panels.
      const int64_t mb_full = is_int8 || bf16_dot ? mb : mb / MR * MR;
      const int edge_mr = gemm_edge_mr<Acc>(mb - mb_full);
      PA* edge_panel = abuf + (a_direct ? 0 : mb_full * kbp);
      // int8: whether this block of A allows the narrow dot product (gemm/kernel_int8.hpp: where
      // the pass has it and A's values, less a shift, are in its range). B in panels has column
      // sums for all of k only, which the shift's correction can use when one block covers k.
      // B in that range allows it too, with no shift: then whatever A is (below).
      bool a_narrow = false;
      if constexpr (is_int8) {
        a_narrow =
            pack_a_int8<MR, int8_narrow_dot>(a_blk, pr.a_rs, pr.a_cs, mb, kb, abuf, row_sum) &&
            (pr.b_panel == 0 || kb == k);
      } else if (bf16_dot) {
        if constexpr (std::is_same_v<TA, bfloat16>)
          pack_pairs<MR>(a_blk, pr.a_rs, pr.a_cs, mb, kb, reinterpret_cast<uint32_t*>(abuf));
      } else {
        if (!a_direct) pack_panels<MR>(a_blk, pr.a_rs, pr.a_cs, mb_full, kb, abuf);
        if (mb_full < mb)
          with_edge_mr<Acc>(edge_mr, [&]<int E>() {
            pack_panels<E>(a_blk + mb_full * pr.a_rs, pr.a_rs, pr.a_cs, mb - mb_full, kb,
                           edge_panel);
          });
      }
      gemm_epilogue<Acc> ep;
      ep.alpha = pr.alpha;
      ep.beta = pc == 0 ? pr.beta : Acc(1);
      ep.read_c = pc > 0 || pr.beta != Acc(0);
      if (pc + kb == k) {
        ep.bias = pr.bias, ep.bias_stride = pr.bias_stride, ep.bias_kind = pr.bias_kind;
        ep.relu = pr.relu;
        if (pr.dequant.out) ep.dequant = &pr.dequant;  // one k block then (gemm_run_cpu)
      }
      for (int64_t jc = 0; jc < n; jc += nc) {
        const int64_t nb = std::min(nc, n - jc);
        const TB* b_blk = b + pc * pr.b_rs + (j_begin + jc) * pr.b_cs;
        // Full micro-panels of B read in place; a ragged last one is packed (zero-padded), unless
        // B is in panels: those are zero-padded already.
        const int64_t nb_direct = pr.b_panel > 0 ? nb : b_in_place ? nb / NR * NR : 0;
        int narrow_shift = -1;  // int8: the narrow dot product's shift of A, -1 for the full one
        if constexpr (is_int8) {
          constexpr int32_t za = int8_a_bias<TA>, zb = int8_b_bias<TB>;
          // B known (a bound from the caller, for panels) or found (while packing) to be in the
          // narrow range multiplies narrow with no shift, else A in range with its shift. The
          // shift is the same in every k block of panels: b_max_abs holds for all of k.
          const bool b_bounded =
              int8_narrow_dot && std::is_same_v<TB, int8_t> && pr.b_max_abs <= int8_b_narrow_max;
          bool b_narrow = b_bounded;
          if (pr.b_panel == 0) {
            const bool packed_narrow =
                pack_b_int8<NR, int8_narrow_dot>(b_blk, pr.b_rs, pr.b_cs, kb, nb, bbuf, col_sum);
            b_narrow = b_narrow || packed_narrow;
          }
          narrow_shift = b_narrow ? 0 : a_narrow ? int8_a_narrow_shift<TA> : -1;
          // The narrow kernel multiplies A's packed bytes less the shift: for the column
          // corrections A's zero point is then za - shift (the row corrections keep za).
          const int64_t za_col = za - std::max(narrow_shift, 0);
          if (pr.b_panel > 0) {
            // int8 panels (signed: zb == 0) carry their column sums over all of k: the whole
            // correction goes with the first k block (wrapping int32 sums are associative).
            const int32_t* sums = pr.b_col_sums + j_begin + jc;
            for (int64_t i = 0; i < mb; ++i) row_corr[i] = 0;
            for (int64_t j = 0; j < nb; ++j)
              col_corr[j] = pc == 0 ? static_cast<int32_t>(-za_col * sums[j]) : 0;
          } else {
            for (int64_t i = 0; i < mb; ++i)
              row_corr[i] = static_cast<int32_t>(int64_t{zb} * row_sum[i] - kb * za * zb);
            for (int64_t j = 0; j < nb; ++j)
              col_corr[j] = static_cast<int32_t>(-za_col * col_sum[j]);
          }
        } else if constexpr (is_bf16) {
          if (pr.b_panel == 0) pack_pairs<NR>(b_blk, pr.b_cs, pr.b_rs, nb, kb, bbuf);
        } else if (nb_direct < nb) {
          pack_panels<NR>(b_blk + nb_direct * pr.b_cs, pr.b_cs, pr.b_rs, nb - nb_direct, kb, bbuf);
        }
        // A few row blocks (a few rows of activations against a weight read in place, which
        // does not fit L2): each B strip serves every row block while it is in L1, instead of
        // coming again from L3 for each one. Otherwise the A micro-panel stays in L1 across
        // the B strips (blocking.hpp).
        const bool strip_outer = mb <= gemm_strip_outer_rows * MR;
        // B read in place (TB elements from b): the strip of columns jr.. (a multiple of NR).
        // In panels (a weight packed once) each column holds its k values in groups of g (4 for
        // int8, pairs for bfloat16); NR divides the panel width, so one panel holds the strip.
        const auto direct_strip = [&](int64_t jr, int64_t g) -> const TB* {
          const int64_t j = j_begin + jc + jr;
          if (pr.b_panel > 0)
            return b + (j / pr.b_panel) * pr.b_cs + pc / g * pr.b_rs + j % pr.b_panel * g;
          return b_blk + jr * pr.b_cs;
        };
        // What a micro-kernel reading the strip jr.. in place prefetches, in TB elements from
        // each k step's row: the first row block reads the strip from memory and prefetches
        // b_prefetch_rows further down it; in strip-outer order the other row blocks (which read
        // it from L1 or L2) prefetch the same row of the next strip, so that its reads from
        // memory overlap this strip's arithmetic instead of stalling its first row block
        // (docs/perf/bert.md). direct: the strips below it are read in place.
        const auto prefetch_ahead = [&](int64_t ir, int64_t jr, int64_t g, int64_t direct) {
          if (strip_outer && ir > 0 && jr + NR < direct)
            return static_cast<int64_t>(direct_strip(jr + NR, g) - direct_strip(jr, g));
          return b_prefetch_rows / g * pr.b_rs;
        };
        // One micro-tile: rows ir.. and columns jr.. of this block.
        const auto tile = [&](int64_t ir, int64_t jr) {
          const int mr_eff = static_cast<int>(std::min<int64_t>(MR, mb - ir));
          const int nr_eff = static_cast<int>(std::min<int64_t>(NR, nb - jr));
          const int64_t ci = i_begin + ic + ir, cj = j_begin + jc + jr;
          Acc* c_tile = c ? c + ci * pr.c_rs + cj * pr.c_cs : nullptr;  // null: dequant
          if constexpr (is_int8) {
            const int8_t* b_strip = bbuf + jr * kbp;
            int64_t ldb = NR * 4, b_ahead = 0;  // packed B: in cache, prefetches its own row
            if constexpr (std::is_same_v<TB, int8_t>) {
              if (pr.b_panel > 0) {  // as for float panels below, four k values per column
                b_strip = direct_strip(jr, 4);
                ldb = pr.b_rs, b_ahead = prefetch_ahead(ir, jr, 4, nb);
              }
            }
            gemm_micro_int8(kb, abuf + ir * kbp, b_strip, ldb, c_tile, pr.c_rs, pr.c_cs, mr_eff,
                            nr_eff, row_corr + ir, col_corr + jr, ep, ci, cj, narrow_shift,
                            b_ahead);
          } else if constexpr (is_bf16) {
            const uint32_t* b_strip = bbuf + jr * kpairs;
            int64_t ldb = NR, b_ahead = 0;  // in words of two bfloat16 values
            if (pr.b_panel > 0) {  // as for int8 panels, two k values per column (pc is even)
              b_strip = reinterpret_cast<const uint32_t*>(direct_strip(jr, 2));
              ldb = pr.b_rs / 2, b_ahead = prefetch_ahead(ir, jr, 2, nb) / 2;
            }
            if (bf16_dot) {
#if defined(TESSERA_DETAIL_HAVE_BF16_DOT)
              gemm_micro_bf16_dot<MR>(kb, reinterpret_cast<const uint32_t*>(abuf) + ir * kpairs,
                                      b_strip, ldb, c_tile, pr.c_rs, pr.c_cs, mr_eff, nr_eff, ep,
                                      ci, cj, b_ahead);
#endif
            } else if (ir >= mb_full) {
              with_edge_mr<Acc>(edge_mr, [&]<int E>() {
                gemm_micro_bf16<E>(kb, edge_panel, b_strip, ldb, c_tile, pr.c_rs, pr.c_cs, mr_eff,
                                   nr_eff, ep, ci, cj, b_ahead);
              });
            } else {
              gemm_micro_bf16<MR>(kb, abuf + ir * kbp, b_strip, ldb, c_tile, pr.c_rs, pr.c_cs,
                                  mr_eff, nr_eff, ep, ci, cj, b_ahead);
            }
          } else {
            const Acc* b_panel = bbuf + (jr - nb_direct) * kbp;
            int64_t ldb = NR, b_ahead = 0;
            if constexpr (std::is_same_v<TB, Acc>) {
              if (jr < nb_direct) {
                b_panel = direct_strip(jr, 1), ldb = pr.b_rs;
                b_ahead = prefetch_ahead(ir, jr, 1, nb_direct);
              }
            }
            if (ir >= mb_full) {
              with_edge_mr<Acc>(edge_mr, [&]<int E>() {
                gemm_micro_fp<Acc, E>(kb, edge_panel, b_panel, ldb, c_tile, pr.c_rs, pr.c_cs,
                                      mr_eff, nr_eff, ep, ci, cj, a_packed{}, b_ahead);
              });
            } else if (a_direct) {
              if constexpr (std::is_same_v<TA, Acc>)
                gemm_micro_fp<Acc, MR>(kb, a_blk + ir * pr.a_rs, b_panel, ldb, c_tile, pr.c_rs,
                                       pr.c_cs, mr_eff, nr_eff, ep, ci, cj,
                                       a_in_place{pr.a_rs, pr.a_cs}, b_ahead);
            } else {
              gemm_micro_fp<Acc, MR>(kb, abuf + ir * kbp, b_panel, ldb, c_tile, pr.c_rs, pr.c_cs,
                                     mr_eff, nr_eff, ep, ci, cj, a_packed{}, b_ahead);
            }
          }
        };
        if (strip_outer) {
          for (int64_t jr = 0; jr < nb; jr += NR)
            for (int64_t ir = 0; ir < mb; ir += MR) tile(ir, jr);
        } else {
          for (int64_t ir = 0; ir < mb; ir += MR)
            for (int64_t jr = 0; jr < nb; jr += NR) tile(ir, jr);
        }
      }
    }
  }
}

/// alpha == 0 or k == 0: c = beta * c (+ bias) (relu), without reading a or b.
template <class TA, class TB, class Acc>
void gemm_scale_only(const gemm_problem<TA, TB, Acc>& pr, Acc* c) {
  gemm_epilogue<Acc> ep;
  ep.alpha = Acc(0), ep.beta = pr.beta, ep.read_c = pr.beta != Acc(0);
  ep.bias = pr.bias, ep.bias_stride = pr.bias_stride, ep.bias_kind = pr.bias_kind;
  ep.relu = pr.relu;
  const Acc zero[1] = {Acc(0)};
  for (int64_t i = 0; i < pr.m; ++i)
    for (int64_t j = 0; j < pr.n; ++j)
      gemm_store_tile(zero, 1, 1, 1, c + i * pr.c_rs + j * pr.c_cs, pr.c_rs, pr.c_cs, ep, i, j);
}

/// How T threads split one m x n output: a tm x tn grid of blocks aligned to the micro-tile.
/// Each thread packs the A rows and B columns of its own block, so splitting columns repeats A's
/// packing in every column of threads and splitting rows repeats B's. Per thread, in multiply-add
/// units over k: rows * cols of compute plus about 8 per packed element (a packed element costs
/// a quarter to half a cycle, a multiply-add 1/32 of one) times the operand's packing cost:
/// 0 read in place, 1 plain copy, 2 transposition. The grid with the smallest cost wins.
struct gemm_split {
  int tm = 1, tn = 1;
  int64_t rows = 0, cols = 0;  // block size
};
template <class Acc>
gemm_split choose_gemm_split(int64_t m, int64_t n, int threads, int a_pack_cost, int b_pack_cost) {
  constexpr int MR = gemm_tile<Acc>::mr, NR = gemm_tile<Acc>::nr;
  gemm_split best;
  int64_t best_cost = -1;
  for (int tm = 1; tm <= threads; ++tm) {
    if (threads % tm) continue;
    const int tn = threads / tm;
    const int64_t rows = ((m + tm - 1) / tm + MR - 1) / MR * MR;
    const int64_t cols = ((n + tn - 1) / tn + NR - 1) / NR * NR;
    const int64_t cost = rows * cols + 8 * (rows * a_pack_cost + cols * b_pack_cost);
    if (best_cost < 0 || cost < best_cost) best = {tm, tn, rows, cols}, best_cost = cost;
  }
  return best;
}

template <class TA, class TB, class Acc>
void gemm_run_cpu_oriented(const gemm_problem<TA, TB, Acc>& pr) {
  const auto a_at = [&](int64_t t) { return pr.a + (pr.a_offsets ? pr.a_offsets[t] : 0); };
  const auto b_at = [&](int64_t t) { return pr.b + (pr.b_offsets ? pr.b_offsets[t] : 0); };
  const auto c_at = [&](int64_t t) { return pr.c + (pr.c_offsets ? pr.c_offsets[t] : 0); };
  if (pr.k == 0 || pr.alpha == Acc(0)) {
    for (int64_t t = 0; t < pr.batch; ++t) gemm_scale_only(pr, c_at(t));
    return;
  }
  const int64_t work = gemm_work(pr.m, pr.n, pr.k);  // multiply-adds per matrix
  const int threads = get_num_threads();
  // Many small matrices: one thread per group of whole matrices.
  if (pr.batch > 1 && threads > 1 && work < 4 * gemm_parallel_grain) {
    parallel_for(pr.batch, work, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) gemm_block(pr, a_at(t), b_at(t), c_at(t), 0, pr.m, 0, pr.n);
    });
    return;
  }
  const int nt = static_cast<int>(
      std::clamp<int64_t>(work / gemm_parallel_grain, 1, std::min(threads, max_gemm_threads)));
#if defined(_OPENMP)
  // Packing cost per element for the split (choose_gemm_split), as gemm_block will pack.
  const gemm_in_place direct = gemm_operands_in_place(pr);
  const int a_pack_cost = direct.a ? 0 : pr.a_rs == 1 ? 1 : 2;
  const int b_pack_cost = direct.b ? 0 : pr.b_cs == 1 ? 1 : 2;
#endif
  for (int64_t t = 0; t < pr.batch; ++t) {
    const TA* a = a_at(t);
    const TB* b = b_at(t);
    Acc* c = c_at(t);
    if (nt == 1) {
      gemm_block(pr, a, b, c, 0, pr.m, 0, pr.n);
      continue;
    }
#if defined(_OPENMP)
    const gemm_split s = choose_gemm_split<Acc>(pr.m, pr.n, nt, a_pack_cost, b_pack_cost);
    // Each thread takes its own block first, then any block no thread has claimed yet: a
    // thread that starts late (its core busy elsewhere, a slow wake-up) finds its block done
    // instead of making the others wait for it at the join.
    const int blocks = s.tm * s.tn;
    std::atomic<bool> claimed[max_gemm_threads] = {};
#pragma omp parallel num_threads(blocks)
    {
      const int id = omp_get_thread_num();
      for (int q = 0; q < blocks; ++q) {
        const int blk = (id + q) % blocks;
        if (claimed[blk].exchange(true, std::memory_order_acq_rel)) continue;
        const int64_t i0 = std::min(pr.m, (blk / s.tn) * s.rows),
                      j0 = std::min(pr.n, (blk % s.tn) * s.cols);
        const int64_t i1 = std::min(pr.m, i0 + s.rows), j1 = std::min(pr.n, j0 + s.cols);
        if (i0 < i1 && j0 < j1) gemm_block(pr, a, b, c, i0, i1, j0, j1);
      }
    }
#else
    gemm_block(pr, a, b, c, 0, pr.m, 0, pr.n);
#endif
  }
}

/// An int8 product whose k needs several blocks, scaled back to float (gemm_problem::dequant):
/// the int32 sums into a buffer first, then each scaled back.
template <class TA, class TB, class Acc>
void gemm_dequant_after(const gemm_problem<TA, TB, Acc>& pr) {
  std::vector<int32_t> sums(static_cast<size_t>(pr.m * pr.n));
  gemm_problem<TA, TB, Acc> p = pr;
  p.dequant = {};
  p.c = sums.data(), p.c_rs = pr.n, p.c_cs = 1;
  gemm_run_cpu_oriented(p);
  const gemm_dequant& dq = pr.dequant;
  parallel_for(pr.m, pr.n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      gemm_store_dequant(sums.data() + i * pr.n, 0, 1, pr.n, dq, i, 0);
  });
}

/// Micro-tile slots an m x n output occupies (ragged edges are computed in full, zero-padded).
template <class Acc>
int64_t gemm_padded_area(int64_t m, int64_t n) {
  constexpr int MR = gemm_tile<Acc>::mr, NR = gemm_tile<Acc>::nr;
  return (m + MR - 1) / MR * MR * ((n + NR - 1) / NR * NR);
}

template <class TA, class TB, class Acc>
void gemm_run_cpu(const gemm_problem<TA, TB, Acc>& pr) {
  if (pr.m == 0 || pr.n == 0 || pr.batch == 0) return;
  // B in panels is read in place by micro-panels of nr columns, which must not straddle panels;
  // only B of the accumulation type is read in place, bfloat16 B into float (in pairs of k), or
  // int8 B with its column sums.
  constexpr bool int8_panels = gemm_tile<Acc>::kgroup == 4 && std::is_same_v<TB, int8_t>;
  constexpr bool acc_panels =
      gemm_tile<Acc>::kgroup == 1 &&
      (std::is_same_v<TB, Acc> || (std::is_same_v<TB, bfloat16> && std::is_same_v<Acc, float>));
  const bool readable = acc_panels || (int8_panels && pr.b_col_sums != nullptr);
  if (pr.b_panel > 0 && (!readable || pr.b_panel % gemm_tile<Acc>::nr != 0))
    fail<backend_error>(
        "gemm", "B is in panels of ", pr.b_panel, " columns of ", dtype_name<TB>,
        ": the kernel reads panels of ", dtype_name<Acc>,
        " (or of bfloat16, or of int8 with column sums) whose width is a multiple of ",
        gemm_tile<Acc>::nr);
  if (pr.dequant.out) {
    if constexpr (gemm_tile<Acc>::kgroup == 4) {
      if (pr.b_panel == 0 || pr.alpha != 1 || pr.beta != 0 || pr.bias_kind != gemm_bias::none ||
          pr.relu || pr.batch != 1)
        fail<backend_error>("gemm", "float results scaled back are for one int8 product with B ",
                            "in panels, alpha 1, beta 0, no int32 bias and no relu");
      // Several k blocks accumulate in int32 between them: into a buffer, scaled back after.
      if (balanced_k_block(pr.k, cached_gemm_blocks<Acc>().kc) < pr.k)
        return gemm_dequant_after(pr);
    } else {
      fail<backend_error>("gemm", "float results scaled back are for int8 products only");
    }
  }
  // A narrow output (n well below nr, as in a 10-class output layer) wastes most of each
  // micro-tile; its transpose C^T = B^T A^T puts the short side along mr instead. Transposing is
  // free (strides swap); only for equal input types, so that no second kernel is instantiated,
  // and not for B in panels.
  if constexpr (std::is_same_v<TA, TB>) {
    if (pr.b_panel == 0 &&
        gemm_padded_area<Acc>(pr.n, pr.m) * 3 < gemm_padded_area<Acc>(pr.m, pr.n) * 2) {
      gemm_problem<TA, TB, Acc> t = pr;
      t.m = pr.n, t.n = pr.m;
      t.a = pr.b, t.a_rs = pr.b_cs, t.a_cs = pr.b_rs, t.a_offsets = pr.b_offsets;
      t.b = pr.a, t.b_rs = pr.a_cs, t.b_cs = pr.a_rs, t.b_offsets = pr.a_offsets;
      t.b_max_abs = 128;  // nothing known of A's values
      t.c_rs = pr.c_cs, t.c_cs = pr.c_rs;
      if (pr.bias_kind != gemm_bias::none)
        t.bias_kind = pr.bias_kind == gemm_bias::per_row ? gemm_bias::per_col : gemm_bias::per_row;
      return gemm_run_cpu_oriented(t);
    }
  }
  gemm_run_cpu_oriented(pr);
}

}  // namespace detail

namespace backend {
struct cpu_gemm {
  template <class TA, class TB, class Acc>
  static void run(const detail::gemm_problem<TA, TB, Acc>& pr) {
    detail::gemm_run_cpu(pr);
  }
  /// The largest magnitude of int8 B values (gemm_problem::b_max_abs) at which this pass's int8
  /// product runs at its full rate: 64 where it has the narrow dot product, else any (127).
  static int int8_full_rate_b_max() {
    return detail::int8_narrow_dot ? detail::int8_b_narrow_max : 127;
  }
};
}  // namespace backend

TESSERA_END_NAMESPACE
