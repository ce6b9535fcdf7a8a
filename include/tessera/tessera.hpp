// tessera/tessera.hpp - the umbrella header for CPU users (includes no CUDA headers).
#pragma once

// Layer order: core types, then the CPU backend's specialisations (which must be declared before
// any op instantiates them), then the ops.
// clang-format off
#include "config.hpp"
#include "core/dtype.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "backend/cpu/memory.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/loss.hpp"
#include "ops/tensor_copy.hpp"
#include "ops/creation.hpp"
#include "ops/elementwise.hpp"
#include "ops/reduce.hpp"
#include "ops/matmul.hpp"
#include "ops/conv.hpp"
#include "ops/pool.hpp"
#include "ops/join.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/embedding.hpp"
#include "ops/loss.hpp"
#include "ops/optim_step.hpp"
#include "io/print.hpp"
// clang-format on

// The training stack has umbrellas of its own, so that tensor-only code does not compile it:
// <tessera/autograd.hpp>, <tessera/nn.hpp>, <tessera/optim.hpp>, <tessera/data/fashion_mnist.hpp>,
// <tessera/nn/checkpoint.hpp>.
