// tessera/kernel/optim_problem.hpp - what the ops layer hands a backend's optim_kernel<B>: one
// SGD or Adam update of n contiguous elements, every option already checked and folded into
// coefficients of T.
#pragma once

#include <cstdint>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// One SGD update of n contiguous elements, as the ops layer hands it to a backend's
/// optim_kernel<B>::sgd: pointers are device pointers for device backends; coefficients are in T.
template <class T>
struct sgd_problem {
  T* param;
  const T* grad;
  T* momentum_buffer;  // null when momentum == 0
  int64_t n;
  T lr, momentum, one_minus_dampening, weight_decay;
  T grad_sign;  // -1 with maximize, else 1
  bool nesterov, first_step;
};

/// One Adam / AdamW update of n contiguous elements (optim_kernel<B>::adam). Bias corrections
/// are folded into step_size = lr / (1 - beta1^step) and inv_sqrt_bias_correction2 =
/// 1 / sqrt(1 - beta2^step), computed in double.
template <class T>
struct adam_problem {
  T* param;
  const T* grad;
  T* exp_avg;
  T* exp_avg_sq;
  T* max_exp_avg_sq;  // null unless amsgrad
  int64_t n;
  T grad_sign;     // -1 with maximize, else 1
  T weight_decay;  // Adam's L2 term; 0 for AdamW
  T param_decay;   // AdamW's 1 - lr * weight_decay; 1 for Adam
  T beta1, beta2, one_minus_beta1, one_minus_beta2, eps, step_size, inv_sqrt_bias_correction2;
  bool amsgrad;
};

}  // namespace detail
TESSERA_END_NAMESPACE
