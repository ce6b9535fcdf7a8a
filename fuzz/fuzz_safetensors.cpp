// Fuzz harness for the safetensors reader. The input is written to an in-memory file (memfd)
// and opened through /proc/self/fd, copied and memory-mapped; every tensor the header lists is
// then read as the type of its dtype. A tessera::error is the expected refusal; a crash, a
// sanitizer report or any other exception is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <tessera/io/safetensors.hpp>

#include "harness.hpp"

namespace {
namespace ts = tessera;

void read_all(const std::string& path, ts::io::safetensors_mode mode) {
  const auto f = ts::io::safetensors_file::open(path, mode);
  for (const std::string& n : f.names()) {
    const std::string_view d = f.dtype_name(n);
    fuzz::refused_or_read([&] {
      if (d == "F64")
        fuzz::touch(f.get<double>(n));
      else if (d == "F32")
        fuzz::touch(f.get<float>(n));
      else if (d == "F16")
        fuzz::touch(f.get<ts::half>(n));
      else if (d == "BF16")
        fuzz::touch(f.get<ts::bfloat16>(n));
      else if (d == "F8_E4M3")
        fuzz::touch(f.get<ts::float8_e4m3>(n));
      else if (d == "F8_E5M2")
        fuzz::touch(f.get<ts::float8_e5m2>(n));
      else if (d == "I64")
        fuzz::touch(f.get<int64_t>(n));
      else if (d == "I32")
        fuzz::touch(f.get<int32_t>(n));
      else if (d == "I8")
        fuzz::touch(f.get<int8_t>(n));
      else if (d == "U8")
        fuzz::touch(f.get<uint8_t>(n));
      else if (d == "BOOL")
        fuzz::touch(f.get<bool>(n));
      else
        fuzz::touch(f.get<float>(n));  // a dtype without a tessera type: refused
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = [] {
    const int f = memfd_create("fuzz_safetensors", 0);
    if (f < 0) std::abort();
    return f;
  }();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    std::abort();
  fuzz::refused_or_read([&] { read_all(path, ts::io::safetensors_mode::copy); });
  fuzz::refused_or_read([&] { read_all(path, ts::io::safetensors_mode::map); });
  return 0;
}
