// tessera/io/file_support.hpp - what the tensor file formats (npy.hpp, safetensors.hpp) share:
// error messages that name the op, the file and the entry; a tensor's elements as contiguous
// host bytes; and atomic_writer, which makes a written file appear whole or not at all.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../core/tensor.hpp"
#include "regular_file.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail::io_file {

// Where an error happened: the op, the file and the entry inside it (an .npz member, a
// safetensors tensor), named as `kind` says.
struct where {
  std::string_view op;
  const std::filesystem::path& path;
  const std::string* member = nullptr;
  std::string_view kind = "member";
};

// A name as it may be printed in a message: control bytes (a NUL would cut what() short) as \xNN.
inline std::string printable(std::string_view s) {
  constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      out += std::string("\\x") + digits[u >> 4] + digits[u & 15];
    else
      out += c;
  }
  return out;
}

// Message parts are appended to a string by these few overloads, rather than streamed through
// an ostringstream per call site: there are dozens of error sites, and this keeps their code (and
// the header's compile time) small.
inline void append_part(std::string& s, std::string_view v) { s += v; }
inline void append_part(std::string& s, const dim_list& d) { s += d.to_string(); }
template <class I>
requires std::is_integral_v<I>
void append_part(std::string& s, I v) { s += std::to_string(v); }

[[noreturn]] inline void throw_at(const where& w, const std::string& what) {
  // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive) on "'" + str.
  std::string where_(1, '\'');
  where_ += w.path.string();
  where_ += "': ";
  if (w.member) {
    where_ += w.kind;
    where_ += " '";
    where_ += printable(*w.member);
    where_ += "': ";
  }
  fail<io_error>(w.op, where_, what);
}

// Throws io_error "tessera::<op>: '<path>': [<kind> '<name>': ]<parts...>".
template <class... Parts>
[[noreturn]] void fail_at(const where& w, const Parts&... parts) {
  std::string what;
  (append_part(what, parts), ...);
  throw_at(w, what);
}

// Copies the array at src (element strides `strides`, which may be anything, elements of N
// bytes) into dst in row-major order.
template <size_t N>
void gather(unsigned char* dst, const unsigned char* src, const dim_list& shape,
            const dim_list& strides) {
  const int r = shape.size();
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel == 0) return;
  if (r == 0) {
    std::memcpy(dst, src, N);
    return;
  }
  const int64_t inner = shape[r - 1], step = strides[r - 1] * static_cast<int64_t>(N);
  int64_t idx[max_rank] = {};
  int64_t off = 0;  // byte offset of the current row in src
  for (int64_t row = 0; row < numel / inner; ++row) {
    const unsigned char* s = src + off;
    for (int64_t i = 0; i < inner; ++i, dst += N) std::memcpy(dst, s + i * step, N);
    for (int d = r - 2; d >= 0; --d) {  // odometer over the outer dims
      off += strides[d] * static_cast<int64_t>(N);
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * static_cast<int64_t>(N) * shape[d];
      idx[d] = 0;
    }
  }
}
inline void gather_bytes(unsigned char* dst, const unsigned char* src, const dim_list& shape,
                         const dim_list& strides, size_t item) {
  switch (item) {
    case 1:
      return gather<1>(dst, src, shape, strides);
    case 2:
      return gather<2>(dst, src, shape, strides);
    case 4:
      return gather<4>(dst, src, shape, strides);
    default:
      return gather<8>(dst, src, shape, strides);
  }
}

// A tensor's elements as contiguous host bytes in C order: the tensor's own memory when it is
// already a contiguous CPU tensor, otherwise a copy.
struct host_bytes {
  const unsigned char* data = nullptr;
  size_t size = 0;
  std::shared_ptr<detail::storage_block> keep;  // keeps a staging copy alive
  std::unique_ptr<unsigned char[]> gathered;
};

template <class T, class B>
host_bytes host_bytes_of(const Tensor<T, B>& t) {
  host_bytes hb;
  hb.size = static_cast<size_t>(t.numel()) * sizeof(T);
  if constexpr (std::is_same_v<B, cpu>) {
    hb.keep = t.storage();
    if (t.is_contiguous()) {
      hb.data = reinterpret_cast<const unsigned char*>(t.data());
    } else {
      hb.gathered.reset(new unsigned char[std::max<size_t>(hb.size, 1)]);
      gather_bytes(hb.gathered.get(), reinterpret_cast<const unsigned char*>(t.data()), t.shape(),
                   t.strides(), sizeof(T));
      hb.data = hb.gathered.get();
    }
  } else {
    const Tensor<T, cpu> h = t.template to<cpu>();  // contiguous
    hb.keep = h.storage();
    hb.data = reinterpret_cast<const unsigned char*>(h.data());
  }
  return hb;
}

