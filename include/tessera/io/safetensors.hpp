// tessera/io/safetensors.hpp - Hugging Face safetensors files: load (copied, or zero-copy views
// of a memory-mapped file) and save, every dtype tessera has.
//
// Not part of the umbrella header because it needs nlohmann/json (Debian nlohmann-json3-dev,
// header-only; with CMake: find_package(nlohmann_json), link nlohmann_json::nlohmann_json).
//
// Format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N, N
// bytes of JSON, then the data. The JSON maps each tensor's name to its dtype, shape and
// data_offsets [begin, end) into the data; "__metadata__" maps strings to strings. The files are
// untrusted: every field is checked before anything data-sized is allocated or read.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../backend/cpu/memory.hpp"
#include "../core/tensor.hpp"
#include "file_support.hpp"
#include "regular_file.hpp"

TESSERA_BEGIN_NAMESPACE

namespace detail::safetensors {
using namespace detail::io_file;

/// Largest header accepted, as the reference implementation (100 MB): a file cannot make the
/// reader parse an unbounded JSON document.
inline constexpr uint64_t max_header_bytes = 100'000'000;

/// A safetensors dtype name, its element size in bytes, and tessera's type for it (if any).
/// In the order the reference writer sorts tensors by (this order first, then the name), so
/// that save_safetensors writes the same bytes as it.
struct stored_dtype {
  std::string_view name;
  size_t size;
  bool has_tessera_type;
  dtype tag;
};
inline constexpr stored_dtype stored_dtypes[] = {
    {"U64", 8, false, dtype::int64},
    {"I64", 8, true, dtype::int64},
    {"F64", 8, true, dtype::float64},
    {"C64", 8, false, dtype::float64},
    {"F32", 4, true, dtype::float32},
    {"U32", 4, false, dtype::int32},
    {"I32", 4, true, dtype::int32},
    {"BF16", 2, true, dtype::bfloat16},
    {"F16", 2, true, dtype::float16},
    {"U16", 2, false, dtype::int32},
    {"I16", 2, false, dtype::int32},
    {"F8_E5M2FNUZ", 1, false, dtype::float8_e5m2},
    {"F8_E4M3FNUZ", 1, false, dtype::float8_e4m3},
    {"F8_E8M0", 1, false, dtype::uint8},
    {"F8_E4M3", 1, true, dtype::float8_e4m3},
    {"F8_E5M2", 1, true, dtype::float8_e5m2},
    {"I8", 1, true, dtype::int8},
    {"U8", 1, true, dtype::uint8},
    {"BOOL", 1, true, dtype::boolean},
};

inline const stored_dtype* find_dtype(std::string_view name) {
  for (const stored_dtype& d : stored_dtypes)
    if (d.name == name) return &d;
  return nullptr;
}
inline const stored_dtype& dtype_for(dtype tag) {
  for (const stored_dtype& d : stored_dtypes)
    if (d.has_tessera_type && d.tag == tag) return d;
  fail<dtype_error>("save_safetensors", "no safetensors dtype for this tensor");
}

/// One tensor as the header describes it; `begin` and `end` are offsets into the data section.
struct entry {
  std::string name;
  const stored_dtype* type = nullptr;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

constexpr bool little_host = std::endian::native == std::endian::little;

/// Reverses the bytes of each `size`-byte element (big-endian hosts only: the format is
/// little-endian).
inline void swap_elements(unsigned char* p, size_t bytes, size_t size) {
  if (size > 1)
    for (size_t i = 0; i + size <= bytes; i += size) std::reverse(p + i, p + i + size);
}

inline uint64_t as_offset(const where& w, const nlohmann::json& j, const char* what) {
  if (!j.is_number_integer() || (!j.is_number_unsigned() && j.get<int64_t>() < 0))
    fail_at(w, what, " must be a non-negative integer, not ", j.dump());
  return j.get<uint64_t>();
}

/// The tensor entry `name` of the header: dtype, shape and offsets, checked on their own (the
/// checks across entries and against the data size come after).
inline entry parse_entry(const where& w, const std::string& name, const nlohmann::json& v) {
  if (!v.is_object()) fail_at(w, "the header entry must be an object, not ", v.dump());
  entry e;
  e.name = name;
  const auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) fail_at(w, "has no \"dtype\" string");
  e.type = find_dtype(dt->get_ref<const std::string&>());
  if (!e.type) fail_at(w, "unknown dtype '", printable(dt->get_ref<const std::string&>()), "'");
  const auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) fail_at(w, "has no \"shape\" array");
  if (sh->size() > static_cast<size_t>(max_rank))
    fail_at(w, "rank ", sh->size(), " is over tessera's maximum of ", max_rank);
  uint64_t count = 1;
  for (const nlohmann::json& d : *sh) {
    const uint64_t n = as_offset(w, d, "a dimension");
    if (n > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(count, n, &count) ||
        count > static_cast<uint64_t>(INT64_MAX))
      fail_at(w, "shape ", sh->dump(), " has more elements than fit in int64");
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2)
    fail_at(w, "has no \"data_offsets\" array of two offsets");
  e.begin = as_offset(w, (*off)[0], "an offset");
  e.end = as_offset(w, (*off)[1], "an offset");
  if (e.end < e.begin) fail_at(w, "data_offsets ", off->dump(), " end before they begin");
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(e.type->size), &bytes) ||
      bytes != e.end - e.begin)
    fail_at(w, "shape ", sh->dump(), " of ", e.type->name, " needs ", bytes,
            " bytes, but data_offsets ", off->dump(), " hold ", e.end - e.begin);
  return e;
}

