// tessera/autograd.hpp - reverse-mode differentiation: Variable, no_grad, the Variable overload
// of every differentiable op, and gradcheck, on top of
// the CPU umbrella <tessera/tessera.hpp> (which does not include this one).
#pragma once

// clang-format off
#include "tessera.hpp"
#include "autograd/variable.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/reduce.hpp"
#include "autograd/shape.hpp"
#include "autograd/linalg.hpp"
#include "autograd/embedding.hpp"
#include "autograd/attention.hpp"
#include "autograd/conv.hpp"
#include "autograd/loss.hpp"
#include "autograd/gradcheck.hpp"
// clang-format on
