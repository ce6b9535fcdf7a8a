// nn::MultiheadAttention and nn::TransformerEncoderLayer: against PyTorch 1.13's
// TransformerEncoderLayer (float64, weights from a formula, reference values generated once with
// the script in the comment below), through gradcheck, and on bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <tessera/nn.hpp>
#include <tessera/nn/transformer.hpp>

#include "test_util.hpp"

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_transformer {

namespace ts = tessera;
using ts::cpu;
using ts::Tensor;
using V = ts::Variable<double, cpu>;

// Generated with torch 1.13 (float64, eval mode):
//   layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu",
//                                            batch_first=True)
//   parameter number pi (named_parameters order), element i: 0.3 * sin(0.37 i + 1.3 pi)
//   x[b, t, c] = cos(0.11 (b * 40 + t * 8 + c)), x of shape [2, 5, 8]
//   masked: layer(x, src_key_padding_mask=pad) with pad[1, 3:] = True
//   causal: layer(x, src_mask=torch.triu(torch.ones(5, 5, dtype=torch.bool), 1))
const double kMasked[] = {
    0.147093961183,  0.382335182989,  -0.041201510880, 0.635283036901,  -0.176293342545,
    0.086693739152,  -0.187286768886, -0.313364270622, 0.100971551103,  0.260984621339,
    0.035049906170,  0.599686746977,  -0.000279362001, 0.120099016866,  -0.180592895020,
    -0.315019095250, 0.119372598406,  0.010731558075,  0.284428726503,  0.512752264434,
    0.150182199146,  0.106525450732,  -0.191401014068, -0.314829376682, 0.248934031208,
    -0.119233528977, 0.607779579573,  0.501151006976,  -0.081316497010, -0.061991230667,
    -0.251222111278, -0.299612580202, 0.391401360032,  0.161258424883,  0.559920613610,
    0.493266486099,  -0.509703619292, -0.226271961857, -0.292818404421, -0.288807180815,
    0.468082313723,  0.125757593877,  0.679426132449,  0.024717920456,  -0.282627539369,
    -0.371676496171, -0.308478340621, -0.266394146782, 0.474783228192,  0.161171311742,
    0.596327551303,  0.243120483049,  -0.467919826117, -0.291511872219, -0.290514543283,
    -0.282994708187, 0.306359684634,  -0.113231304083, 0.465941008081,  0.484900360139,
    -0.140160666972, 0.049565974948,  -0.198066340612, -0.320008938234, 0.174904601537,
    -0.120752115931, 0.391866199592,  0.323404272368,  0.247166190186,  0.088311127193,
    -0.182236628750, -0.311893665783, 0.209702564497,  -0.168863740337, 0.506085444317,
    0.193458010283,  0.298497186179,  0.011858846309,  -0.204356914767, -0.302021189529};
const double kCausal[] = {
    0.360772183057,  -0.204301721128, 0.620852264493,  0.002405349212,  0.156304067663,
    -0.097351328665, -0.218500092715, -0.292387524837, 0.150159712147,  -0.071770320779,
    0.332591443491,  0.392771860438,  0.220605374265,  0.110369274003,  -0.179002307141,
    -0.314496745195, 0.128581631112,  -0.030106896818, 0.330772832450,  0.471186041078,
    0.182945981999,  0.094753824873,  -0.194090252984, -0.313341096651, 0.243194855369,
    -0.113853039832, 0.610273438711,  0.507348422582,  -0.080050206664, -0.066688733198,
    -0.253588326098, -0.298766033439, 0.391401360032,  0.161258424883,  0.559920613610,
    0.493266486099,  -0.509703619292, -0.226271961857, -0.292818404421, -0.288807180815,
    0.420856872091,  0.344644194624,  0.494318669388,  0.353648017187,  -0.555067901821,
    -0.331217773438, -0.311836083546, -0.275459376213, 0.472517290844,  0.171089836118,
    0.578887689856,  0.271609042578,  -0.488084004966, -0.280414000095, -0.288269207942,
    -0.284880232018, 0.306359684634,  -0.113231304083, 0.465941008081,  0.484900360139,
    -0.140160666972, 0.049565974948,  -0.198066340612, -0.320008938234, 0.163246108162,
    -0.093399800668, 0.353161961306,  0.373396764804,  0.220015937421,  0.106488172927,
    -0.178616943449, -0.314389674447, 0.147074144754,  -0.084130718293, 0.385135768403,
    0.385995783932,  0.236928171615,  0.078723389015,  -0.194304220678, -0.310795242753};

TEST(TransformerEncoderLayer, MatchesPyTorch) {
  ts::nn::TransformerEncoderLayer<double, cpu> layer(8, 2, 16, 0.0, ts::nn::Activation::gelu);
  layer.eval();
  const std::vector<std::string> names = {"self_attn.in_proj_weight",
                                          "self_attn.in_proj_bias",
                                          "self_attn.out_proj.weight",
                                          "self_attn.out_proj.bias",
                                          "linear1.weight",
                                          "linear1.bias",
                                          "linear2.weight",
                                          "linear2.bias",
                                          "norm1.weight",
                                          "norm1.bias",
                                          "norm2.weight",
                                          "norm2.bias"};
  const auto params = layer.named_parameters();
  ASSERT_EQ(params.size(), names.size());
  for (size_t pi = 0; pi < names.size(); ++pi) {
    ASSERT_EQ(params[pi].first, names[pi]);
    const Tensor<double, cpu>& p = params[pi].second.value();
    std::vector<double> vals(static_cast<size_t>(p.numel()));
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = 0.3 * std::sin(0.37 * i + 1.3 * pi);
    p.copy_(ts::from_vector<double>(vals, p.shape()));
  }
  std::vector<double> xs(80);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::cos(0.11 * i);
  const V x(ts::from_vector<double>(xs, {2, 5, 8}));
  auto pad = ts::zeros<bool>({2, 5});
  pad.slice(0, 1, 2).slice(1, 3, 5).fill_(true);
  const auto masked = tt::to_doubles(layer.forward(x, pad).value());
  const auto causal = tt::to_doubles(layer.forward(x, {}, true).value());
  for (size_t i = 0; i < 80; ++i) {
    EXPECT_NEAR(masked[i], kMasked[i], 1e-9) << "masked, element " << i;
    EXPECT_NEAR(causal[i], kCausal[i], 1e-9) << "causal, element " << i;
  }
}

TEST(MultiheadAttention, GradientsThroughSelfAndCrossAttention) {
  ts::nn::MultiheadAttention<double, cpu> mha(6, 3);
  ts::Generator g(3);
  const auto x = ts::rand<double>({2, 4, 6}, g, -1, 1), m = ts::rand<double>({2, 7, 6}, g, -1, 1);
  auto pad = ts::zeros<bool>({2, 7});
  pad.slice(1, 5, 7).fill_(true);
  using Vs = std::vector<V>;
  auto r = ts::gradcheck([&](const Vs& v) { return mha.forward(v[0]); }, {x});
  EXPECT_TRUE(r.ok) << "self: " << r.message;
  r = ts::gradcheck([&](const Vs& v) { return mha.forward(v[0], v[1], v[1], pad); }, {x, m});
  EXPECT_TRUE(r.ok) << "cross, padded: " << r.message;
  // The weights' gradients too: the module's output against its in_proj_weight.
  const Tensor<double, cpu> w0 = mha.in_proj_weight.value().clone();
  r = ts::gradcheck(
      [&](const Vs& v) {
        mha.in_proj_weight = v[0];
        return mha.forward(V(x), V(m), V(m), pad, false);
      },
      {w0});
  EXPECT_TRUE(r.ok) << "in_proj_weight: " << r.message;
}

TEST(MultiheadAttention, SelfAttentionEqualsTheThreeProjections) {
  ts::nn::MultiheadAttention<double, cpu> mha(8, 2);
  ts::Generator g(5);
  const auto x = ts::rand<double>({3, 6, 8}, g, -1, 1);
  const V a(x), b(x.clone()), c(x.clone());
  tt::expect_close(tt::to_doubles(mha.forward(a).value()),
                   tt::to_doubles(mha.forward(a, b, c).value()), 1e-12, "one GEMM vs three");
}

TEST(MultiheadAttention, BadInputNamesTheModule) {
  EXPECT_THROW((ts::nn::MultiheadAttention<float, cpu>(10, 3)), ts::shape_error);
  ts::nn::MultiheadAttention<float, cpu> mha(8, 2);
  ts::Generator g(1);
  const ts::Variable<float, cpu> x(ts::rand<float>({2, 4, 8}, g)), y(ts::rand<float>({2, 4, 6}, g));
  EXPECT_THROW((void)mha.forward(y), ts::shape_error);
  try {
    (void)mha.forward(x, x, x, ts::zeros<bool>({2, 5}));
    ADD_FAILURE() << "no error for a [2, 5] mask";
  } catch (const ts::shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("key_padding_mask"), std::string::npos) << e.what();
  }
}

}  // namespace test_transformer
