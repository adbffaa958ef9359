#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "model/gemv.h"
#include "model/internal/decoder_layers.h"
#include "model/quant.h"

namespace hilnas {
namespace {

using decoder_internal::Project;
using decoder_internal::ProjectMany;
using decoder_internal::ToCacheForm;
using decoder_internal::WriteCacheRows;

// The vector conversions (F16C, NEON) round as c10::Half does, value for
// value: ties, subnormals, overflow to infinity, signed zeros, and a tail
// shorter than a vector. (Run under the avx2 and portable caps too:
// model_test_avx2, model_test_portable.)
TEST(NarrowToHalvesTest, RoundsEveryValueAsC10Half) {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -2.5f,
                          65504.0f,
                          65520.0f,  // rounds up past the largest half: infinity
                          1e6f,
                          -1e6f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          6.0e-8f,  // the smallest subnormal half
                          3.0e-8f,
                          1.0e-5f,  // subnormal in half
                          -7.3e-6f,
                          1.0f + 1.0f / 2048,  // a tie between two halves: to even
                          1.0f + 3.0f / 2048,
                          std::ldexp(1.0f, -24) * 1.5f};
  torch::manual_seed(11);
  const torch::Tensor r = torch::randn({203}) * 300;
  for (int64_t i = 0; i < r.numel(); ++i) x.push_back(r[i].item<float>());
  std::vector<uint16_t> out(x.size() + 1, 0xABCD);
  NarrowToHalves(x.data(), static_cast<int64_t>(x.size()), out.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(out[i], c10::Half(x[i]).x) << "x[" << i << "] = " << x[i];
  }
  EXPECT_EQ(out.back(), 0xABCD) << "wrote past n";
}

// A prompt's keys and values go into a full layer's cache in one pass, the
// same bits as ToCacheForm and ATen's copy gave: f32, f16 and Q8_0 caches,
// transposed inputs (a prompt's [B, T, KVH, hd] viewed as [B, KVH, T, hd]),
// rows after a cached prefix; positions outside the chunk untouched. 4200
// rows: two shares of at least 1 MiB of f32 on two threads.
TEST(WriteCacheRowsTest, WritesTheBitsToCacheFormAndACopyWrite) {
  torch::NoGradGuard no_grad;
  const int saved_threads = at::get_num_threads();
  at::set_num_threads(2);
  torch::manual_seed(5);
  const int64_t b = 2, kvh = 3, t = 700, hd = 64, capacity = 720, start = 13;
  const torch::Tensor x = (torch::randn({b, t, kvh, hd}) * 4).transpose(1, 2);
  ASSERT_FALSE(x.is_contiguous());
  for (torch::Dtype storage : {torch::kFloat, torch::kHalf, torch::kByte}) {
    const int64_t row = storage == torch::kByte ? hd / kQuantBlock * kQ8BlockBytes : hd;
    const torch::Tensor fill = torch::full({b, kvh, capacity, row}, 7, torch::kByte).to(storage);
    torch::Tensor want = fill.clone(), got = fill.clone();
    want.narrow(2, start, t).copy_(ToCacheForm(x, storage));
    ASSERT_TRUE(WriteCacheRows(x, got, start)) << storage;
    EXPECT_TRUE(torch::equal(got, want)) << storage;
  }
  at::set_num_threads(saved_threads);
}

TEST(WriteCacheRowsTest, DeclinesWhatItDoesNotWriteAndRefusesPositionsPastTheCache) {
  torch::manual_seed(6);
  torch::Tensor cache = torch::zeros({1, 2, 8, 64});
  const torch::Tensor x = torch::randn({1, 2, 4, 64});
  {
    torch::NoGradGuard no_grad;
    // Rows that are not contiguous along head_dim, and a bf16 cache.
    EXPECT_FALSE(WriteCacheRows(torch::randn({1, 2, 64, 4}).transpose(2, 3), cache, 0));
    torch::Tensor bf16 = torch::zeros({1, 2, 8, 64}, torch::kBFloat16);
    EXPECT_FALSE(WriteCacheRows(x, bf16, 0));
    EXPECT_TRUE(torch::equal(cache, torch::zeros_like(cache)));
    EXPECT_THROW(WriteCacheRows(x, cache, 5), c10::Error);  // positions 5..8 of 8
    EXPECT_THROW(WriteCacheRows(torch::randn({1, 3, 4, 64}), cache, 0), c10::Error);
    EXPECT_TRUE(WriteCacheRows(x, cache, 4));
  }
  // Training: autograd must see the copy.
  EXPECT_FALSE(WriteCacheRows(x, cache, 0));
}

// A decode step's SwiGLU row (exp in registers on AVX2 and NEON) against
// the double formula: within a few float roundings of each output where
// |gate| <= 20, and within 1e-6 of |gate * up| out to the clamps and past
// them (exp's argument held in [-87.3, 88]), at every tail length.
TEST(SwiGluRowTest, HoldsToTheDoubleFormulaOverTheWholeRange) {
  std::vector<float> gate, up;
  for (int i = 0; i <= 4000; ++i) gate.push_back(-20.0f + 0.01f * static_cast<float>(i));
  for (float g : {30.0f, 60.0f, 87.0f, 87.5f, 88.0f, 89.0f, 100.0f, 1e-30f, 0.0f, 1e30f}) {
    gate.push_back(g);
    gate.push_back(-g);
  }
  for (size_t i = 0; i < gate.size(); ++i) up.push_back(std::cos(static_cast<float>(i)) * 3.0f);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{13}, static_cast<int64_t>(gate.size())}) {
    const int64_t first = static_cast<int64_t>(gate.size()) - n;  // the clamp values included
    std::vector<float> out(static_cast<size_t>(n));
    decoder_internal::SwiGluRow(gate.data() + first, up.data() + first, n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[first + i], u = up[first + i];
      const double want = g / (1.0 + std::exp(-g)) * u;
      const double err = std::abs(out[i] - want);
      EXPECT_LE(err, 1e-6 * std::abs(g * u) + 1e-30) << "gate " << g << " n " << n;
      if (std::abs(g) <= 20) {
        EXPECT_LE(err, 6e-7 * std::abs(want) + 1e-37) << "gate " << g;
      }
    }
  }
}

