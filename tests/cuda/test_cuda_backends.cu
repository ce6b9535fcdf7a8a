// The backend-generic suite (tests/backend_suite.hpp) on CUDA tensors; it skips without a GPU.
#include "../backend_suite.hpp"
#include "cuda_test_util.cuh"

namespace backend_suite {
template <>
std::string backend_unavailable<ts::cuda>() {
  const std::string why = cuda_test::no_gpu_reason();
  return why.empty() ? why : "no CUDA device visible (" + why + ")";
}
using Backends = ::testing::Types<ts::cuda>;
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, BackendSuite, Backends);
}  // namespace backend_suite
