#include "pruner/prune.h"
#include "pruner/backbone.h"

#include <torch/torch.h>

#include <filesystem>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/test_archs.h"
#include "search_space/shapes.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::vector<int32_t> RandomTokens(int64_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = static_cast<int32_t>(rng() % vocab);
  return t;
}

struct Fixture {
  explicit Fixture(Arch a = TinyMixedArch()) : arch(a), model(*Decoder::Create(a, 7)) {
    CalibrationOptions o;
    o.seq_len = 16;
    o.batch_size = 4;
    metrics = *Calibrate(model, RandomTokens(256, arch.vocab_size, 1), o);
  }
  Arch arch;
  Decoder model;
  ActivationMetrics metrics;
};

std::map<std::string, torch::Tensor> Tensors(const Decoder& d) {
  std::map<std::string, torch::Tensor> m;
  for (auto& [n, t] : d.NamedTensors()) m[n] = t;
  return m;
}

TEST(PruneTest, NothingPrunedReproducesTheBackboneLogitsExactly) {
  Fixture f;
  ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(f.metrics, f.arch, f.arch, {32}));
  ASSERT_OK_AND_ASSIGN(Decoder pruned, ApplyPrune(f.model, plan, f.arch));
  torch::NoGradGuard g;
  auto tokens = torch::randint(0, f.arch.vocab_size, {2, 12}, torch::kLong);
  EXPECT_TRUE(torch::equal(pruned.Forward(tokens), f.model.Forward(tokens)));
}

// Issue 40's families: Qwen2's biases go whole with their heads, SmolLM3's
// kept layers keep their NoPE flags, Gemma's four norms a layer are cut on
// the residual axis, Llama 4's file form is the backbone's; pruning nothing
// reproduces each exactly.
TEST(PruneTest, FamiliesPruneWithTheirBiasesNoPeFlagsAndNorms) {
  Arch qwen2 = TinyMixedArch();
  qwen2.qk_norm = false;
  qwen2.qkv_bias = true;
  Arch smollm3 = TinyMixedArch();
  smollm3.qk_norm = false;
  smollm3.no_rope = {false, true, false, true};
  Arch gemma = TinyMixedArch();
  gemma.gemma = true;
  gemma.local_rope_theta = 100;
  for (const Arch& a : {qwen2, smollm3, gemma, TinyLlama4Arch()}) {
    Fixture f(a);
    ASSERT_OK_AND_ASSIGN(PrunePlan same, PlanPrune(f.metrics, f.arch, f.arch, {32}));
    ASSERT_OK_AND_ASSIGN(Decoder whole, ApplyPrune(f.model, same, f.arch));
    torch::NoGradGuard g;
    auto tokens = torch::randint(0, a.vocab_size, {1, 10}, torch::kLong);
    EXPECT_TRUE(torch::equal(whole.Forward(tokens), f.model.Forward(tokens))) << ArchFamily(a);
    // Llama 4 has full layers only.
    ASSERT_OK_AND_ASSIGN(Arch target,
                         OverrideShape(f.arch, 3, 16, 32, a.llama4 ? "FFF" : "FWF", a.llama4 ? 0 : 3));
    EXPECT_TRUE(target.no_rope.empty());  // the plan decides which flags are kept
    ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(f.metrics, f.arch, target, {16}));
    ASSERT_OK_AND_ASSIGN(Decoder pruned, ApplyPrune(f.model, plan, target));
    EXPECT_STREQ(ArchFamily(pruned.arch()), ArchFamily(a));
    if (!a.no_rope.empty()) {
      ASSERT_EQ(pruned.arch().no_rope.size(), 3u);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(pruned.arch().no_rope[i], a.no_rope[plan.layers[i]]) << "layer " << i;
      }
    }
    auto src = Tensors(f.model);
    for (auto& [name, t] : Tensors(pruned)) {
      if (name.find("_proj.bias") == std::string::npos) continue;
      const std::string from =
          "model.layers." + std::to_string(plan.layers[name[13] - '0']) + name.substr(14);
      EXPECT_TRUE(torch::equal(t, src.at(from))) << name << " from " << from;
    }
    Arch wrong = target;
    wrong.gemma = !a.gemma;
    wrong.qk_norm = true;
    wrong.qkv_bias = false;
    wrong.no_rope.clear();
    EXPECT_FALSE(PlanPrune(f.metrics, f.arch, wrong, {16}).ok()) << ArchFamily(a);
  }
}

TEST(PruneTest, ATargetThatLosesTheBackbonesRopeScalingIsRefused) {
  Fixture f;
  Arch target = f.arch;
  target.rope_scaling.kind = RopeScaling::Kind::kLinear;
  target.rope_scaling.factor = 4;
  EXPECT_THAT(PlanPrune(f.metrics, f.arch, target, {32}).status().message(),
              HasSubstr("rope_scaling differs from the backbone's"));
}