// RMSNorm's row against the double formula at every width up to 70 (the
// sum runs in 16 lanes and a tail) and at 1027, and the same bits wherever
// the row starts: one order on every CPU, whatever the alignment.
TEST(RmsNormRowTest, HoldsToTheDoubleFormulaAtEveryTailLength) {
  std::vector<float> x, w;
  for (int i = 0; i < 1100; ++i) {
    x.push_back(std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 5)));
    w.push_back(0.5f + std::cos(0.11f * static_cast<float>(i)) * 0.25f);
  }
  std::vector<int64_t> widths = {1027};
  for (int64_t d = 1; d <= 70; ++d) widths.push_back(d);
  for (int64_t d : widths) {
    double sum = 0;
    for (int64_t i = 0; i < d; ++i) sum += static_cast<double>(x[i]) * x[i];
    const double scale = 1.0 / std::sqrt(sum / static_cast<double>(d) + 1e-5);
    std::vector<float> out(d), unit(d), moved(d);
    decoder_internal::RmsNormRow(x.data(), w.data(), d, 1e-5, out.data());
    decoder_internal::UnitRmsRow(x.data(), d, 1e-5, unit.data());
    std::vector<float> shifted(x.begin(), x.begin() + d);
    shifted.insert(shifted.begin(), 3, 0.0f);  // the same row, 12 bytes on
    decoder_internal::RmsNormRow(shifted.data() + 3, w.data(), d, 1e-5, moved.data());
    EXPECT_EQ(out, moved) << "d " << d;
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(out[i], x[i] * scale * w[i], 2e-6 * std::abs(x[i] * scale * w[i]) + 1e-7)
          << "d " << d << " i " << i;
      EXPECT_NEAR(unit[i], x[i] * scale, 2e-6 * std::abs(x[i] * scale) + 1e-7)
          << "d " << d << " i " << i;
    }
  }
}

