// tessera/nn.hpp - modules (layers, Sequential), initialization and losses; also the autograd
// layer they are built on.
#pragma once

// clang-format off
#include "autograd.hpp"
#include "nn/init.hpp"
#include "nn/module.hpp"
#include "nn/layers.hpp"
#include "nn/norm.hpp"
#include "nn/transformer.hpp"
// clang-format on