TEST(PruneTest, ABf16BackboneStaysBf16AndPrunesToTheSameValuesAsInF32) {
  const std::string demo = std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone";
  ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(demo));
  EXPECT_EQ(reader->stored_dtype(), torch::kBFloat16);
  ASSERT_OK_AND_ASSIGN(Backbone b, LoadBackbone(demo));
  EXPECT_EQ(b.model->dtype(), torch::kBFloat16);  // half the memory of f32
  Arch target = b.model->arch();
  target.num_layers = 4;
  target.d_ffn = 512;
  target.attention.resize(4);
  const std::string dir = ::testing::TempDir() + "/hilnas_prune_bf16";
  std::filesystem::remove_all(dir);
  ASSERT_OK(PruneToCheckpoint(b, target, {64}, dir + "/bf16", StorageDtype::kF32));
  // The same cut from the backbone loaded in f32: bit-identical weights.
  ASSERT_OK_AND_ASSIGN(Decoder f32, LoadCheckpoint(demo, torch::kFloat));
  ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(b.metrics, f32.arch(), target, {64}));
  ASSERT_OK_AND_ASSIGN(Decoder cut, ApplyPrune(f32, plan, target));
  ASSERT_OK(SaveCheckpoint(cut, dir + "/f32", StorageDtype::kF32));
  std::string a, c;
  ASSERT_OK(ReadFileToString(dir + "/bf16/model.safetensors", &a));
  ASSERT_OK(ReadFileToString(dir + "/f32/model.safetensors", &c));
  EXPECT_TRUE(a == c);
  std::filesystem::remove_all(dir);
}

TEST(PruneTest, PruningOnlyFfnChannelsChangesOnlyFfnTensors) {
  Fixture f;
  Arch target = f.arch;
  target.d_ffn = 32;
  ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(f.metrics, f.arch, target, {32}));
  ASSERT_OK_AND_ASSIGN(Decoder pruned, ApplyPrune(f.model, plan, target));
  auto before = Tensors(f.model), after = Tensors(pruned);
  ASSERT_EQ(before.size(), after.size());
  for (auto& [name, t] : after) {
    const bool ffn = name.find("mlp.") != std::string::npos;
    if (!ffn) {
      EXPECT_TRUE(torch::equal(t, before[name])) << name;
      continue;
    }
    const int layer = std::stoi(name.substr(13));
    auto idx = torch::tensor(plan.ffn[layer], torch::kLong);
    auto want = name.find("down_proj") != std::string::npos ? before[name].index_select(1, idx)
                                                            : before[name].index_select(0, idx);
    EXPECT_TRUE(torch::equal(t, want)) << name;
  }
  // The kept channels are the highest-energy ones of their layer.
  for (int l = 0; l < f.arch.num_layers; ++l) {
    double kept_min = 1e300, dropped_max = -1;
    std::vector<bool> kept(f.arch.d_ffn, false);
    for (int64_t c : plan.ffn[l]) kept[c] = true;
    for (int c = 0; c < f.arch.d_ffn; ++c) {
      (kept[c] ? kept_min : dropped_max) = kept[c] ? std::min(kept_min, f.metrics.ffn[l][c])
                                                   : std::max(dropped_max, f.metrics.ffn[l][c]);
    }
    EXPECT_GE(kept_min, dropped_max) << "layer " << l;
  }
}

TEST(PruneTest, DropsTheLayersWithTheLowestLayerMetric) {
  Fixture f;
  f.metrics.layer = {0.5, 0.1, 0.9, 0.3};
  Arch target = f.arch;
  target.num_layers = 2;
  target.attention = {Attention::kFull, Attention::kSkip};
  ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(f.metrics, f.arch, target, {32}));
  EXPECT_EQ(plan.layers, (std::vector<int>{0, 2}));
  ASSERT_OK_AND_ASSIGN(Decoder pruned, ApplyPrune(f.model, plan, target));
  auto t = Tensors(pruned);
  EXPECT_TRUE(t.count("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(t.count("model.layers.1.self_attn.q_proj.weight"));  // skip: no attention
  EXPECT_TRUE(torch::equal(t["model.layers.1.mlp.up_proj.weight"],
                           Tensors(f.model)["model.layers.2.mlp.up_proj.weight"]));
}

TEST(PruneTest, ResidualPruningCutsEveryTensorOnTheAxisConsistently) {
  Fixture f;
  Arch target = f.arch;
  target.d_model = 16;
  ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(f.metrics, f.arch, target, {16}));
  ASSERT_OK_AND_ASSIGN(Decoder pruned, ApplyPrune(f.model, plan, target));
  auto before = Tensors(f.model), after = Tensors(pruned);
  auto idx = torch::tensor(plan.model_dim, torch::kLong);
  EXPECT_TRUE(torch::equal(after["model.embed_tokens.weight"],
                           before["model.embed_tokens.weight"].index_select(1, idx)));
  EXPECT_TRUE(torch::equal(after["lm_head.weight"], before["lm_head.weight"].index_select(1, idx)));
  EXPECT_TRUE(
      torch::equal(after["model.norm.weight"], before["model.norm.weight"].index_select(0, idx)));
  EXPECT_TRUE(torch::equal(after["model.layers.0.self_attn.o_proj.weight"],
                           before["model.layers.0.self_attn.o_proj.weight"].index_select(0, idx)));
  EXPECT_TRUE(torch::equal(after["model.layers.3.self_attn.k_proj.weight"],
                           before["model.layers.3.self_attn.k_proj.weight"].index_select(1, idx)));
  torch::NoGradGuard g;
  auto logits = pruned.Forward(torch::zeros({1, 5}, torch::kLong));
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
}

