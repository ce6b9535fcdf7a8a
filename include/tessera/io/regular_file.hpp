// tessera/io/regular_file.hpp - opening a file for reading only when it is a regular file, so
// that the readers (npy, npz, IDX) never block on a FIFO or read a device.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// What a file that is not a regular one is, for messages ("a FIFO").
inline const char* file_kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "a file of another kind";
}

/// A descriptor open for reading and the file's size, or fd -1 and why not.
struct opened_file {
  int fd = -1;
  uint64_t size = 0;
  std::string error;
};

/// Opens path read-only when it is a regular file. It is opened with O_NONBLOCK, so that a FIFO
/// with no writer cannot block the open (the flag does nothing to a regular file's reads), and
/// checked with fstat; anything else is closed again and refused with the reason.
inline opened_file open_regular_file(const std::filesystem::path& path) {
  if (path.empty()) return {-1, 0, "the path is empty"};
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return {-1, 0,
            e == ENOENT ? "no such file" : "cannot open (" + std::string(std::strerror(e)) + ")"};
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return {-1, 0, "cannot stat the open file (" + std::string(std::strerror(e)) + ")"};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) return {-1, 0, "is a directory, not a file"};
    return {-1, 0, "is not a regular file (it is " + std::string(file_kind_of(st.st_mode)) + ")"};
  }
  return {fd, static_cast<uint64_t>(st.st_size), {}};
}

}  // namespace detail
TESSERA_END_NAMESPACE
