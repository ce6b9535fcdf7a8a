// tessera/dist.hpp - distributed training over MPI: process groups with collectives on tensors,
// DataParallel, and sharded batches (data/dataset.hpp). Link tessera::dist
// (find_package(tessera COMPONENTS dist)), which brings MPI. Guide: docs/distributed.md.
#pragma once

#include "dist/data_parallel.hpp"
#include "dist/parallel_linear.hpp"
#include "dist/process_group.hpp"
