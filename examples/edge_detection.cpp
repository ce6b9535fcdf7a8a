// edge_detection - Sobel edge detection on a Fashion-MNIST test image with one ts::conv2d call.
//
//   edge_detection [INDEX] [OUTPUT]
//
// Loads test image INDEX (default 0), convolves it with the two 3x3 Sobel kernels at once (a
// [2, 1, 3, 3] weight: output channel 0 is the horizontal gradient, channel 1 the vertical one),
// takes the gradient magnitude sqrt(gx^2 + gy^2), and writes OUTPUT (default edge.pgm), a
// binary PGM showing the original and its edges side by side. The data folder is
// $TESSERA_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <tessera/data/fashion_mnist.hpp>
#include <tessera/tessera.hpp>

namespace ts = tessera;

// Pixels in [0, 1] -> bytes 0..255.
ts::Tensor<uint8_t, ts::cpu> to_bytes(const ts::Tensor<float, ts::cpu>& x) {
  return ts::round(ts::clamp(x * 255.0f, 0.0, 255.0)).astype<uint8_t>();
}

int main(int argc, char** argv) {
  char* end = nullptr;
  const int64_t index = argc > 1 ? std::strtoll(argv[1], &end, 10) : 0;
  if (argc > 3 || (argc > 1 && (end == argv[1] || *end != '\0'))) {
    std::cerr << "usage: edge_detection [INDEX] [OUTPUT]  (test image INDEX, default 0; "
                 "OUTPUT default edge.pgm)\n";
    return 2;
  }
  const std::string output = argc > 2 ? argv[2] : "edge.pgm";
  try {
    // Pixels scaled to [0, 1], not standardised: that is what we want to look at.
    const auto test = ts::data::fashion_mnist("test", {}, /*normalize=*/false);
    if (index < 0 || index >= test.size()) {
      std::cerr << "edge_detection: index " << index << " is not in 0.." << test.size() - 1 << "\n";
      return 2;
    }
    const auto image = test.images.slice(0, index, index + 1);  // [1, 1, 28, 28]

    // The two Sobel kernels as one weight [out channels 2, in channels 1, 3, 3].
    const auto sobel = ts::from_vector<float, ts::cpu>({-1, 0, 1, -2, 0, 2, -1, 0, 1,   // d/dx
                                                        -1, -2, -1, 0, 0, 0, 1, 2, 1},  // d/dy
                                                       {2, 1, 3, 3});
    const auto grad = ts::conv2d(image, sobel, {.padding = {1, 1}});  // [1, 2, 28, 28]
    const auto gx = grad.select(1, 0), gy = grad.select(1, 1);        // [1, 28, 28] each
    const auto magnitude = ts::sqrt(gx * gx + gy * gy);
    const auto edges = magnitude / std::max(ts::max(magnitude).item(), 1e-6f);  // to [0, 1]

    // Original | edges, one 28 x 56 canvas.
    auto canvas = ts::empty<uint8_t, ts::cpu>({28, 56});
    canvas.slice(1, 0, 28).copy_(to_bytes(image.view({28, 28})));
    canvas.slice(1, 28, 56).copy_(to_bytes(edges.view({28, 28})));

    std::ofstream out(output, std::ios::binary);
    out << "P5\n56 28\n255\n";
    out.write(reinterpret_cast<const char*>(canvas.data()), canvas.numel());
    if (!out.flush()) {
      std::cerr << "edge_detection: cannot write " << output << "\n";
      return 1;
    }
    std::cout << "wrote " << output << ": 56x28 PGM, test image " << index << " (label "
              << test.labels(index) << ") | its Sobel gradient magnitude (max "
              << ts::max(magnitude).item() << ")\n";
  } catch (const ts::error& e) {
    std::cerr << "edge_detection: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