// Writes a file so that it appears complete or not at all, also across a crash or power cut:
// the bytes go to a new temporary file beside the target (O_EXCL: never one that was there), which
// is flushed, synced to disk and only then renamed over the target; then the directory is synced,
// so that the rename itself is on disk. The file gets the permission bits (and, where the process
// may, the owner) of the file it replaces, and a new one 0666 less the umask, as open(2) gives.
// A symbolic link stays a link (the file it points to is replaced). A target that exists but is
// not a regular file (/dev/null, a FIFO, a socket) is refused, not replaced or written into.
class atomic_writer {
 public:
  atomic_writer(std::string_view op, const std::filesystem::path& path) : op_(op), path_(path) {
    namespace fs = std::filesystem;
    if (path.empty()) fail("the path is empty");
    std::error_code ec;
    target_ = path;
    if (fs::is_symlink(path, ec)) {
      fs::path real = fs::canonical(path, ec);
      if (!ec) target_ = std::move(real);
    }
    if (!target_.has_filename()) fail("names a directory (it ends in a separator), not a file");
    dir_ = target_.parent_path();
    check_directory();
    struct stat st {};
    const bool exists = ::stat(target_.c_str(), &st) == 0;
    if (!exists && errno != ENOENT) fail_errno("cannot access the file", errno);
    if (exists && S_ISDIR(st.st_mode)) fail("is a directory");
    if (exists && !S_ISREG(st.st_mode))
      fail("exists and is not a regular file (it is ", file_kind_of(st.st_mode),
           "); refusing to replace it");

    static std::atomic<uint64_t> counter{0};
    const auto tick =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    // The static's address differs between processes (ASLR), the counter within one.
    const auto salt = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&counter));
    tmp_ = target_;
    tmp_ += ".tmp-" + std::to_string(tick ^ (salt << 16)) + "-" + std::to_string(counter++);
    // Replacing a file: private until it has the target's owner and mode (below); new: as
    // open(2) would create the target.
    const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                          exists ? S_IRUSR | S_IWUSR : 0666);
    if (fd < 0) fail_errno("cannot create a file in " + dir_name(), errno);
    created_ = true;
    f_ = ::fdopen(fd, "wb");
    if (!f_) {
      const int e = errno;
      ::close(fd);
      fail_errno("cannot open for writing", e);
    }
    if (exists) {
      // The owner where we may set it (root; or a group we are in), silently not otherwise;
      // before the mode, which chown may clear set-id bits of.
      if ((st.st_uid != ::geteuid() || st.st_gid != ::getegid()) &&
          ::fchown(fd, st.st_uid, st.st_gid) != 0) {
      }
      if (::fchmod(fd, st.st_mode & 07777) != 0)
        fail_errno("cannot give the new file the permissions of the old one", errno);
    }
  }
  atomic_writer(const atomic_writer&) = delete;
  atomic_writer& operator=(const atomic_writer&) = delete;
  ~atomic_writer() {
    if (f_) std::fclose(f_);
    if (created_ && !committed_) ::unlink(tmp_.c_str());
  }

  uint64_t written() const { return written_; }
  void write(const void* p, size_t n) {
    if (n == 0) return;
    errno = 0;
    if (std::fwrite(p, 1, n, f_) != n)
      fail("write failed after ", written_, " bytes (", errno ? std::strerror(errno) : "?", ")");
    written_ += n;
  }
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Flushes, syncs and closes the file, moves it into place and syncs the directory.
  void commit() {
    errno = 0;
    const bool flushed = std::fflush(f_) == 0 && !std::ferror(f_);
    int e = errno;
    const bool synced = flushed && ::fsync(::fileno(f_)) == 0;
    if (flushed && !synced) e = errno;
    errno = 0;
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!flushed || !closed)
      fail("write failed (", e ? std::strerror(e) : errno ? std::strerror(errno) : "?", ")");
    if (!synced) fail_errno("cannot sync the written file to disk", e);
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
      fail_errno("cannot move the written file into place", errno);
    committed_ = true;
    // Without this a power cut may lose the rename: the old file, or no file, comes back.
    // EINVAL: a file system that cannot sync a directory (nothing to do there).
    const int dfd = ::open(dir_or_dot().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail_errno("was written, but its directory cannot be opened to sync it", errno);
    const bool dir_synced = ::fsync(dfd) == 0 || errno == EINVAL;
    e = errno;
    ::close(dfd);
    if (!dir_synced) fail_errno("was written, but syncing its directory failed", e);
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) {
    fail_at(where{op_, path_}, parts...);
  }
  [[noreturn]] void fail_errno(const std::string& what, int e) {
    fail(what, " (", std::strerror(e), ")");
  }
  std::filesystem::path dir_or_dot() const { return dir_.empty() ? "." : dir_; }
  std::string dir_name() const { return "the directory '" + dir_or_dot().string() + "'"; }
  // The target's directory must exist and be one.
  void check_directory() {
    struct stat st {};
    if (::stat(dir_or_dot().c_str(), &st) != 0) {
      const int e = errno;
      if (e == ENOENT) fail(dir_name(), " does not exist");
      fail_errno("cannot access " + dir_name(), e);
    }
    if (!S_ISDIR(st.st_mode)) fail("'", dir_.string(), "' is not a directory");
  }

  std::string_view op_;
  const std::filesystem::path& path_;
  std::filesystem::path target_, dir_, tmp_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0;
  bool created_ = false, committed_ = false;
};

}  // namespace detail::io_file
TESSERA_END_NAMESPACE
