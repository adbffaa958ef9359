#include "model/slim.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/generate.h"
#include "model/test_archs.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

Decoder Make(const Arch& a, torch::Dtype dtype, uint64_t seed = 1) {
  auto d = Decoder::Create(a, seed, dtype);
  EXPECT_TRUE(d.ok()) << d.status();
  return *std::move(d);
}

// Random weights at N(0, 0.02) give near-uniform next-token distributions;
// scaling the embedding makes the greedy choice depend on the whole model.
void Sharpen(Decoder& d) {
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : d.NamedTensors()) {
    if (name.find("embed_tokens") != std::string::npos || name.find("lm_head") != std::string::npos)
      t.mul_(25);
  }
}

torch::Tensor& Tensor(Decoder& d, const std::string& name) {
  static torch::Tensor missing;
  for (auto& [n, t] : d.NamedTensors()) {
    if (n == name) {
      missing = t;
      return missing;
    }
  }
  ADD_FAILURE() << "no tensor " << name;
  return missing;
}

std::vector<int64_t> Prompt(int64_t n, int64_t vocab) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 7 + 3) % vocab);
  return p;
}

TEST(SlimKvWeightTest, ValuesFollowFromKeys) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  auto wk = torch::randn({16, 16}, gen, torch::kDouble);
  auto wv = torch::randn({16, 16}, gen, torch::kDouble);
  ASSERT_OK_AND_ASSIGN(torch::Tensor wkv, SlimKvWeight(wk, wv));
  auto x = torch::randn({7, 16}, gen, torch::kDouble);
  auto k = torch::matmul(x, wk.t());
  EXPECT_TRUE(torch::allclose(torch::matmul(k, wkv.t()), torch::matmul(x, wv.t()), 0, 1e-9));
}

TEST(SlimTest, LogitsEqualTheStandardModelOnEveryPath) {
  Decoder standard = Make(TinyMhaArch(), torch::kDouble);
  SlimReport report;
  ASSERT_OK_AND_ASSIGN(Decoder slim, ConvertToSlim(standard, SlimOptions{}, &report));
  EXPECT_EQ(slim.arch().kv_cache, KvLayout::kSlim);
  ASSERT_EQ(report.layers.size(), 3u);  // skip layer 2 has no attention
  for (const auto& l : report.layers) {
    EXPECT_GT(l.condition, 1);
    EXPECT_LT(l.relative_error, 1e-4);  // W_KV rounded to float32
  }
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto tokens = torch::randint(50, {2, 13}, gen, torch::kLong);
  auto want = standard.Forward(tokens);
  EXPECT_TRUE(torch::allclose(slim.Forward(tokens), want, 0, 1e-10));
  // Chunked prefill (Option 1 over chunks) and single-token decode (Option 2).
  for (int64_t chunk : {1, 4, 13}) {
    KvCache cache = slim.NewCache(2, 13);
    std::vector<torch::Tensor> parts;
    for (int64_t p = 0; p < 13; p += chunk) {
      parts.push_back(slim.ForwardCached(tokens.narrow(1, p, std::min<int64_t>(chunk, 13 - p)),
                                         cache, /*last_only=*/false));
    }
    EXPECT_TRUE(torch::allclose(torch::cat(parts, 1), want, 0, 1e-10)) << "chunk " << chunk;
  }
}

TEST(SlimTest, CacheBytesAreExactlyHalved) {
  Decoder standard = Make(TinyMhaArch(), torch::kFloat);
  ASSERT_OK_AND_ASSIGN(Decoder slim, ConvertToSlim(standard, SlimOptions{}));
  for (int64_t capacity : {1, 300, 4096}) {
    const int64_t full = standard.NewCache(1, capacity).bytes();
    EXPECT_EQ(slim.NewCache(1, capacity).bytes() * 2, full);
  }
}

