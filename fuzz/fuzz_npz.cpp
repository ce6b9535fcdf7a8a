// Fuzz harness for the .npz reader: the input is a whole ZIP archive, read from memory by the
// reader load_npz uses (central directory, local headers, stored and deflated members, each
// member's .npy bytes). float and int64 archives are tried. A tessera::error is the expected
// refusal; a crash, a sanitizer report or any other exception is a finding.
#include <cstdint>
#include <tessera/io/npy.hpp>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace npy = tessera::detail::npy;
  const std::filesystem::path path = "fuzz.npz";
  const npy::where w{"load_npz", path};
  auto read = [&]<class T>() {
    fuzz::refused_or_read([&] {
      npy::memory_source src(data, size);
      for (const auto& [name, t] : npy::read_npz<T>(w, src)) fuzz::touch(t);
    });
  };
  read.template operator()<float>();
  read.template operator()<int64_t>();
  return 0;
}
