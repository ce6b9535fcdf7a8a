// Fuzz harness for the IDX reader (MNIST's format, gzip'd or plain). read_idx takes a path, so
// the input is written to an in-memory file (memfd) and read through /proc/self/fd. uint8 and
// float targets are tried, and the header alone. A tessera::error is the expected refusal; a
// crash, a sanitizer report or any other exception is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <tessera/io/idx.hpp>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = [] {
    const int f = memfd_create("fuzz_idx", 0);
    if (f < 0) std::abort();
    return f;
  }();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    std::abort();
  fuzz::refused_or_read([&] { (void)tessera::io::read_idx_header(path); });
  fuzz::refused_or_read([&] { fuzz::touch(tessera::io::read_idx<uint8_t>(path)); });
  fuzz::refused_or_read([&] { fuzz::touch(tessera::io::read_idx<float>(path)); });
  return 0;
}
