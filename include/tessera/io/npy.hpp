// tessera/io/npy.hpp - NumPy .npy and .npz files: tensors saved and loaded bit-exactly.
//
// Not part of the umbrella header because it needs zlib (CRC-32, and inflate for archives written
// by numpy.savez_compressed): include it and link ZLIB::ZLIB.
//
// Formats: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html (NPY 1.0, 2.0,
// 3.0) and PKWARE's APPNOTE.TXT (ZIP: local headers, central directory, end record).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend/cpu/memory.hpp"
#include "../core/tensor.hpp"
#include "../ops/tensor_copy.hpp"
#include "file_support.hpp"
#include "regular_file.hpp"

TESSERA_BEGIN_NAMESPACE

namespace detail::npy {
using namespace detail::io_file;

inline std::string hex32(uint32_t v) {
  constexpr char digits[] = "0123456789abcdef";
  std::string s = "0x";
  for (int sh = 28; sh >= 0; sh -= 4) s += digits[(v >> sh) & 15];
  return s;
}

// ---- dtypes ----

constexpr bool little_host = std::endian::native == std::endian::little;

// The NumPy descr tessera writes for T (native byte order, which is '<' on every supported
// host), or "" for the types NumPy has no dtype for (bfloat16, the float8 formats).
template <class T>
constexpr std::string_view descr_of() {
  if constexpr (std::is_same_v<T, float>)
    return little_host ? "<f4" : ">f4";
  else if constexpr (std::is_same_v<T, double>)
    return little_host ? "<f8" : ">f8";
  else if constexpr (std::is_same_v<T, half>)
    return little_host ? "<f2" : ">f2";
  else if constexpr (std::is_same_v<T, int8_t>)
    return "|i1";
  else if constexpr (std::is_same_v<T, uint8_t>)
    return "|u1";
  else if constexpr (std::is_same_v<T, int32_t>)
    return little_host ? "<i4" : ">i4";
  else if constexpr (std::is_same_v<T, int64_t>)
    return little_host ? "<i8" : ">i8";
  else if constexpr (std::is_same_v<T, bool>)
    return "|b1";
  else
    return {};
}

inline constexpr std::string_view supported_descrs =
    "'<f2', '<f4', '<f8', '|i1', '|u1', '<i4', '<i8', '|b1' (with any byte order)";

// A stored descr decoded: the tessera dtype, bytes per element, and whether the bytes must be
// swapped to native order.
struct stored_type {
  dtype tag = dtype::float32;
  size_t size = 0;
  bool swap = false;
};

// Decodes "<f4", ">i8", "|b1", "=u1", ... (a missing byte-order mark means native, as in NumPy).
// Returns false for anything tessera does not hold.
inline bool decode_descr(std::string_view d, stored_type& out) {
  char order = '=';
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) {
    order = d[0];
    d.remove_prefix(1);
  }
  struct entry {
    std::string_view code;
    dtype tag;
    size_t size;
  };
  static constexpr entry table[] = {{"f2", dtype::float16, 2}, {"f4", dtype::float32, 4},
                                    {"f8", dtype::float64, 8}, {"i1", dtype::int8, 1},
                                    {"u1", dtype::uint8, 1},   {"i4", dtype::int32, 4},
                                    {"i8", dtype::int64, 8},   {"b1", dtype::boolean, 1}};
  for (const entry& e : table) {
    if (d != e.code) continue;
    out.tag = e.tag;
    out.size = e.size;
    out.swap = e.size > 1 && ((order == '<' && !little_host) || (order == '>' && little_host));
    return true;
  }
  return false;
}

// ---- reading bytes: one interface over a file and a memory buffer ----

// Random-access bytes. read() is only called for ranges the caller has checked against size().
class byte_source {
 public:
  virtual uint64_t size() const = 0;
  virtual void read(uint64_t offset, void* dst, size_t n) = 0;

 protected:
  ~byte_source() = default;
};

class memory_source final : public byte_source {
 public:
  memory_source(const unsigned char* p, size_t n) : p_(p), n_(n) {}
  uint64_t size() const override { return n_; }
  void read(uint64_t offset, void* dst, size_t n) override {
    if (n) std::memcpy(dst, p_ + offset, n);
  }

 private:
  const unsigned char* p_;
  size_t n_;
};

// A regular file opened for reading (open_regular_file: anything else is refused before a byte
// is read); errors name the path.
class file_source final : public byte_source {
 public:
  explicit file_source(const where& w) : w_(w) {
    const opened_file f = open_regular_file(w.path);
    if (f.fd < 0) fail_at(w, f.error);
    f_ = ::fdopen(f.fd, "rb");
    if (!f_) {
      const int e = errno;
      ::close(f.fd);
      fail_at(w, "cannot open (", std::strerror(e), ")");
    }
    size_ = f.size;
  }
  file_source(const file_source&) = delete;
  file_source& operator=(const file_source&) = delete;
  ~file_source() { std::fclose(f_); }

