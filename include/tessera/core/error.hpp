// tessera/core/error.hpp - the exception types every op throws on bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE

/// Base of every exception tessera throws. Messages read "tessera::<op>: <what>", naming the
/// shapes, axes or values involved.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// Shapes that do not match, do not broadcast, overflow, or have invalid extents.
class shape_error : public error {
 public:
  using error::error;
};
/// An index or axis out of range.
class index_error : public error {
 public:
  using error::error;
};
/// A dtype an op does not support, or an impossible conversion.
class dtype_error : public error {
 public:
  using error::error;
};
/// A backend failure (CUDA error, out of memory, data on the wrong device).
class backend_error : public error {
 public:
  using error::error;
};
/// A file that cannot be read or written, or whose contents are corrupt.
class io_error : public error {
 public:
  using error::error;
};

namespace detail {

/// Builds "tessera::<op>: <parts...>" and throws E. Kept out of line of hot loops by [[noreturn]].
template <class E, class... Parts>
[[noreturn]] void fail(std::string_view op, const Parts&... parts) {
  std::ostringstream os;
  os << "tessera::" << op << ": ";
  (os << ... << parts);
  throw E(os.str());
}

}  // namespace detail

TESSERA_END_NAMESPACE