TEST(SlimTest, GreedyGenerationsIdenticalOver256Tokens) {
  for (torch::Dtype dtype : {torch::kDouble, torch::kFloat}) {
    Decoder standard = Make(TinyMhaArch(), dtype, 7);
    Sharpen(standard);
    ASSERT_OK_AND_ASSIGN(Decoder slim, ConvertToSlim(standard, SlimOptions{}));
    GenerateOptions o;
    o.max_new_tokens = 256;
    o.prefill_chunk = 8;
    ASSERT_OK_AND_ASSIGN(Generation a, GreedyGenerate(standard, Prompt(20, 50), o));
    ASSERT_OK_AND_ASSIGN(Generation b, GreedyGenerate(slim, Prompt(20, 50), o));
    EXPECT_EQ(a.tokens, b.tokens) << "dtype " << dtype;
    EXPECT_EQ(b.stats.kv_cache_bytes * 2, a.stats.kv_cache_bytes);
    // Not a degenerate repetition of one token.
    EXPECT_GT(std::set<int64_t>(a.tokens.begin(), a.tokens.end()).size(), 5u);
  }
}

TEST(SlimTest, RefusesGroupedQueryAttention) {
  Decoder gqa = Make(TinyMixedArch(), torch::kFloat);
  EXPECT_THAT(ConvertToSlim(gqa, SlimOptions{}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("4 query heads share 2 key/value heads (GQA)")));
  Arch wide = TinyMhaArch();
  wide.head_dim = 16;  // 4 x 16 = 64 != d_model 32
  EXPECT_THAT(ConvertToSlim(Make(wide, torch::kFloat), SlimOptions{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("64 != d_model 32")));
  ASSERT_OK_AND_ASSIGN(Decoder slim, ConvertToSlim(Make(TinyMhaArch(), torch::kFloat), {}));
  EXPECT_THAT(ConvertToSlim(slim, SlimOptions{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already has kv_cache SLIM")));
}

TEST(SlimTest, RefusesSingularAndIllConditionedKeys) {
  torch::NoGradGuard no_grad;
  Decoder singular = Make(TinyMhaArch(), torch::kFloat);
  Tensor(singular, "model.layers.3.self_attn.k_proj.weight")[5].zero_();
  EXPECT_THAT(
      ConvertToSlim(singular, SlimOptions{}),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("layer 3: W_K is singular")));
  Decoder ill = Make(TinyMhaArch(), torch::kFloat);
  Tensor(ill, "model.layers.1.self_attn.k_proj.weight")[2].mul_(1e-6);
  EXPECT_THAT(
      ConvertToSlim(ill, SlimOptions{}),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("layer 1: W_K condition number")));
  SlimOptions loose;
  loose.max_condition = 1e9;
  loose.max_relative_error = 1;
  EXPECT_OK(ConvertToSlim(ill, loose).status());
}

TEST(SlimTest, ChecksTheStorageDtypeRange) {
  torch::NoGradGuard no_grad;
  Decoder d = Make(TinyMhaArch(), torch::kFloat);
  Tensor(d, "model.layers.0.self_attn.v_proj.weight").mul_(1e6);
  SlimOptions f16;
  f16.storage = StorageDtype::kF16;
  EXPECT_THAT(ConvertToSlim(d, f16), StatusIs(absl::StatusCode::kFailedPrecondition,
                                              HasSubstr("layer 0: W_KV entries reach")));
  EXPECT_OK(ConvertToSlim(d, SlimOptions{}).status());  // f32 holds them
  SlimOptions bf16;
  bf16.storage = StorageDtype::kBF16;  // in range, but 8 bits of mantissa
  EXPECT_THAT(ConvertToSlim(Make(TinyMhaArch(), torch::kFloat), bf16),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("rounded to bfloat16")));
}

TEST(SlimTest, CheckpointRoundTrip) {
  Decoder standard = Make(TinyMhaArch(), torch::kFloat);
  ASSERT_OK_AND_ASSIGN(Decoder slim, ConvertToSlim(standard, SlimOptions{}));
  const std::string dir = ::testing::TempDir() + "/slim_ckpt";
  ASSERT_OK(SaveCheckpoint(slim, dir, StorageDtype::kF32));
  ASSERT_OK_AND_ASSIGN(Decoder loaded, LoadCheckpoint(dir));
  EXPECT_EQ(loaded.arch().kv_cache, KvLayout::kSlim);
  torch::NoGradGuard no_grad;
  auto tokens = torch::arange(0, 9, torch::kLong).view({1, 9});
  EXPECT_TRUE(torch::equal(loaded.Forward(tokens), slim.Forward(tokens)));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hilnas