/// What the header says: the tensors in data order and the metadata.
struct header {
  uint64_t data_start = 0;  // 8 + header length
  std::vector<entry> entries;
  std::map<std::string, std::string> metadata;
};

/// Parses and checks the header of a file of `file_size` bytes read by `read(offset, dst, n)`.
template <class Read>
header read_header(std::string_view op, const std::filesystem::path& path, uint64_t file_size,
                   Read&& read) {
  const where w{op, path};
  if (file_size < 8)
    fail_at(w, file_size == 0 ? "is empty" : "is too short to be a safetensors file (",
            file_size == 0 ? "" : std::to_string(file_size) + " bytes)");
  unsigned char len[8];
  read(0, len, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  if (n > max_header_bytes)
    fail_at(w, "header length ", n, " is over the limit of ", max_header_bytes, " bytes");
  if (n > file_size - 8)
    fail_at(w, "header length ", n, " runs past the end of the file (", file_size, " bytes)");
  std::string text(static_cast<size_t>(n), '\0');
  read(8, text.data(), text.size());
  if (text.empty() || text[0] != '{') fail_at(w, "the header is not a JSON object");

  // The parser keeps the last of two equal keys; the callback sees each one and refuses.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& j) {
    if (depth == 1 && ev == nlohmann::json::parse_event_t::key && duplicate.empty() &&
        !seen.insert(j.template get<std::string>()).second)
      duplicate = j.template get<std::string>();
    return true;
  };
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text, on_event);
  } catch (const nlohmann::json::exception& e) {
    fail_at(w, "the header is not valid JSON (", e.what(), ")");
  }
  if (!doc.is_object()) fail_at(w, "the header is not a JSON object");
  if (!duplicate.empty()) fail_at(w, "the header names '", printable(duplicate), "' twice");

  header h;
  h.data_start = 8 + n;
  const uint64_t data_bytes = file_size - h.data_start;
  for (const auto& [key, value] : doc.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail_at(w, "\"__metadata__\" must be an object of strings");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          fail_at(w, "\"__metadata__\" value of '", printable(k), "' is not a string: ", v.dump());
        h.metadata.emplace(k, v.template get<std::string>());
      }
      continue;
    }
    h.entries.push_back(parse_entry(where{op, path, &key, "tensor"}, key, value));
  }
  // The data must be tiled exactly, as the reference implementation requires: sorted by offset,
  // each tensor starts where the one before ends, and the last ends at the end of the file.
  std::sort(h.entries.begin(), h.entries.end(), [](const entry& a, const entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const entry& e : h.entries) {
    const where we{op, path, &e.name, "tensor"};
    if (e.end > data_bytes)
      fail_at(we, "data_offsets [", e.begin, ", ", e.end, "] run past the end of the data (",
              data_bytes, " bytes)");
    if (e.begin < at)
      fail_at(we, "data_offsets [", e.begin, ", ", e.end, "] overlap the tensor before");
    if (e.begin > at)
      fail_at(we, "data_offsets [", e.begin, ", ", e.end, "] leave a gap after byte ", at);
    at = e.end;
  }
  if (at != data_bytes)
    fail_at(w, "the tensors' data ends at byte ", at, " of the data, but the file holds ",
            data_bytes, " (bytes after the last tensor)");
  return h;
}

