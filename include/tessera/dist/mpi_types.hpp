// tessera/dist/mpi_types.hpp - how tessera's element types and reductions map onto MPI.
//
// The standard types map onto MPI's own (float -> MPI_FLOAT, bool -> MPI_CXX_BOOL, ...). MPI has
// no 16- or 8-bit floats, so half, bfloat16 and the two float8 formats travel as committed byte
// types of their size, and sum/prod/max/min on them are user operations that compute in float
// and round once per pairwise step, as NCCL does for its 16-bit types. Needs MPI (link
// tessera::dist).
#pragma once

// The deprecated MPI C++ bindings are not used: leave them out (they do not compile warning-free).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/dtype.hpp"
#include "../core/error.hpp"

TESSERA_BEGIN_NAMESPACE
namespace dist {

/// A failed collective: ranks that disagree on a call, a rank that aborted, a timeout, an MPI
/// error. The message names the op, the ranks and the values.
class dist_error : public error {
 public:
  using error::error;
};

/// The reductions of all_reduce and reduce_scatter. avg is the sum divided by the number of
/// ranks (integers: rounded toward zero; bool has none). On bool, sum and max are logical or,
/// prod and min logical and.
enum class reduce_op { sum, avg, max, min, prod };

inline std::string_view reduce_op_name(reduce_op op) {
  constexpr std::array<std::string_view, 5> names{"sum", "avg", "max", "min", "prod"};
  return names[static_cast<size_t>(op)];
}

namespace detail {

/// Throws dist_error naming op and MPI's description of code unless code is MPI_SUCCESS.
inline void check_mpi(int code, std::string_view op, std::string_view call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(code, text, &len);
  tessera::detail::fail<dist_error>(op, call, " failed: ", std::string_view(text, len));
}

/// The byte types and reduction operations for the four low-precision floats, made once per
/// process (after MPI_Init; MPI_Finalize frees them).
struct lowp_registry {
  // Indexed by lowp_index<T>: half, bfloat16, float8_e4m3, float8_e5m2.
  std::array<MPI_Datatype, 4> types{};
  // Indexed by reduce_op: sum, (avg: unused), max, min, prod.
  std::array<MPI_Op, 5> ops{};

  template <class T>
  static void reduce(const void* in, void* inout, int n, reduce_op op) {
    const T* a = static_cast<const T*>(in);
    T* b = static_cast<T*>(inout);
    for (int i = 0; i < n; ++i) {
      const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
      const float r = op == reduce_op::max    ? std::max(x, y)
                      : op == reduce_op::min  ? std::min(x, y)
                      : op == reduce_op::prod ? x * y
                                              : x + y;
      b[i] = T(r);
    }
  }
  template <reduce_op Op>
  static void apply(void* in, void* inout, int* len, MPI_Datatype* type) {
    const auto& r = get();
    if (*type == r.types[0]) reduce<half>(in, inout, *len, Op);
    if (*type == r.types[1]) reduce<bfloat16>(in, inout, *len, Op);
    if (*type == r.types[2]) reduce<float8_e4m3>(in, inout, *len, Op);
    if (*type == r.types[3]) reduce<float8_e5m2>(in, inout, *len, Op);
  }

  static const lowp_registry& get() {
    static const lowp_registry r = [] {
      lowp_registry m;
      const std::array<int, 4> bytes{2, 2, 1, 1};
      for (size_t i = 0; i < 4; ++i) {
        check_mpi(MPI_Type_contiguous(bytes[i], MPI_BYTE, &m.types[i]), "dist",
                  "MPI_Type_contiguous");
        check_mpi(MPI_Type_commit(&m.types[i]), "dist", "MPI_Type_commit");
      }
      check_mpi(MPI_Op_create(&apply<reduce_op::sum>, 1, &m.ops[0]), "dist", "MPI_Op_create");
      check_mpi(MPI_Op_create(&apply<reduce_op::max>, 1, &m.ops[2]), "dist", "MPI_Op_create");
      check_mpi(MPI_Op_create(&apply<reduce_op::min>, 1, &m.ops[3]), "dist", "MPI_Op_create");
      check_mpi(MPI_Op_create(&apply<reduce_op::prod>, 1, &m.ops[4]), "dist", "MPI_Op_create");
      return m;
    }();
    return r;
  }
};

template <class T>
inline constexpr int lowp_index = std::is_same_v<T, half>          ? 0
                                  : std::is_same_v<T, bfloat16>    ? 1
                                  : std::is_same_v<T, float8_e4m3> ? 2
                                  : std::is_same_v<T, float8_e5m2> ? 3
                                                                   : -1;

/// The MPI datatype that carries one T.
template <element_type T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, int8_t>)
    return MPI_INT8_T;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, int32_t>)
    return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, int64_t>)
    return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, bool>)
    return MPI_CXX_BOOL;
  else
    return lowp_registry::get().types[lowp_index<T>];
}

/// The MPI operation that reduces T's by op (avg reduces by sum; the caller divides). Throws
/// dist_error for avg on bool.
template <element_type T>
MPI_Op mpi_op(reduce_op op, std::string_view caller) {
  if constexpr (std::is_same_v<T, bool>) {
    if (op == reduce_op::avg)
      tessera::detail::fail<dist_error>(caller, "reduce_op avg is not defined for bool tensors");
    return op == reduce_op::sum || op == reduce_op::max ? MPI_LOR : MPI_LAND;
  } else if constexpr (lowp_index<T> >= 0) {
    const auto& r = lowp_registry::get();
    return r.ops[static_cast<size_t>(op == reduce_op::avg ? reduce_op::sum : op)];
  } else {
    switch (op) {
      case reduce_op::max:
        return MPI_MAX;
      case reduce_op::min:
        return MPI_MIN;
      case reduce_op::prod:
        return MPI_PROD;
      default:
        return MPI_SUM;
    }
  }
}

}  // namespace detail
}  // namespace dist
TESSERA_END_NAMESPACE