  uint64_t size() const override { return size_; }
  void read(uint64_t offset, void* dst, size_t n) override {
    if (n == 0) return;
    errno = 0;
    if (fseeko(f_, static_cast<off_t>(offset), SEEK_SET) != 0) fail_io("cannot seek");
    if (std::fread(dst, 1, n, f_) != n)
      fail_io(std::feof(f_) ? "the file ended early while reading (changed while being read?)"
                            : "read error");
  }

 private:
  [[noreturn]] void fail_io(const char* what) {
    const int e = errno;
    fail_at(w_, what, e ? " (" : "", e ? std::strerror(e) : "", e ? ")" : "");
  }

  where w_;
  std::FILE* f_ = nullptr;
  uint64_t size_ = 0;
};

inline uint32_t get_le(const unsigned char* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- the NPY header ----

// What an .npy header declares, with the data's position and length.
struct header {
  std::string descr;  // as stored
  stored_type type;
  bool fortran_order = false;
  Shape shape;
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;
};

// The header dict is a Python literal such as {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }. This reads exactly that grammar: the three keys once each, in any order,
// any whitespace, an optional trailing comma in the dict and in the tuple.
class dict_parser {
 public:
  dict_parser(const where& w, std::string_view text) : w_(w), s_(text) {}

  void parse(header& h) {
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    expect('{');
    for (;;) {
      if (eat('}')) break;
      const std::string key = string_literal("a key");
      expect(':');
      bool* seen = nullptr;
      if (key == "descr") {
        seen = &seen_descr;
        skip_ws();
        if (pos_ < s_.size() && (s_[pos_] == '[' || s_[pos_] == '('))
          fail_at(w_, "structured dtypes are not supported (header ", quoted(), ")");
        h.descr = string_literal("the 'descr' value");
      } else if (key == "fortran_order") {
        seen = &seen_fortran;
        if (word("True"))
          h.fortran_order = true;
        else if (word("False"))
          h.fortran_order = false;
        else
          malformed("'fortran_order' is not True or False");
      } else if (key == "shape") {
        seen = &seen_shape;
        h.shape = shape_tuple();
      } else {
        malformed("unexpected key '" + key + "'");
      }
      if (*seen) malformed("key '" + key + "' appears twice");
      *seen = true;
      if (eat('}')) break;
      expect(',');
    }
    skip_ws();
    if (pos_ != s_.size()) malformed("unexpected text after the closing '}'");
    if (!seen_descr || !seen_fortran || !seen_shape)
      malformed(std::string("missing key '") +
                (!seen_descr     ? "descr"
                 : !seen_fortran ? "fortran_order"
                                 : "shape") +
                "'");
  }

 private:
  std::string quoted() const {
    constexpr size_t limit = 200;
    std::string t(s_.substr(0, limit));
    if (s_.size() > limit) t += "...";
    for (char& c : t)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    return "\"" + t + "\"";
  }
  [[noreturn]] void malformed(const std::string& what) const {
    fail_at(w_, "malformed header: ", what, " at byte ", pos_, " of ", quoted());
  }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) malformed(std::string("expected '") + c + "'");
  }
  bool word(std::string_view w) {
    skip_ws();
    if (s_.substr(pos_, w.size()) != w) return false;
    const size_t end = pos_ + w.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_'))
      return false;
    pos_ = end;
    return true;
  }
  std::string string_literal(const char* what) {
    skip_ws();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"'))
      malformed(std::string("expected a string for ") + what);
    const char q = s_[pos_++];
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\') malformed("escapes in strings are not supported");
      ++pos_;
    }
    if (pos_ >= s_.size()) malformed("unterminated string");
    return std::string(s_.substr(start, pos_++ - start));
  }
  Shape shape_tuple() {
    expect('(');
    int64_t dims[max_rank];
    int rank = 0;
    for (;;) {
      if (eat(')')) break;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '-')
        fail_at(w_, "malformed header: negative dimension in 'shape' ", quoted());
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_])))
        malformed("expected a dimension (non-negative integer) in 'shape'");
      int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s_[pos_] - '0', &v))
          fail_at(w_, "dimension ", rank, " in 'shape' does not fit in int64 (header ", quoted(),
                  ")");
        ++pos_;
      }
      if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 longs: (3L, 4L)
      if (rank == max_rank)
        fail_at(w_, "'shape' has more than ", max_rank, " dimensions (tessera's maximum rank; ",
                "header ", quoted(), ")");
      dims[rank++] = v;
      if (eat(')')) break;
      expect(',');
    }
    // A 1-tuple needs its comma in Python, but "(5)" is unambiguous here, so it is accepted.
    const dim_list declared(std::span<const int64_t>(dims, static_cast<size_t>(rank)));
    try {
      return Shape(declared);  // Shape checks that the element count fits in int64
    } catch (const shape_error&) {
      fail_at(w_, "declared shape ", declared.to_string(),
              " is too large (its element count overflows int64)");
    }
  }

  const where& w_;
  std::string_view s_;
  size_t pos_ = 0;
};