TEST(PruneTest, SameMetricsAndTargetGiveABitIdenticalCheckpoint) {
  Fixture f;
  Arch target = f.arch;
  target.d_ffn = 32;
  target.d_model = 16;
  const fs::path dir = fs::temp_directory_path() / "hilnas_prune_test_det";
  fs::remove_all(dir);
  for (const char* sub : {"a", "b"}) {
    Fixture again;  // recalibrated from scratch
    ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(again.metrics, again.arch, target, {16}));
    ASSERT_OK_AND_ASSIGN(Decoder pruned, ApplyPrune(again.model, plan, target));
    ASSERT_OK(SaveCheckpoint(pruned, (dir / sub).string(), StorageDtype::kF32));
  }
  for (const char* file : {"model.safetensors", "config.json"}) {
    std::string a, b;
    ASSERT_OK(ReadFileToString((dir / "a" / file).string(), &a));
    ASSERT_OK(ReadFileToString((dir / "b" / file).string(), &b));
    EXPECT_EQ(a, b) << file;
  }
  fs::remove_all(dir);
}

TEST(PruneTest, ImpossibleTargetsAreRefusedNamingTheField) {
  Fixture f;
  Arch wide = f.arch;
  wide.d_model = 64;
  EXPECT_THAT(PlanPrune(f.metrics, f.arch, wide, {32}).status().message(),
              HasSubstr("d_model 64 is larger than the backbone's 32"));
  Arch off_grid = f.arch;
  off_grid.d_ffn = 40;
  EXPECT_THAT(PlanPrune(f.metrics, f.arch, off_grid, {32}).status().message(),
              HasSubstr("d_ffn 40 is not a multiple of the block size 32"));
  Arch heads = f.arch;
  heads.num_heads = 2;
  EXPECT_THAT(PlanPrune(f.metrics, f.arch, heads, {32}).status().message(),
              HasSubstr("heads are never split"));
  Arch onto_skip = f.arch;  // every layer kept, attention asked of layer 2 (skip)
  onto_skip.attention = {Attention::kFull, Attention::kFull, Attention::kFull, Attention::kFull};
  EXPECT_THAT(PlanPrune(f.metrics, f.arch, onto_skip, {32}).status().message(),
              HasSubstr("backbone layer 2, which has none"));
  ActivationMetrics other = f.metrics;
  other.d_ffn = 128;
  EXPECT_THAT(PlanPrune(other, f.arch, f.arch, {32}).status().message(),
              HasSubstr("metrics are for a 4-layer d_model 32 d_ffn 128 model"));
}

TEST(PruneTest, PublishedFlashShapesPlanFromTheProShallowBackbone) {
  // The paper's setting (Sec. 4.1): MobileLLM-Flash-350M/650M/1.4B cut from
  // MobileLLM-Pro-Shallow-1.8B. Planning needs only metrics and shapes.
  ASSERT_OK_AND_ASSIGN(Shape base, FindShape("mobilellm-pro-shallow-1.8b"));
  ActivationMetrics m;
  m.num_layers = base.arch.num_layers;
  m.d_model = base.arch.d_model;
  m.d_ffn = base.arch.d_ffn;
  for (int l = 0; l < m.num_layers; ++l) {
    m.layer.push_back(l == 3 || l == 7 || l == 11 || l == 13 ? 0.01 : 0.5 + 0.01 * l);
    m.ffn.emplace_back(m.d_ffn);
    for (int c = 0; c < m.d_ffn; ++c) m.ffn[l][c] = (c * 7919 + l) % 1000;
  }
  for (int c = 0; c < m.d_model; ++c) m.model_dim.push_back((c * 104729) % 997);
  for (const char* name :
       {"mobilellm-flash-350m", "mobilellm-flash-650m", "mobilellm-flash-1.4b"}) {
    ASSERT_OK_AND_ASSIGN(Shape target, FindShape(name));
    ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(m, base.arch, target.arch));
    EXPECT_EQ(static_cast<int>(plan.layers.size()), target.arch.num_layers) << name;
    EXPECT_EQ(static_cast<int>(plan.model_dim.size()), target.arch.d_model) << name;
    EXPECT_EQ(static_cast<int>(plan.ffn[0].size()), target.arch.d_ffn) << name;
  }
  ASSERT_OK_AND_ASSIGN(Shape flash350, FindShape("mobilellm-flash-350m"));
  ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(m, base.arch, flash350.arch));
  EXPECT_EQ(plan.layers, (std::vector<int>{0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 14, 15}));
}

