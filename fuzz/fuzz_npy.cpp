// Fuzz harness for the .npy reader: the input is a whole .npy file, read from memory by the
// reader load_npy uses. Every element type is tried (the stored dtype must match it exactly),
// so each dtype's conversion and byte-order path is reached. A tessera::error is the expected
// way to refuse bad input; a crash, a sanitizer report or any other exception is a finding.
#include <cstdint>
#include <tessera/io/npy.hpp>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace npy = tessera::detail::npy;
  const std::filesystem::path path = "fuzz.npy";
  const npy::where w{"load_npy", path};
  fuzz::for_each_type([&]<class T>() {
    fuzz::refused_or_read([&] {
      npy::memory_source src(data, size);
      const auto t = npy::read_array<T>(w, src);
      fuzz::touch(t);
    });
  });
  return 0;
}