// Reads and validates the magic string, version, header dict and the data length of the .npy
// bytes in src. Throws io_error naming w.path (and the member) for anything wrong, before any
// data-sized allocation.
inline header read_header(const where& w, byte_source& src) {
  static constexpr unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  const uint64_t size = src.size();
  unsigned char pre[12];
  const size_t got = static_cast<size_t>(std::min<uint64_t>(size, 12));
  src.read(0, pre, got);
  if (size == 0) fail_at(w, "is empty (expected an .npy header)");
  if (std::memcmp(pre, magic, std::min<size_t>(got, 6)) != 0)
    fail_at(w, "wrong magic string (an .npy file starts with \"\\x93NUMPY\"): not an .npy file");
  if (got < 10) fail_at(w, "truncated: ", size, " bytes, shorter than the .npy preamble");
  const int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    fail_at(w, "unsupported .npy format version ", major, ".", minor,
            " (supported: 1.0, 2.0, 3.0)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (got < 8 + len_bytes) fail_at(w, "truncated: ", size, " bytes, shorter than the preamble");
  const uint64_t header_len = get_le(pre + 8, static_cast<int>(len_bytes));
  const uint64_t start = 8 + len_bytes;
  if (header_len > size - start)
    fail_at(w, "header length ", header_len, " goes beyond the end of the data (", size,
            " bytes in all; truncated?)");

  std::string text(static_cast<size_t>(header_len), '\0');
  src.read(start, text.data(), text.size());
  header h;
  dict_parser(w, text).parse(h);
  if (!decode_descr(h.descr, h.type))
    fail_at(w, "unknown or unsupported dtype descr '", printable(h.descr),
            "' (supported: ", supported_descrs, ")");

  h.data_offset = start + header_len;
  const auto numel = static_cast<uint64_t>(h.shape.numel());
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(h.type.size), &h.data_bytes) ||
      h.data_bytes > static_cast<uint64_t>(INT64_MAX) ||
      h.data_bytes > static_cast<uint64_t>(SIZE_MAX))
    fail_at(w, "declared shape ", h.shape, " of '", h.descr,
            "' is too large (its byte count overflows)");
  const uint64_t have = size - h.data_offset;
  if (have < h.data_bytes)
    fail_at(w, "truncated data: shape ", h.shape, " of '", h.descr, "' needs ", h.data_bytes,
            " bytes but only ", have, " follow the header");
  if (have > h.data_bytes)
    fail_at(w, have - h.data_bytes, " unexpected bytes after the ", h.data_bytes,
            " data bytes of shape ", h.shape, " of '", h.descr, "'");
  return h;
}

// Turns stored element bytes into native ones in place: byte swaps, and a check that bools are
// 0 or 1 (any other byte would be an invalid C++ bool).
inline void to_native(const where& w, const header& h, unsigned char* p, size_t n) {
  if (h.type.swap) {
    const size_t s = h.type.size;
    for (size_t i = 0; i < n; i += s) std::reverse(p + i, p + i + s);
  }
  if (h.type.tag == dtype::boolean) {
    for (size_t i = 0; i < n; ++i)
      if (p[i] > 1)
        fail_at(w, "bool element ", i, " holds the byte ", static_cast<int>(p[i]),
                " (expected 0 or 1)");
  }
}

