// GoogleTest under mpiexec: the world process group every rank's tests share, and a main that
// lets rank 0 print the usual report while the other ranks print only their failures.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <tessera/dist.hpp>

namespace mpi_gtest {

inline tessera::dist::ProcessGroup& world() {
  static tessera::dist::ProcessGroup pg = tessera::dist::init();
  return pg;
}

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.message());
  }

 private:
  int rank_;
};

/// Runs every test on every rank; the exit status is this rank's (mpiexec fails if any fails).
inline int run_all_tests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto& pg = world();
  if (pg.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(pg.rank()));
  }
  return RUN_ALL_TESTS();
}

}  // namespace mpi_gtest
