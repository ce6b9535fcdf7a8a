// tessera/io/idx.hpp - reading IDX files (the MNIST / Fashion-MNIST format), plain or gzip'd.
//
// Not part of the umbrella header because it needs zlib: include it and link ZLIB::ZLIB.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "../backend/cpu/memory.hpp"
#include "../core/tensor.hpp"
#include "../kernel/functors.hpp"
#include "regular_file.hpp"

TESSERA_BEGIN_NAMESPACE
namespace io {

/// What the header of an IDX file declares: the stored element type (IDX type code) and shape.
struct idx_header {
  /// 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64.
  uint8_t type_code = 0;
  Shape shape;

  /// Name of the stored element type ("uint8", ..., "float64").
  std::string_view type_name() const;
  /// Bytes per stored element.
  size_t element_size() const;
};

}  // namespace io

namespace detail::idx {

// Name and size of an IDX type code; size 0 marks an unknown code.
struct type_info {
  std::string_view name;
  size_t size;
};
inline type_info info_of(uint8_t code) {
  switch (code) {
    case 0x08:
      return {"uint8", 1};
    case 0x09:
      return {"int8", 1};
    case 0x0B:
      return {"int16", 2};
    case 0x0C:
      return {"int32", 4};
    case 0x0D:
      return {"float32", 4};
    case 0x0E:
      return {"float64", 8};
    default:
      return {"unknown", 0};
  }
}

template <class... Parts>
[[noreturn]] void fail_file(std::string_view op, const std::filesystem::path& path,
                            const Parts&... parts) {
  fail<io_error>(op, "'", path.string(), "': ", parts...);
}

inline std::string hex_byte(unsigned v) {
  constexpr char digits[] = "0123456789abcdef";
  return std::string("0x") + digits[(v >> 4) & 15] + digits[v & 15];
}

// A gzFile opened for reading; zlib reads plain files through the same calls (gzdirect), so the
// reader does not care whether the file is compressed. Only a regular file is read
// (open_regular_file refuses anything else before zlib gets the descriptor).
class gz_reader {
 public:
  gz_reader(std::string_view op, const std::filesystem::path& path) : op_(op), path_(path) {
    const opened_file f = open_regular_file(path);
    if (f.fd < 0) fail_file(op_, path_, f.error);
    file_ = gzdopen(f.fd, "rb");
    if (!file_) {
      ::close(f.fd);  // a failed gzdopen leaves the descriptor open
      fail_file(op_, path_, "cannot open (zlib could not allocate its state)");
    }
    gzbuffer(file_, 1u << 18);  // fewer, larger reads than zlib's 8 KiB default
  }
  gz_reader(const gz_reader&) = delete;
  gz_reader& operator=(const gz_reader&) = delete;
  ~gz_reader() { gzclose_r(file_); }

  // Reads up to n bytes into dst; returns how many were read (fewer only at the end of the
  // data). Throws io_error on a read or decompression error.
  size_t read(void* dst, size_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    size_t got = 0;
    while (got < n) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(file_, out + got, want);
      if (r < 0) raise_zlib_error();
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    if (got < n) {
      // A short read is the end of the data, but zlib flags a gzip stream cut off mid-way.
      int code = Z_OK;
      gzerror(file_, &code);
      if (code != Z_OK && code != Z_BUF_ERROR) raise_zlib_error();
      truncated_gzip_ = code == Z_BUF_ERROR;
    }
    return got;
  }
  // Whether the last short read ended inside an incomplete gzip stream.
  bool truncated_gzip() const { return truncated_gzip_; }
  // Whether the file is read as is (not gzip-compressed).
  bool direct() const { return gzdirect(file_) != 0; }

 private:
  [[noreturn]] void raise_zlib_error() {
    int code = Z_OK;
    const char* msg = gzerror(file_, &code);
    if (code == Z_ERRNO) fail_file(op_, path_, "read error (", std::strerror(errno), ")");
    fail_file(op_, path_, "corrupt gzip data (zlib: ", msg ? msg : "unknown error", ")");
  }