// The tensor stored in the .npy bytes of src. Shared by load_npy (a file) and load_npz (a
// member's bytes in memory).
template <element_type T>
Tensor<T, cpu> read_array(const where& w, byte_source& src) {
  const header h = read_header(w, src);
  if (h.type.tag != dtype_of<T>) {
    fail_at(w, "stored dtype '", h.descr, "' (", name_of(h.type.tag), ") is not the requested ",
            dtype_name<T>, descr_of<T>().empty() ? " (which has no NumPy dtype)" : "",
            "; loading never converts, so load it as ", name_of(h.type.tag),
            " and convert with astype");
  }
  static_assert(sizeof(T) <= 8);
  const size_t n = static_cast<size_t>(h.data_bytes);
  if (!h.fortran_order || h.shape.rank() < 2) {
    Tensor<T, cpu> out(h.shape);
    auto* p = reinterpret_cast<unsigned char*>(out.data());
    src.read(h.data_offset, p, n);
    to_native(w, h, p, n);
    return out;
  }
  // Fortran order: the data is the C-order array of the reversed shape; read it, then gather
  // it into C order through the reversed strides.
  std::unique_ptr<unsigned char[]> raw(new unsigned char[n]);
  src.read(h.data_offset, raw.get(), n);
  to_native(w, h, raw.get(), n);
  const int r = h.shape.rank();
  dim_list strides;
  strides.resize(r);
  int64_t acc = 1;
  for (int i = 0; i < r; ++i) {
    strides[i] = acc;
    acc *= h.shape[i];
  }
  Tensor<T, cpu> out(h.shape);
  gather_bytes(reinterpret_cast<unsigned char*>(out.data()), raw.get(), h.shape, strides,
               sizeof(T));
  return out;
}

// ---- writing ----

// The NPY preamble and header for a C-order array: version 1.0 unless the header needs more
// than 65535 bytes, padded with spaces and a newline to a multiple of 64 bytes as NumPy does.
inline std::string make_header(std::string_view descr, const Shape& shape) {
  std::string dict = "{'descr': '";
  dict += descr;
  dict += "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < shape.rank(); ++i) {
    dict += std::to_string(shape[i]);
    if (i + 1 < shape.rank() || shape.rank() == 1) dict += ",";
    if (i + 1 < shape.rank()) dict += " ";
  }
  dict += "), }";
  size_t pre = 10;
  size_t len = (dict.size() + 1 + pre + 63) / 64 * 64 - pre;
  if (len > 65535) {
    pre = 12;
    len = (dict.size() + 1 + pre + 63) / 64 * 64 - pre;
  }
  std::string out = "\x93NUMPY";
  out += static_cast<char>(pre == 10 ? 1 : 2);
  out += '\0';
  for (size_t i = 0; i < pre - 8; ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  out += dict;
  out.append(len - dict.size() - 1, ' ');
  out += '\n';
  return out;
}

template <class T>
void check_savable(std::string_view op, const std::filesystem::path& path) {
  if constexpr (descr_of<T>().empty())
    detail::fail<dtype_error>(op, "'", path.string(), "': ", dtype_name<T>,
                              " has no NumPy dtype; save t.astype<float>() instead (exact for ",
                              dtype_name<T>, " values)");
}

// ---- ZIP ----

inline uint32_t crc32_of(uint32_t crc, const unsigned char* p, size_t n) {
  while (n > 0) {
    const auto chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

inline void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>((v >> 8) & 0xff);
}
inline void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}

constexpr uint32_t local_sig = 0x04034b50, central_sig = 0x02014b50, end_sig = 0x06054b50,
                   zip64_locator_sig = 0x07064b50;
constexpr uint32_t zip_limit = 0xffffffffu;  // 32-bit fields; all ones marks ZIP64

// A name that occurs more than once among `names` (found by sorting: an archive may hold
// 65535), or null.
inline const std::string* first_duplicate(std::vector<const std::string*> names) {
  std::sort(names.begin(), names.end(), [](auto* a, auto* b) { return *a < *b; });
  const auto dup =
      std::adjacent_find(names.begin(), names.end(), [](auto* a, auto* b) { return *a == *b; });
  return dup == names.end() ? nullptr : *dup;
}

// One member of an archive, as its central-directory entry describes it.
struct zip_entry {
  std::string name;  // as stored, e.g. "weight.npy"
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0, usize = 0, local_offset = 0;
  uint64_t data_offset = 0;  // where the member's (compressed) bytes start
};

// Writes the local header of a stored member whose sizes and CRC are known. Fixed date
// 1980-01-01 00:00, so that equal tensors give equal files.
inline std::string local_header(const std::string& name, uint32_t crc, uint32_t size) {
  std::string h;
  put32(h, local_sig);
  put16(h, 20);  // version needed: 2.0
  put16(h, 0);   // flags (bit 11, UTF-8, is set below when needed)
  put16(h, 0);   // stored
  put16(h, 0);   // time
  put16(h, (0 << 9) | (1 << 5) | 1);
  put32(h, crc);
  put32(h, size);
  put32(h, size);
  put16(h, static_cast<uint32_t>(name.size()));
  put16(h, 0);
  if (std::any_of(name.begin(), name.end(), [](char c) { return (c & 0x80) != 0; }))
    h[7] = static_cast<char>(1 << 3);  // flag bit 11: the name is UTF-8
  return h + name;
}