/// The open file behind a safetensors_file: a descriptor, and in map mode the mapping. Views
/// handed out share ownership of it (aliasing shared_ptrs), so it outlives the object.
struct source {
  int fd = -1;
  uint64_t size = 0;
  void* map = nullptr;
  ~source() {
    if (map) ::munmap(map, size);
    if (fd >= 0) ::close(fd);
  }
};

/// A storage block over bytes of the mapping, kept alive together with it.
struct mapped_block {
  std::shared_ptr<source> src;
  storage_block block;
  mapped_block(std::shared_ptr<source> s, void* p, size_t n)
      : src(std::move(s)), block(p, n, nullptr) {}
};

template <class T>
Tensor<T, cpu> contiguous_tensor(std::shared_ptr<storage_block> storage, const Shape& shape) {
  return Tensor<T, cpu>(std::move(storage), shape, contiguous_strides(shape), 0);
}

}  // namespace detail::safetensors

namespace io {

/// How a safetensors file's tensors are read: `copy` reads each into memory of its own; `map`
/// maps the file and returns views of its bytes (no copy; the mapping lives as long as any view).
/// Mapped views are private: writing into one changes this process's copy of the page, never
/// the file. A tensor whose offset is not aligned to its element size is copied even in map mode.
enum class safetensors_mode { copy, map };

/// One tensor to be saved, of any dtype and backend: its name, dtype, shape and elements as
/// contiguous host bytes (a contiguous CPU tensor is not copied).
struct named_tensor {
  std::string name;
  dtype type;
  Shape shape;
  std::shared_ptr<const detail::io_file::host_bytes> bytes;

  template <element_type T, class B>
  named_tensor(std::string n, const Tensor<T, B>& t)
      : name(std::move(n)),
        type(dtype_of<T>),
        shape(t.shape()),
        bytes(std::make_shared<detail::io_file::host_bytes>(detail::io_file::host_bytes_of(t))) {
    if (!t.defined()) detail::fail<error>("save_safetensors", "tensor '", name, "' is undefined");
  }
};

/// A safetensors file, opened: names, dtypes, shapes and metadata from its checked header, and
/// its tensors on request (get<T>).
///
/// open() throws io_error naming the file (and the tensor at fault) for: a missing file or one
/// that is not a regular file; a file under 8 bytes; a header longer than 100 MB or than the
/// file; a header that is not a JSON object or not valid JSON (ill-formed UTF-8 included); a name
/// given twice; an entry without a dtype string, a shape array of non-negative integers (rank
/// up to 8) or two data_offsets; an unknown dtype; a shape whose bytes differ from its
/// offsets' span; offsets past the data, overlapping, leaving a gap, or data after the last
/// tensor; "__metadata__" that is not an object of strings.
class safetensors_file {
 public:
  static safetensors_file open(const std::filesystem::path& path,
                               safetensors_mode mode = safetensors_mode::copy) {
    namespace st = detail::safetensors;
    const detail::io_file::where w{"load_safetensors", path};
    const detail::opened_file f = detail::open_regular_file(path);
    if (f.fd < 0) detail::io_file::fail_at(w, f.error);
    auto src = std::make_shared<st::source>();
    src->fd = f.fd;
    src->size = f.size;
    safetensors_file file;
    file.path_ = path;
    file.src_ = src;
    file.header_ =
        st::read_header("load_safetensors", path, f.size,
                        [&](uint64_t off, void* dst, size_t n) { file.read_at(off, dst, n); });
    if (mode == safetensors_mode::map && f.size > 0) {
      void* p = ::mmap(nullptr, f.size, PROT_READ | PROT_WRITE, MAP_PRIVATE, f.fd, 0);
      if (p == MAP_FAILED)
        detail::io_file::fail_at(w, "cannot map the file (", std::strerror(errno), ")");
      src->map = p;
    }
    for (size_t i = 0; i < file.header_.entries.size(); ++i)
      file.index_.emplace(file.header_.entries[i].name, i);
    return file;
  }