  std::string_view op_;
  const std::filesystem::path& path_;
  gzFile file_ = nullptr;
  bool truncated_gzip_ = false;
};

// Reads and validates the magic number and the dimensions.
inline io::idx_header read_header(std::string_view op, const std::filesystem::path& path,
                                  gz_reader& in) {
  unsigned char magic[4];
  const size_t got = in.read(magic, 4);
  if (got == 0) fail_file(op, path, "file is empty (expected an IDX header)");
  if (got < 4) fail_file(op, path, "truncated header: ", got, " of 4 magic-number bytes");
  if (magic[0] != 0 || magic[1] != 0)
    fail_file(op, path, "wrong magic number ", hex_byte(magic[0]), " ", hex_byte(magic[1]), " ",
              hex_byte(magic[2]), " ", hex_byte(magic[3]),
              " (an IDX file starts with 0x00 0x00 <type code> <rank>)");
  const uint8_t code = magic[2];
  if (info_of(code).size == 0)
    fail_file(op, path, "unknown data type code ", hex_byte(code),
              " (expected 0x08 uint8, 0x09 int8, 0x0b int16, 0x0c int32, 0x0d float32 or "
              "0x0e float64)");
  const int rank = magic[3];
  if (rank < 1 || rank > max_rank)
    fail_file(op, path, "rank ", rank, " is not in [1, ", max_rank, "]");

  unsigned char raw[4 * max_rank];
  const size_t want = 4 * static_cast<size_t>(rank);
  const size_t got_dims = in.read(raw, want);
  if (got_dims < want)
    fail_file(op, path, "truncated header: ", got_dims, " of ", want, " bytes of the ", rank,
              " dimension sizes");
  int64_t dims[max_rank];
  int64_t count = 1;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    const uint32_t u = (uint32_t{raw[4 * i]} << 24) | (uint32_t{raw[4 * i + 1]} << 16) |
                       (uint32_t{raw[4 * i + 2]} << 8) | uint32_t{raw[4 * i + 3]};
    dims[i] = std::bit_cast<int32_t>(u);
    if (dims[i] < 0) fail_file(op, path, "dimension ", i, " has negative size ", dims[i]);
    overflow = overflow || __builtin_mul_overflow(count, dims[i], &count);
  }
  const dim_list declared(std::span<const int64_t>(dims, static_cast<size_t>(rank)));
  size_t bytes = 0;
  if (overflow || __builtin_mul_overflow(static_cast<size_t>(count), info_of(code).size, &bytes) ||
      bytes > static_cast<size_t>(INT64_MAX))
    fail_file(op, path, "declared shape ", declared.to_string(), " of ", info_of(code).name,
              " is too large (its byte count overflows)");
  return {code, Shape(declared)};
}

// An IDX element of type S stored big-endian at p.
template <class S>
S load_big_endian(const unsigned char* p) {
  using U = std::conditional_t<
      sizeof(S) == 1, uint8_t,
      std::conditional_t<sizeof(S) == 2, uint16_t,
                         std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>>>;
  U u = 0;
  for (size_t i = 0; i < sizeof(S); ++i) u = static_cast<U>((u << 8) | p[i]);
  return std::bit_cast<S>(u);
}

template <class S, class T>
void convert_from(const unsigned char* src, T* dst, size_t n) {
  const fn::convert_to<T> conv;
  for (size_t i = 0; i < n; ++i) dst[i] = conv(load_big_endian<S>(src + i * sizeof(S)));
}

template <class T>
void convert(uint8_t code, const unsigned char* src, T* dst, size_t n) {
  switch (code) {
    case 0x08:
      if constexpr (std::is_same_v<T, uint8_t>)
        std::memcpy(dst, src, n);
      else
        convert_from<uint8_t>(src, dst, n);
      break;
    case 0x09:
      convert_from<int8_t>(src, dst, n);
      break;
    case 0x0B:
      convert_from<int16_t>(src, dst, n);
      break;
    case 0x0C:
      convert_from<int32_t>(src, dst, n);
      break;
    case 0x0D:
      convert_from<float>(src, dst, n);
      break;
    default:
      convert_from<double>(src, dst, n);
      break;
  }
}

// A byte buffer that grows as data arrives, so a header that declares far more data than the
// file holds costs at most what was really read (plus one chunk), never the declared size.
class growing_buffer {
 public:
  unsigned char* data() const { return buf_.get(); }
  void ensure(size_t want, size_t used) {
    if (want <= cap_) return;
    size_t cap = std::max(want, cap_ * 2);
    std::unique_ptr<unsigned char[]> next(new unsigned char[cap]);
    if (used) std::memcpy(next.get(), buf_.get(), used);
    buf_ = std::move(next);
    cap_ = cap;
  }