inline std::string central_entry(const std::string& local, uint32_t offset) {
  // The central entry repeats the local header's fields (from "version needed" to the name
  // lengths) and adds its own.
  std::string c;
  put32(c, central_sig);
  put16(c, (3 << 8) | 20);   // made by: Unix, 2.0 (so that unzip gives the files mode 0644)
  c.append(local, 4, 24);    // version needed .. name length
  put16(c, 0);               // extra length
  put16(c, 0);               // comment length
  put16(c, 0);               // disk number
  put16(c, 0);               // internal attributes
  put32(c, 0100644u << 16);  // external attributes: regular file, rw-r--r--
  put32(c, offset);
  return c.append(local, 30, std::string::npos);  // the name
}

// The entries of the archive in src, in central-directory order, validated against its size.
inline std::vector<zip_entry> read_directory(const where& w, byte_source& src) {
  const uint64_t size = src.size();
  if (size < 22)
    fail_at(w, "truncated or not a ZIP archive: ", size,
            " bytes, shorter than an end-of-central-directory record");
  const size_t tail_len = static_cast<size_t>(std::min<uint64_t>(size, 22 + 65535));
  std::vector<unsigned char> tail(tail_len);
  src.read(size - tail_len, tail.data(), tail_len);
  // The end record is the last thing in the file except its comment; scan back over one.
  size_t at = SIZE_MAX;
  for (size_t i = tail_len - 22 + 1; i-- > 0;) {
    if (get_le(&tail[i], 4) == end_sig && i + 22 + get_le(&tail[i + 20], 2) == tail_len) {
      at = i;
      break;
    }
  }
  if (at == SIZE_MAX) {
    unsigned char head[4];
    src.read(0, head, 4);
    fail_at(w, get_le(head, 4) == local_sig
                   ? "truncated or corrupt ZIP archive: no end-of-central-directory record"
                   : "not a ZIP archive (no end-of-central-directory record)");
  }
  const unsigned char* e = &tail[at];
  const uint64_t end_pos = size - tail_len + at;
  const uint32_t disk = get_le(e + 4, 2), cd_disk = get_le(e + 6, 2);
  const uint32_t n_disk = get_le(e + 8, 2), n_total = get_le(e + 10, 2);
  const uint64_t cd_size = get_le(e + 12, 4), cd_offset = get_le(e + 16, 4);
  if (n_total == 0xffff || cd_size == zip_limit || cd_offset == zip_limit ||
      (at >= 20 && get_le(e - 20, 4) == zip64_locator_sig))
    fail_at(w, "ZIP64 archives are not supported (members and archive must be under 4 GiB)");
  if (disk != 0 || cd_disk != 0 || n_disk != n_total)
    fail_at(w, "multi-volume ZIP archives are not supported");
  if (cd_offset > end_pos || cd_size > end_pos - cd_offset)
    fail_at(w, "corrupt ZIP archive: the central directory (offset ", cd_offset, ", ", cd_size,
            " bytes) does not lie before the end record at ", end_pos);

  std::vector<unsigned char> cd(static_cast<size_t>(cd_size));
  src.read(cd_offset, cd.data(), cd.size());
  std::vector<zip_entry> entries;
  entries.reserve(n_total);
  size_t p = 0;
  for (uint32_t k = 0; k < n_total; ++k) {
    if (cd.size() - p < 46 || get_le(&cd[p], 4) != central_sig)
      fail_at(w, "corrupt ZIP central directory at entry ", k, " of ", n_total);
    const unsigned char* c = &cd[p];
    zip_entry z;
    z.flags = static_cast<uint16_t>(get_le(c + 8, 2));
    z.method = static_cast<uint16_t>(get_le(c + 10, 2));
    z.crc = get_le(c + 16, 4);
    z.csize = get_le(c + 20, 4);
    z.usize = get_le(c + 24, 4);
    const size_t name_len = get_le(c + 28, 2), extra_len = get_le(c + 30, 2),
                 comment_len = get_le(c + 32, 2);
    z.local_offset = get_le(c + 42, 4);
    if (cd.size() - p - 46 < name_len + extra_len + comment_len)
      fail_at(w, "corrupt ZIP central directory at entry ", k, " of ", n_total);
    z.name.assign(reinterpret_cast<const char*>(c + 46), name_len);
    const where wm{w.op, w.path, &z.name};
    if (z.csize == zip_limit || z.usize == zip_limit || z.local_offset == zip_limit)
      fail_at(wm, "ZIP64 members are not supported (each must be under 4 GiB)");
    if (z.flags & 1) fail_at(wm, "is encrypted (not supported)");
    if (z.method != 0 && z.method != 8)
      fail_at(wm, "unsupported compression method ", z.method, " (supported: 0 stored, 8 deflate)");
    p += 46 + name_len + extra_len + comment_len;
    entries.push_back(std::move(z));
  }
  std::vector<const std::string*> names;
  for (const zip_entry& z : entries) names.push_back(&z.name);
  if (const std::string* dup = first_duplicate(std::move(names)))
    fail_at(where{w.op, w.path, dup}, "appears twice in the archive");
  for (zip_entry& z : entries) {
    const where wm{w.op, w.path, &z.name};
    const uint64_t fixed = 30 + z.name.size();
    if (z.local_offset > cd_offset || cd_offset - z.local_offset < fixed)
      fail_at(wm, "corrupt ZIP archive: local header offset ", z.local_offset,
              " is not before the central directory at ", cd_offset);
    std::vector<unsigned char> l(fixed);
    src.read(z.local_offset, l.data(), l.size());
    if (get_le(&l[0], 4) != local_sig)
      fail_at(wm, "corrupt ZIP archive: no local header at offset ", z.local_offset);
    if (get_le(&l[26], 2) != z.name.size() || get_le(&l[8], 2) != z.method ||
        std::memcmp(&l[30], z.name.data(), z.name.size()) != 0)
      fail_at(wm, "corrupt ZIP archive: the local header at offset ", z.local_offset,
              " disagrees with the central directory");
    const uint64_t data = z.local_offset + fixed + get_le(&l[28], 2);
    if (data > cd_offset || z.csize > cd_offset - data)
      fail_at(wm, "corrupt or truncated ZIP archive: ", z.csize, " bytes of data at offset ", data,
              " run past the central directory at ", cd_offset);
    z.data_offset = data;
  }
  return entries;
}

