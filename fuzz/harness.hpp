// What the file-format fuzz harnesses share: how a read may end, and a pass over what was read.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <tessera/tessera.hpp>

namespace fuzz {

/// Runs read(): returning, or throwing a tessera::error (bad input refused), is fine; any other
/// exception is reported and aborts, so the fuzzer keeps the input.
template <class F>
void refused_or_read(F read) {
  try {
    read();
  } catch (const tessera::error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: unexpected exception: %s\n", e.what());
    std::abort();
  }
}

/// Reads every element of a tensor once, so that an allocation shorter than its shape, or
/// values never written, show up under AddressSanitizer / MemorySanitizer.
template <class T>
void touch(const tessera::Tensor<T, tessera::cpu>& t) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(t.data());
  unsigned sum = 0;
  for (size_t i = 0, n = static_cast<size_t>(t.numel()) * sizeof(T); i < n; ++i) sum += p[i];
  if (t.numel() < 0) std::abort();
  volatile unsigned sink = sum;
  (void)sink;
}

/// Calls f.template operator()<T>() for every element type tessera stores.
template <class F>
void for_each_type(F f) {
  f.template operator()<float>();
  f.template operator()<double>();
  f.template operator()<tessera::half>();
  f.template operator()<int8_t>();
  f.template operator()<uint8_t>();
  f.template operator()<int32_t>();
  f.template operator()<int64_t>();
  f.template operator()<bool>();
}

}  // namespace fuzz
