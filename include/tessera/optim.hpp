// tessera/optim.hpp - optimizers, learning-rate schedules and gradient clipping.
#pragma once

// clang-format off
#include "tessera.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
// clang-format on