// The uncompressed bytes of one member, CRC-checked. Memory grows with the bytes really
// inflated, so a member that declares a huge size fails without allocating it.
inline std::vector<unsigned char> read_member(const where& w, byte_source& src,
                                              const zip_entry& z) {
  std::vector<unsigned char> in(static_cast<size_t>(z.csize));
  src.read(z.data_offset, in.data(), in.size());
  std::vector<unsigned char> out;
  if (z.method == 0) {
    if (z.csize != z.usize)
      fail_at(w, "corrupt ZIP archive: stored member has compressed size ", z.csize,
              " but uncompressed size ", z.usize);
    out = std::move(in);
  } else {
    struct stream : z_stream {
      bool live = false;
      ~stream() {
        if (live) inflateEnd(this);
      }
    } zs{};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail_at(w, "zlib could not start inflating");
    zs.live = true;
    zs.next_in = in.data();
    zs.avail_in = static_cast<uInt>(in.size());
    const size_t cap = static_cast<size_t>(z.usize) + 1;  // one more byte detects overlong data
    out.resize(std::min<size_t>(cap, std::max<size_t>(in.size() * 4, 1 << 16)));
    size_t produced = 0;
    for (;;) {
      zs.next_out = out.data() + produced;
      zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, UINT_MAX));
      const int r = inflate(&zs, Z_NO_FLUSH);
      produced = static_cast<size_t>(zs.next_out - out.data());
      if (r == Z_STREAM_END) break;
      if (r != Z_OK && r != Z_BUF_ERROR)
        fail_at(w, "corrupt deflate data (zlib: ", zs.msg ? zs.msg : "error", ")");
      if (produced == out.size()) {
        if (out.size() == cap) fail_at(w, "inflates to more than the declared ", z.usize, " bytes");
        out.resize(std::min(cap, out.size() * 2));
      } else if (zs.avail_in == 0 || r == Z_BUF_ERROR) {
        fail_at(w, "truncated deflate data (", z.csize, " compressed bytes end mid-stream)");
      }
    }
    if (zs.avail_in != 0)
      fail_at(w, zs.avail_in, " unexpected bytes after the end of the deflate data");
    if (produced != z.usize)
      fail_at(w, "inflates to ", produced, " bytes, not the declared ", z.usize);
    out.resize(produced);
  }
  const uint32_t crc =
      crc32_of(static_cast<uint32_t>(::crc32(0, Z_NULL, 0)), out.data(), out.size());
  if (crc != z.crc)
    fail_at(w, "CRC-32 mismatch: the data has ", hex32(crc), ", the archive records ", hex32(z.crc),
            " (corrupt archive)");
  return out;
}