// QK-norm and RoPE in one pass give the separate passes' bits, heads
// first, on one thread and on two; the pass declines what it cannot take.
TEST(NormRopeHeadsFirstTest, GivesTheSeparatePassesBitsHeadsFirst) {
  torch::NoGradGuard no_grad;
  const int64_t b = 2, t = 37, h = 3, hd = 64;
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({b, t, h, hd});
  const torch::Tensor w = torch::rand({hd}) + 0.5;
  const torch::Tensor angles = torch::rand({t, hd}) * 6.0;
  const torch::Tensor cos = angles.cos(), sin = angles.sin();
  const torch::Tensor separate =
      decoder_internal::ApplyRope(decoder_internal::InferenceRmsNorm(x, w, 1e-6),
                                  cos.view({1, t, 1, hd}), sin.view({1, t, 1, hd}))
          .transpose(1, 2)
          .contiguous();
  const int threads = at::get_num_threads();
  for (int n : {1, 2}) {
    at::set_num_threads(n);
    const torch::Tensor fused = decoder_internal::NormRopeHeadsFirst(x, w, 1e-6, cos, sin);
    EXPECT_TRUE(fused.is_contiguous());
    EXPECT_EQ(fused.sizes(), separate.sizes());
    EXPECT_TRUE(torch::equal(fused, separate)) << n << " threads";
  }
  at::set_num_threads(threads);
  EXPECT_FALSE(decoder_internal::NormRopeHeadsFirstApplies(x.transpose(1, 2), w, cos, sin));
  EXPECT_FALSE(decoder_internal::NormRopeHeadsFirstApplies(x.to(torch::kDouble), w, cos, sin));
  EXPECT_FALSE(decoder_internal::NormRopeHeadsFirstApplies(x, w.narrow(0, 0, 32), cos, sin));
  EXPECT_FALSE(decoder_internal::NormRopeHeadsFirstApplies(x, w, cos.narrow(0, 0, 5), sin));
  {
    torch::AutoGradMode grad(true);
    EXPECT_FALSE(decoder_internal::NormRopeHeadsFirstApplies(x, w, cos, sin));
  }
}

// Gemma's GeGLU row (GELU's tanh form, in vectors as 1 / (1 + exp(-2y)))
// against the double tanh formula, past the clamps and at tail lengths.
TEST(SwiGluRowTest, GeGluHoldsToTheDoubleTanhFormula) {
  std::vector<float> gate, up;
  for (int i = 0; i <= 4000; ++i) gate.push_back(-20.0f + 0.01f * static_cast<float>(i));
  for (float g : {30.0f, 100.0f, 1e-30f, 0.0f, 1e13f}) {
    gate.push_back(g);
    gate.push_back(-g);
  }
  for (size_t i = 0; i < gate.size(); ++i) up.push_back(std::sin(static_cast<float>(i)) * 3.0f);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{13}, static_cast<int64_t>(gate.size())}) {
    const int64_t first = static_cast<int64_t>(gate.size()) - n;
    std::vector<float> out(static_cast<size_t>(n));
    decoder_internal::GeGluRow(gate.data() + first, up.data() + first, n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[first + i], u = up[first + i];
      const double want =
          0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
      const double err = std::abs(out[i] - want);
      // (Scaled by |g * up| only: where 1 + tanh(y) nears 0 the portable
      // loop's float tanh loses the output's own digits, the vector form
      // does not.)
      EXPECT_LE(err, 1e-6 * std::abs(g * u) + 1e-30) << "gate " << g << " n " << n;
    }
  }
}

// A prompt through a layer's quantized q, k and v (or gate and up):
// ProjectMany quantizes the activations once for all of them and gives
// each product's bits as Project does alone, grouped Q4_0, row-form Q4_0
// and Q8_0 side by side.
TEST(ProjectManyTest, QuantizedPromptProductsAreEachProjectsBits) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({1, 13, 96});
  torch::Tensor q = QuantizeMatrix(torch::randn({64, 96}), QuantType::kQ4_0).value();
  ASSERT_TRUE(GroupQuantRows(q));
  const torch::Tensor k = QuantizeMatrix(torch::randn({20, 96}), QuantType::kQ4_0).value();
  const torch::Tensor v = QuantizeMatrix(torch::randn({20, 96}), QuantType::kQ8_0).value();
  const std::vector<torch::Tensor> many = ProjectMany(x, {q, k, v});
  ASSERT_EQ(many.size(), 3u);
  const torch::Tensor ws[3] = {q, k, v};
  for (int m = 0; m < 3; ++m) {
    const torch::Tensor one = Project(x, ws[m]);
    EXPECT_EQ(many[m].sizes(), one.sizes()) << m;
    EXPECT_TRUE(torch::equal(many[m], one)) << m;
  }
}

}  // namespace
}  // namespace hilnas
