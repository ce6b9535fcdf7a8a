// conv_shapes.hpp - the convolution shape set of the benchmarks (the convolution issue's: LeNet,
// ResNet, VGG, strided and depthwise layers), shared by bench_conv (CPU, against oneDNN and
// LibTorch) and bench_cuda_conv (CUDA, against cuDNN) so both measure the same layers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <tessera/kernel/winograd.hpp>
#include <tessera/ops/conv.hpp>
#include <vector>

namespace bench {
namespace ts = tessera;

struct conv_shape {
  std::string name;
  int64_t n, c, h, w;  // input [n, c, h, w]
  int64_t k, r, s;     // k filters of r x s
  int64_t stride, pad, groups;
  bool input_grad;  // false: a first layer, whose dx nobody needs

  int64_t ho() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t wo() const { return (w + 2 * pad - s) / stride + 1; }
  int64_t cg() const { return c / groups; }
  int64_t kg() const { return k / groups; }
  double flops() const { return 2.0 * static_cast<double>(n * k * cg() * r * s * ho() * wo()); }
  double flops_fwd_bwd() const { return flops() * (input_grad ? 3.0 : 2.0); }
  ts::Conv2dOptions opts() const {
    ts::Conv2dOptions o;
    o.stride = {stride, stride};
    o.padding = {pad, pad};
    o.groups = groups;
    return o;
  }
  /// Whether the library's Winograd F(4x4, 3x3) takes this layer (conv_algorithm::winograd).
  bool winograd() const {
    ts::detail::conv_geometry g;
    g.n = n, g.c = c, g.h = h, g.w = w, g.k = k, g.r = r, g.s = s, g.ho = ho(), g.wo = wo();
    g.stride_h = g.stride_w = stride, g.pad_top = g.pad_left = pad, g.groups = groups;
    return ts::detail::winograd_layer(g);
  }
  ts::Shape x_shape() const { return {n, c, h, w}; }
  ts::Shape w_shape() const { return {k, cg(), r, s}; }
  ts::Shape y_shape() const { return {n, k, ho(), wo()}; }
  std::string describe() const {
    std::string d;  // appends only: GCC 12 -O3 flags string operator+ chains with -Wrestrict
    const auto dims = [&d](std::initializer_list<int64_t> v) {
      d.append("[");
      for (auto it = v.begin(); it != v.end(); ++it)
        d.append(it == v.begin() ? "" : ",").append(std::to_string(*it));
      d.append("]");
    };
    dims({n, c, h, w});
    d.append(" * ");
    dims({k, cg(), r, s});
    d.append(" stride ").append(std::to_string(stride));
    d.append(" pad ").append(std::to_string(pad));
    if (groups > 1) d.append(" groups ").append(std::to_string(groups));
    d.append(" -> ");
    dims({n, k, ho(), wo()});
    if (!input_grad) d.append(" (no dx)");
    return d;
  }
};

const std::vector<conv_shape>& all_shapes() {
  static const std::vector<conv_shape> s = {
      {"lenet1", 64, 1, 28, 28, 32, 3, 3, 1, 1, 1, false},
      {"lenet2", 64, 32, 14, 14, 64, 3, 3, 1, 1, 1, true},
      {"resnet3x3", 8, 64, 56, 56, 64, 3, 3, 1, 1, 1, true},
      {"resnet14", 8, 256, 14, 14, 256, 3, 3, 1, 1, 1, true},
      {"resnet1x1", 8, 256, 56, 56, 64, 1, 1, 1, 0, 1, true},
      {"vgg112", 4, 128, 112, 112, 128, 3, 3, 1, 1, 1, true},
      {"stride2", 8, 128, 56, 56, 128, 3, 3, 2, 1, 1, true},
      {"depthwise", 8, 128, 56, 56, 128, 3, 3, 1, 1, 128, true},
  };
  return s;
}

}  // namespace bench