// The arrays of the .npz archive in src (load_npz's reader; the fuzz harness feeds it memory).
template <element_type T>
std::vector<std::pair<std::string, Tensor<T, cpu>>> read_npz(const where& w, byte_source& src) {
  const std::vector<zip_entry> entries = read_directory(w, src);
  // Each member's array name, its name without ".npy". Distinct members may give one name
  // ("w.npy" and "w"), which would make the archive's meaning depend on who reads it last.
  std::vector<std::string> names;
  names.reserve(entries.size());
  for (const zip_entry& z : entries) {
    std::string name = z.name;
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.resize(name.size() - 4);
    names.push_back(std::move(name));
  }
  std::vector<const std::string*> name_ptrs;
  for (const std::string& n : names) name_ptrs.push_back(&n);
  if (const std::string* dup = first_duplicate(std::move(name_ptrs))) {
    std::string members;
    for (size_t i = 0; i < entries.size(); ++i)
      if (names[i] == *dup)
        members += (members.empty() ? "'" : " and '") + printable(entries[i].name) + "'";
    fail_at(w, "array '", printable(*dup), "' appears twice (members ", members, ")");
  }
  std::vector<std::pair<std::string, Tensor<T, cpu>>> out;
  out.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const zip_entry& z = entries[i];
    const where wm{w.op, w.path, &z.name};
    const std::vector<unsigned char> bytes = read_member(wm, src, z);
    memory_source mem(bytes.data(), bytes.size());
    out.emplace_back(std::move(names[i]), read_array<T>(wm, mem));
  }
  return out;
}

}  // namespace detail::npy

namespace io {

/// Writes `t` to `path` as a NumPy .npy file (format 1.0; 2.0 only for a header over 64 KiB):
/// C order, little-endian, dtype '<f4' float, '<f8' double, '<f2' half, '|i1' int8_t,
/// '|u1' uint8_t, '<i4' int32_t, '<i8' int64_t, '|b1' bool. Any shape of rank 0..8, any view:
/// a strided view is written by value, a tensor on another backend is copied to the CPU first.
/// `numpy.load(path)` returns an equal array, and load_npy<T> the same bits.
///
/// The file is written beside the target under a temporary name, synced to disk and renamed
/// over it only when every byte was written, then the directory is synced: an existing file is
/// replaced whole or not at all, also across a crash or power cut. A replaced file's permission
/// bits (and owner, where the process may set it) are kept; a new file gets 0666 less the umask.
/// Throws dtype_error for bfloat16 / float8 (NumPy has no such dtype: save astype<float>()),
/// io_error naming the path for an empty path, a directory, a missing parent directory, a
/// destination that exists but is not a regular file (a device, a FIFO: refused, not written
/// into), and when the file cannot be created, written or synced; error for an undefined tensor.
template <element_type T, class B>
void save_npy(const std::filesystem::path& path, const Tensor<T, B>& t) {
  constexpr std::string_view op = "save_npy";
  detail::npy::check_savable<T>(op, path);
  t.check_defined(op);
  const detail::npy::host_bytes data = detail::npy::host_bytes_of(t);
  detail::npy::atomic_writer out(op, path);
  out.write(detail::npy::make_header(detail::npy::descr_of<T>(), t.shape()));
  out.write(data.data, data.size);
  out.commit();
}

/// Reads the .npy file at `path` into a new contiguous CPU tensor of the stored shape (rank
/// 0..8). The stored dtype must be T's exactly ('<f4' for float, ..., '|b1' for bool, in any
/// byte order '<', '>', '|' or '='; big-endian data is swapped): loading never converts, so a
/// checkpoint comes back bit for bit. Fortran-order arrays are reordered into C order.
/// Accepts NPY format versions 1.0, 2.0 and 3.0.
///
/// Throws io_error naming the path and what is wrong: missing or unreadable file, a path that is
/// not a regular file (a directory, a device, a FIFO: refused without blocking), wrong magic,
/// unsupported version, header length past the end of the file, malformed header dict,
/// unknown or structured descr, a stored dtype other than T (naming both), rank over 8,
/// negative or overflowing dimensions, data shorter than the shape needs or bytes after it,
/// bool bytes other than 0 and 1. The file size is checked against the declared shape before
/// anything data-sized is allocated.
template <element_type T>
Tensor<T, cpu> load_npy(const std::filesystem::path& path) {
  const detail::npy::where w{"load_npy", path};
  detail::npy::file_source src(w);
  return detail::npy::read_array<T>(w, src);
}

/// Writes `arrays` to `path` as a NumPy .npz archive: an uncompressed ZIP file whose member
/// "<name>.npy" holds each tensor as save_npy writes it, in the order given. `numpy.load(path)`
/// returns an NpzFile with those names as keys; load_npz<T> returns the tensors bit for bit.
/// The file appears whole or not at all, and keeps the replaced file's mode (as for save_npy).
///
/// Throws dtype_error for bfloat16 / float8 (save astype<float>() tensors), io_error naming the
/// path and the name for an empty, duplicate or NUL-containing name, for a member of 4 GiB or
/// more, an archive past 4 GiB or over 65535 members (ZIP64 is not written), all before anything
/// is written (an existing file is left untouched), and for the paths and files save_npy
/// refuses or cannot write; error for an undefined tensor.
template <element_type T, class B>
void save_npz(const std::filesystem::path& path,
              const std::vector<std::pair<std::string, Tensor<T, B>>>& arrays) {
  namespace npy = detail::npy;
  constexpr std::string_view op = "save_npz";
  npy::check_savable<T>(op, path);
  const npy::where w{op, path};
  auto fail_name = [&](const std::string& name, const auto&... parts) {
    npy::fail_at(w, "array '", npy::printable(name), "': ", parts...);
  };
  if (arrays.size() > 0xffff)
    npy::fail_at(w, arrays.size(),
                 " arrays exceed the 65535 members of a ZIP archive without ZIP64");
  // Validate everything before writing anything.
  std::vector<const std::string*> names;
  for (const auto& a : arrays) names.push_back(&a.first);
  if (const std::string* dup = npy::first_duplicate(std::move(names)))
    fail_name(*dup, "the name appears twice");
  uint64_t total = 22;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const auto& [name, t] = arrays[i];
    if (name.empty()) fail_name(name, "the name is empty");
    if (name.find('\0') != std::string::npos) fail_name(name, "the name contains a NUL byte");
    if (name.size() + 4 > 0xffff) fail_name(name, "the name is longer than a ZIP name may be");
    t.check_defined(op);
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * sizeof(T) + 64 * 16;
    if (bytes >= npy::zip_limit)
      fail_name(name, "shape ", t.shape(), " of ", dtype_name<T>,
                " needs 4 GiB or more, beyond a ZIP member without ZIP64");
    total += bytes + 2 * (46 + name.size() + 4);
  }
  if (total >= npy::zip_limit)
    npy::fail_at(w, "the archive would reach 4 GiB or more, beyond a ZIP file without ZIP64");