TEST(PruneTest, TiedTargetOfAnUntiedBackboneTiesToItsInputEmbedding) {
  Fixture f;  // TinyMixedArch has a separate head
  Arch tied = f.arch;
  tied.tie_embeddings = true;
  ASSERT_OK_AND_ASSIGN(PrunePlan plan, PlanPrune(f.metrics, f.arch, tied, {32}));
  ASSERT_OK_AND_ASSIGN(Decoder pruned, ApplyPrune(f.model, plan, tied));
  auto t = Tensors(pruned);
  EXPECT_FALSE(t.count("lm_head.weight"));
  EXPECT_TRUE(
      torch::equal(t["model.embed_tokens.weight"], Tensors(f.model)["model.embed_tokens.weight"]));
  // And back: an untied target of the tied model starts its head as the embedding.
  ASSERT_OK_AND_ASSIGN(PrunePlan back, PlanPrune(f.metrics, tied, f.arch, {32}));
  ASSERT_OK_AND_ASSIGN(Decoder untied, ApplyPrune(pruned, back, f.arch));
  EXPECT_TRUE(torch::equal(Tensors(untied)["lm_head.weight"], t["model.embed_tokens.weight"]));
}

TEST(PruneTest, OverridesCheckThePatternLength) {
  Arch b = TinyMixedArch();
  b.attention.assign(4, Attention::kFull);
  EXPECT_THAT(OverrideShape(b, 3, 0, 0, "FWSF", 4).status().message(),
              HasSubstr("--pattern FWSF has 4 layers, want 3"));
  ASSERT_OK_AND_ASSIGN(Arch t, OverrideShape(b, 3, 0, 32, "FWF", 4));
  EXPECT_EQ(t.sliding_window, 4);
  EXPECT_EQ(t.d_ffn, 32);
  EXPECT_EQ(PatternString(t.attention), "FWF");
  ASSERT_OK_AND_ASSIGN(Arch shallow, OverrideShape(b, 2, 0, 0, "", 0));
  EXPECT_EQ(PatternString(shallow.attention), "FF");
}

// A SLIM target (Slim Attention Eq. 4) is its standard twin pruned, then
// converted: the same logits from a K-only cache.
TEST(PruneToCheckpointTest, SlimTargetIsTheStandardTwinConverted) {
  Backbone b;
  b.model = std::make_unique<Decoder>(*Decoder::Create(TinyMhaArch(), 7));
  CalibrationOptions o;
  o.seq_len = 16;
  o.batch_size = 4;
  b.metrics = *Calibrate(*b.model, RandomTokens(256, 50, 1), o);
  Arch standard = TinyMhaArch();
  standard.d_ffn = 32;
  standard.num_layers = 3;
  standard.attention = {Attention::kFull, Attention::kSlidingWindow, Attention::kFull};
  Arch slim = standard;
  slim.kv_cache = KvLayout::kSlim;
  const std::string dir = ::testing::TempDir() + "/prune_slim";
  fs::remove_all(dir);
  const PruneOptions blocks{32};
  ASSERT_OK(PruneToCheckpoint(b, standard, blocks, dir + "/standard", StorageDtype::kF32));
  ASSERT_OK(PruneToCheckpoint(b, slim, blocks, dir + "/slim", StorageDtype::kF32));
  ASSERT_OK_AND_ASSIGN(Decoder s, LoadCheckpoint(dir + "/standard"));
  ASSERT_OK_AND_ASSIGN(Decoder l, LoadCheckpoint(dir + "/slim"));
  EXPECT_EQ(l.arch().kv_cache, KvLayout::kSlim);
  torch::NoGradGuard g;
  auto tokens = torch::randint(0, 50, {1, 10}, torch::kLong);
  EXPECT_TRUE(torch::allclose(l.Forward(tokens), s.Forward(tokens), 1e-4, 1e-4));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hilnas
