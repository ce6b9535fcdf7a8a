// tests/test_backends.cpp - the backend-generic suite (backend_suite.hpp) on the CPU backend and
// on the user-defined backend of examples/counted_backend.hpp, which reuses the CPU kernels
// through the kernel families alone.
#include <tessera/tessera.hpp>

#include "../examples/counted_backend.hpp"
#include "backend_suite.hpp"

namespace backend_suite {
using Backends = ::testing::Types<ts::cpu, counted>;
INSTANTIATE_TYPED_TEST_SUITE_P(Host, BackendSuite, Backends);
}  // namespace backend_suite