  npy::atomic_writer out(op, path);
  std::string central;
  for (const auto& [name, t] : arrays) {
    const npy::host_bytes data = npy::host_bytes_of(t);
    const std::string header = npy::make_header(npy::descr_of<T>(), t.shape());
    uint32_t crc = static_cast<uint32_t>(::crc32(0, Z_NULL, 0));
    crc = npy::crc32_of(crc, reinterpret_cast<const unsigned char*>(header.data()), header.size());
    crc = npy::crc32_of(crc, data.data, data.size);
    const auto offset = static_cast<uint32_t>(out.written());
    const std::string local =
        npy::local_header(name + ".npy", crc, static_cast<uint32_t>(header.size() + data.size));
    out.write(local);
    out.write(header);
    out.write(data.data, data.size);
    central += npy::central_entry(local, offset);
  }
  const auto cd_offset = static_cast<uint32_t>(out.written());
  out.write(central);
  std::string end;
  npy::put32(end, npy::end_sig);
  npy::put16(end, 0);
  npy::put16(end, 0);
  npy::put16(end, static_cast<uint32_t>(arrays.size()));
  npy::put16(end, static_cast<uint32_t>(arrays.size()));
  npy::put32(end, static_cast<uint32_t>(central.size()));
  npy::put32(end, cd_offset);
  npy::put16(end, 0);
  out.write(end);
  out.commit();
}

/// Reads the .npz archive at `path` (as numpy.savez or numpy.savez_compressed write it, or
/// save_npz): every member, in archive order, as (name without its ".npy" suffix, new
/// contiguous CPU tensor). Each member is read as load_npy reads a file, so each must hold
/// dtype T exactly. Members may be stored or deflated; each one's CRC-32 is checked.
///
/// Throws io_error naming the path (and the member where one is at fault) for a missing file,
/// something not a ZIP archive, a truncated or corrupt archive (no end record, offsets or sizes
/// out of range, headers that disagree), ZIP64, multi-volume or encrypted archives, methods
/// other than stored and deflate, corrupt deflate data, a CRC mismatch, a member name that
/// appears twice, two members that load under one name ("w.npy" and "w"), and for each member
/// everything load_npy rejects (a path that is not a regular file included).
template <element_type T>
std::vector<std::pair<std::string, Tensor<T, cpu>>> load_npz(const std::filesystem::path& path) {
  const detail::npy::where w{"load_npz", path};
  detail::npy::file_source src(w);
  return detail::npy::read_npz<T>(w, src);
}

}  // namespace io
TESSERA_END_NAMESPACE