 private:
  std::unique_ptr<unsigned char[]> buf_;
  size_t cap_ = 0;
};

}  // namespace detail::idx

namespace io {

inline std::string_view idx_header::type_name() const {
  return detail::idx::info_of(type_code).name;
}
inline size_t idx_header::element_size() const { return detail::idx::info_of(type_code).size; }

/// Reads and validates only the header of the IDX file at `path` (gzip'd or not): the stored
/// type and the shape. Throws io_error (naming the path) for a missing or unreadable file, a
/// path that is not a regular file (a directory, a device, a FIFO: refused without blocking), an
/// empty or truncated header, a wrong magic number, an unknown type code, a rank outside
/// [1, 8], a negative dimension, or a shape whose byte count overflows.
inline idx_header read_idx_header(const std::filesystem::path& path) {
  detail::idx::gz_reader in("read_idx_header", path);
  return detail::idx::read_header("read_idx_header", path, in);
}

/// Reads the IDX file at `path` into a new contiguous CPU tensor of the declared shape
/// (e.g. [60000, 28, 28] for MNIST images). The file may be gzip-compressed or plain: zlib
/// detects which. Stored values (uint8, int8, int16, int32, float32, float64, big-endian) are
/// converted to T as astype() converts: exact when T holds every stored value, otherwise
/// float -> integer truncates toward zero and saturates (NaN -> 0), integer -> narrower integer
/// wraps, and narrow floats round to nearest even.
///
/// Throws io_error naming the path for everything read_idx_header rejects, and for data
/// shorter than the shape declares (truncated files and gzip streams), bytes after the
/// declared data, and corrupt gzip data. Memory grows with the bytes actually read, so a
/// header that declares a huge shape fails at the end of the data instead of allocating it.
template <element_type T>
Tensor<T, cpu> read_idx(const std::filesystem::path& path) {
  constexpr std::string_view op = "read_idx";
  detail::idx::gz_reader in(op, path);
  const idx_header h = detail::idx::read_header(op, path, in);
  const size_t elem = h.element_size();
  const size_t total = static_cast<size_t>(h.shape.numel()) * elem;  // checked in read_header
  auto short_data = [&](size_t got) {
    detail::idx::fail_file(op, path, "truncated data: shape ", h.shape, " of ", h.type_name(),
                           " needs ", total, " bytes but the file holds ", got,
                           in.truncated_gzip() ? " (the gzip stream ends early)" : "");
  };
  if (in.direct()) {
    // A plain file's size is known: reject a short one before allocating anything.
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    const size_t header = 4 + 4 * static_cast<size_t>(h.shape.rank());
    if (!ec && size >= header && size - header < total) short_data(size - header);
  }

  constexpr size_t chunk = size_t{16} << 20;
  detail::idx::growing_buffer raw;
  size_t got = 0;
  while (got < total) {
    const size_t want = std::min(chunk, total - got);
    raw.ensure(got + want, got);
    const size_t r = in.read(raw.data() + got, want);
    got += r;
    if (r < want) short_data(got);
  }
  unsigned char extra;
  if (in.read(&extra, 1) != 0)
    detail::idx::fail_file(op, path, "unexpected bytes after the ", total, " data bytes of shape ",
                           h.shape, " of ", h.type_name(), " (corrupt header or wrong file)");

  Tensor<T, cpu> out(h.shape);
  if (total > 0)
    detail::idx::convert(h.type_code, raw.data(), out.data(), static_cast<size_t>(h.shape.numel()));
  return out;
}

/// The folder holding the Fashion-MNIST IDX files (train-images-idx3-ubyte.gz,
/// train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz): the
/// environment variable TESSERA_FASHION_MNIST_DIR when set and non-empty, otherwise
/// /usr/share/datasets/fashion-mnist (where Debian's dataset-fashion-mnist package puts them).
/// Does not check that the folder exists.
inline std::filesystem::path fashion_mnist_dir() {
  if (const char* env = std::getenv("TESSERA_FASHION_MNIST_DIR"); env && *env) return env;
  return "/usr/share/datasets/fashion-mnist";
}

}  // namespace io
TESSERA_END_NAMESPACE