  const std::filesystem::path& path() const { return path_; }
  /// The tensors' names, in the order of their data in the file.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : header_.entries) out.push_back(e.name);
    return out;
  }
  size_t size() const { return header_.entries.size(); }
  bool contains(std::string_view name) const { return index_.count(std::string(name)) != 0; }
  /// The stored dtype's safetensors name ("F32", "BF16", ...).
  std::string_view dtype_name(std::string_view name) const { return at(name).type->name; }
  Shape shape(std::string_view name) const { return at(name).shape; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  /// The tensor `name` as a contiguous CPU tensor: a copy, or in map mode a view of the file.
  /// The stored dtype must be T's exactly (loading never converts; use astype after).
  /// Throws io_error naming the file and tensor for an unknown name, another dtype, a dtype
  /// tessera has no type for (U64, U32, I16, U16, C64, the FNUZ and E8M0 formats), bool bytes other
  /// than 0 and 1, and a file that cannot be read (changed since open).
  template <element_type T>
  Tensor<T, cpu> get(std::string_view name) const {
    namespace st = detail::safetensors;
    const st::entry& e = at(name);
    const detail::io_file::where w{"load_safetensors", path_, &e.name, "tensor"};
    if (!e.type->has_tessera_type)
      detail::io_file::fail_at(w, "has dtype ", e.type->name, ", which tessera has no type for");
    if (e.type->tag != dtype_of<T>)
      detail::io_file::fail_at(w, "has dtype ", e.type->name, ", not ",
                               st::dtype_for(dtype_of<T>).name, " (", ::tessera::dtype_name<T>,
                               "); load it as its own type and convert with astype");
    const uint64_t offset = header_.data_start + e.begin;
    const size_t bytes = static_cast<size_t>(e.end - e.begin);
    if (src_->map && st::little_host && offset % alignof(T) == 0) {
      auto* p = static_cast<unsigned char*>(src_->map) + offset;
      if constexpr (std::is_same_v<T, bool>) check_bools(w, p, bytes);
      auto owner = std::make_shared<st::mapped_block>(src_, p, bytes);
      return st::contiguous_tensor<T>(std::shared_ptr<detail::storage_block>(owner, &owner->block),
                                      e.shape);
    }
    Tensor<T, cpu> t(e.shape);
    auto* dst = reinterpret_cast<unsigned char*>(t.data());
    if (src_->map)
      std::memcpy(dst, static_cast<const unsigned char*>(src_->map) + offset, bytes);
    else
      read_at(offset, dst, bytes);
    if constexpr (!st::little_host) st::swap_elements(dst, bytes, sizeof(T));
    if constexpr (std::is_same_v<T, bool>) check_bools(w, dst, bytes);
    return t;
  }

 private:
  safetensors_file() = default;

  const detail::safetensors::entry& at(std::string_view name) const {
    const auto it = index_.find(std::string(name));
    if (it == index_.end()) {
      const std::string n(name);
      detail::io_file::fail_at(detail::io_file::where{"load_safetensors", path_, &n, "tensor"},
                               "no such tensor in the file (it holds ", header_.entries.size(),
                               ")");
    }
    return header_.entries[it->second];
  }
  void read_at(uint64_t offset, void* dst, size_t n) const {
    auto* d = static_cast<unsigned char*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(src_->fd, d, n, static_cast<off_t>(offset));
      if (got <= 0) {
        const int e = errno;
        detail::io_file::fail_at(
            detail::io_file::where{"load_safetensors", path_},
            got == 0 ? "the file ended early (changed while being read?)" : "read error (",
            got == 0 ? "" : std::strerror(e), got == 0 ? "" : ")");
      }
      d += got, n -= static_cast<size_t>(got), offset += static_cast<uint64_t>(got);
    }
  }
  static void check_bools(const detail::io_file::where& w, const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (p[i] > 1)
        detail::io_file::fail_at(w, "bool element ", i, " is byte ", int{p[i]}, ", not 0 or 1");
  }

  std::filesystem::path path_;
  std::shared_ptr<detail::safetensors::source> src_;
  detail::safetensors::header header_;
  std::map<std::string, size_t> index_;
};

/// Every tensor of the file at `path`, in data order, each of dtype T exactly (see
/// safetensors_file::get for the rules and errors; open() for the file's).
template <element_type T>
std::vector<std::pair<std::string, Tensor<T, cpu>>> load_safetensors(
    const std::filesystem::path& path, safetensors_mode mode = safetensors_mode::copy) {
  const safetensors_file f = safetensors_file::open(path, mode);
  std::vector<std::pair<std::string, Tensor<T, cpu>>> out;
  for (const std::string& n : f.names()) out.emplace_back(n, f.get<T>(n));
  return out;
}

/// Writes `tensors` (any dtypes, shapes, views and backends) and `metadata` to `path` as a
/// safetensors file as the reference implementation writes it: tensors ordered as it orders
/// them (by dtype, larger elements first, then by name), the header compact JSON padded with
/// spaces to a multiple of 8 bytes (the same bytes, given at most one metadata entry: the
/// reference orders several at random). The file appears whole or not at all and keeps the mode of
/// a file it replaces (as save_npy). Throws io_error naming the path (and tensor) for an empty,
/// duplicate or
/// "__metadata__" name and for a name or metadata string that is not valid UTF-8, before
/// anything is written, and for the paths and files save_npy refuses or cannot write.
inline void save_safetensors(const std::filesystem::path& path,
                             const std::vector<named_tensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
  namespace st = detail::safetensors;
  using detail::io_file::fail_at;
  using detail::io_file::where;
  const where w{"save_safetensors", path};
  std::vector<const named_tensor*> order;
  std::set<std::string_view> names;
  for (const named_tensor& t : tensors) {
    const where wt{"save_safetensors", path, &t.name, "tensor"};
    if (t.name.empty()) fail_at(w, "a tensor name is empty");
    if (t.name == "__metadata__") fail_at(wt, "the name is reserved for the metadata");
    if (!names.insert(t.name).second) fail_at(wt, "the name is given twice");
    order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(), [](const named_tensor* a, const named_tensor* b) {
    const std::ptrdiff_t ra = &st::dtype_for(a->type) - st::stored_dtypes,
                         rb = &st::dtype_for(b->type) - st::stored_dtypes;
    return ra != rb ? ra < rb : a->name < b->name;
  });
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  if (!metadata.empty()) doc["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const named_tensor* t : order) {
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int64_t d : t->shape) shape.push_back(d);
    const uint64_t end = at + t->bytes->size;
    doc[t->name] = {
        {"dtype", st::dtype_for(t->type).name}, {"shape", shape}, {"data_offsets", {at, end}}};
    at = end;
  }
  std::string text;
  try {
    text = doc.dump();
  } catch (const nlohmann::json::exception& e) {
    fail_at(w, "a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t{text.size()} >> (8 * i));
  detail::io_file::atomic_writer out("save_safetensors", path);
  out.write(len, 8);
  out.write(text);
  for (const named_tensor* t : order) {
    if constexpr (st::little_host) {
      out.write(t->bytes->data, t->bytes->size);
    } else {
      std::vector<unsigned char> le(t->bytes->data, t->bytes->data + t->bytes->size);
      st::swap_elements(le.data(), le.size(), st::dtype_for(t->type).size);
      out.write(le.data(), le.size());
    }
  }
  out.commit();
}

/// save_safetensors for tensors of one type: save_safetensors<float>(path, {{"w", w}, {"b", b}}).
template <element_type T, class B = cpu>
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, Tensor<T, B>>>& tensors,
                      const std::map<std::string, std::string>& metadata = {}) {
  std::vector<named_tensor> all;
  for (const auto& [n, t] : tensors) all.emplace_back(n, t);
  save_safetensors(path, all, metadata);
}

}  // namespace io

TESSERA_END_NAMESPACE
