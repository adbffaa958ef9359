#include "model/hf_config.h"

#include <cmath>
#include <filesystem>
#include <tuple>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "util/files.h"
#include "util/textproto.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using json = nlohmann::json;

// SmolLM2-135M's published config.json (transformers 4 form), scaled down
// in layers and vocabulary only.
json SmolLm2Config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
    "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
    "is_llama_config": true, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 9, "num_hidden_layers": 2, "num_key_value_heads": 3,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": false,
    "rope_scaling": null, "rope_theta": 100000, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.42.3", "use_cache": true,
    "vocab_size": 512})");
}

// The same config as transformers 5 saves it: rope_parameters instead of
// rope_theta and rope_scaling, dtype instead of torch_dtype.
json Transformers5(json c) {
  json rope = {{"rope_type", "default"}};
  if (c.contains("rope_scaling") && c["rope_scaling"].is_object()) rope = c["rope_scaling"];
  rope["rope_theta"] = c.value("rope_theta", 10000.0);
  c.erase("rope_scaling");
  c.erase("rope_theta");
  c["rope_parameters"] = rope;
  c["dtype"] = c["torch_dtype"];
  c.erase("torch_dtype");
  c["transformers_version"] = "5.17.0";
  return c;
}

class HfConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hf_config_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  absl::StatusOr<Arch> Read(const json& c) {
    EXPECT_OK(WriteFileAtomically(dir_ + "/config.json", c.dump(2)));
    return ReadConfigJson(dir_ + "/config.json");
  }
  std::string dir_;
};

TEST_F(HfConfigTest, RopeThetaIsReadFromEitherGeneration) {
  ASSERT_OK_AND_ASSIGN(Arch v4, Read(SmolLm2Config()));
  ASSERT_OK_AND_ASSIGN(Arch v5, Read(Transformers5(SmolLm2Config())));
  EXPECT_EQ(v4.rope_theta, 100000);
  EXPECT_EQ(v5.rope_theta, 100000) << "not transformers' default of 10000";
  EXPECT_EQ(v5.head_dim, 64);
  EXPECT_TRUE(v5.rope_scaling == RopeScaling());
}

TEST_F(HfConfigTest, Llama3ScalingIsReadFromRopeParameters) {
  json c = SmolLm2Config();
  c["rope_theta"] = 500000.0;
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  ASSERT_OK_AND_ASSIGN(Arch v4, Read(c));
  ASSERT_OK_AND_ASSIGN(Arch v5, Read(Transformers5(c)));
  EXPECT_EQ(v5.rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_EQ(v5.rope_scaling.factor, 32.0);
  EXPECT_TRUE(v4.rope_scaling == v5.rope_scaling);
  EXPECT_EQ(v5.rope_theta, 500000.0);
  // Both forms at once, agreeing, are fine.
  json both = Transformers5(c);
  both["rope_theta"] = 500000.0;
  both["rope_scaling"] = c["rope_scaling"];
  EXPECT_OK(Read(both).status());
}

TEST_F(HfConfigTest, DisagreeingRopeThetaAndRopeParametersAreRefusedNamingBoth) {
  json c = Transformers5(SmolLm2Config());
  c["rope_theta"] = 10000;
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("rope_theta 10000"),
                                      HasSubstr("rope_parameters.rope_theta 100000"),
                                      HasSubstr("disagree"))));
}

TEST_F(HfConfigTest, DisagreeingRopeScalingAndRopeParametersAreRefused) {
  json c = Transformers5(SmolLm2Config());
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("rope_scaling (linear, factor 2)"),
                                      HasSubstr("rope_parameters (default"))));
}

TEST_F(HfConfigTest, PerLayerKindRopeParametersMustAgreeForTheKindsInUse) {
  json c = Transformers5(SmolLm2Config());
  json full = c["rope_parameters"];
  json local = full;
  local["rope_theta"] = 10000.0;
  c["rope_parameters"] = {{"full_attention", full}, {"sliding_attention", local}};
  // Only full layers: the sliding entry is not used.
  ASSERT_OK_AND_ASSIGN(Arch a, Read(c));
  EXPECT_EQ(a.rope_theta, 100000);
  c["layer_types"] = {"full_attention", "sliding_attention"};
  c["sliding_window"] = 16;
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("rope_parameters.sliding_attention"),
                                      HasSubstr("differs from rope_parameters.full_attention"))));
}

TEST_F(HfConfigTest, AnUnknownKeyThatChangesTheComputationIsRefusedByName) {
  json c = SmolLm2Config();
  c["attn_logit_softcapping"] = 50.0;
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("config.json"),
                                      HasSubstr("field \"attn_logit_softcapping\" 50.0"),
                                      HasSubstr("LlamaForCausalLM"))));
}

TEST_F(HfConfigTest, AnInertKeyWithAValueThatMattersIsRefused) {
  json c = SmolLm2Config();
  c["rope_interleaved"] = true;
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("field \"rope_interleaved\" true")));
  c = SmolLm2Config();
  c["partial_rotary_factor"] = 0.5;
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("field \"partial_rotary_factor\" 0.5")));
  // Qwen3's window bookkeeping is inert for Qwen3, not for Llama.
  c = SmolLm2Config();
  c["max_window_layers"] = 28;
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("field \"max_window_layers\"")));
}

TEST_F(HfConfigTest, AnUnknownRopeParameterIsRefusedByName) {
  json c = Transformers5(SmolLm2Config());
  c["rope_parameters"]["attention_factor"] = 1.2;
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("rope_parameters.attention_factor 1.2")));
  c = Transformers5(SmolLm2Config());
  c["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("rope_parameters.rope_type \"yarn\" is not supported")));
}

TEST_F(HfConfigTest, AConfigNamingNoFamilyIsRefused) {
  json c = SmolLm2Config();
  c.erase("architectures");
  c.erase("model_type");
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("architectures"), HasSubstr("model_type"))));
  c["model_type"] = "llama";  // either one is enough
  EXPECT_OK(Read(c).status());
  c["architectures"] = {"Qwen3ForCausalLM"};
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("name different families")));
  c["model_type"] = "gemma3";
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("model_type \"gemma3\" is not supported")));
}

TEST_F(HfConfigTest, AnUnexpectedBiasTensorIsRefusedByName) {
  json c = SmolLm2Config();
  c["hidden_size"] = 36;
  c["intermediate_size"] = 48;
  c["num_attention_heads"] = 3;
  c["num_key_value_heads"] = 1;
  c["vocab_size"] = 40;
  ASSERT_OK_AND_ASSIGN(Arch arch, Read(c));
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(arch, 3));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  auto named = d.NamedTensors();
  named.push_back({"model.layers.0.self_attn.q_proj.bias", torch::zeros({36})});
  ASSERT_OK(WriteSafetensors(dir_ + "/model.safetensors", named, StorageDtype::kF32));
  EXPECT_THAT(LoadCheckpoint(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unexpected tensor model.layers.0.self_attn.q_proj.bias")));
}

TEST_F(HfConfigTest, WhatWasReadIsDescribed) {
  json c = Transformers5(SmolLm2Config());
  ASSERT_OK_AND_ASSIGN(Arch a, Read(c));
  const std::string said = DescribeArch(a);
  EXPECT_THAT(said, HasSubstr("9 heads, 3 KV heads, head_dim 64"));
  EXPECT_THAT(said, HasSubstr("theta 100000, default (no scaling)"));
  EXPECT_THAT(said, HasSubstr("epsilon 1e-05"));
  EXPECT_THAT(said, HasSubstr("tied"));
  EXPECT_THAT(said, HasSubstr("FF (full_attention, full_attention)"));
  EXPECT_THAT(said, HasSubstr("sliding window: none"));
}

// What hilnas writes it reads back unchanged (and it passes its own check).
TEST_F(HfConfigTest, WrittenConfigsReadBack) {
  ASSERT_OK_AND_ASSIGN(Arch a, Read(SmolLm2Config()));
  a.rope_scaling.kind = RopeScaling::Kind::kLlama3;
  a.rope_scaling.factor = 8;
  ASSERT_OK(WriteConfigJson(a, dir_ + "/config.json"));
  ASSERT_OK_AND_ASSIGN(Arch back, ReadConfigJson(dir_ + "/config.json"));
  EXPECT_TRUE(back.rope_scaling == a.rope_scaling);
  EXPECT_EQ(back.rope_theta, a.rope_theta);
}

// Qwen2.5-0.5B's published config.json, scaled down in layers and
// vocabulary: biased q/k/v are implied by the class, the window unused.
json Qwen25Config() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
    "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 512})");
}

// SmolLM3-3B's published config.json, scaled down in layers and vocabulary:
// NoPE layers from no_rope_layer_interval.
json SmolLm3Config() {
  return json::parse(R"({
    "architectures": ["SmolLM3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": null, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 65536,
    "model_type": "smollm3", "no_rope_layer_interval": 4, "num_attention_heads": 16,
    "num_hidden_layers": 8, "num_key_value_heads": 4, "pad_token_id": 128004,
    "pretraining_tp": 2, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 5000000.0,
    "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 512})");
}

TEST_F(HfConfigTest, Qwen2ReadsItsBiasesAndWritesItselfBack) {
  ASSERT_OK_AND_ASSIGN(Arch a, Read(Qwen25Config()));
  EXPECT_TRUE(a.qkv_bias);
  EXPECT_FALSE(a.qk_norm);
  EXPECT_EQ(a.head_dim, 64);
  EXPECT_EQ(a.sliding_window, 0);  // use_sliding_window false
  EXPECT_STREQ(ArchFamily(a), "Qwen2ForCausalLM");
  EXPECT_THAT(DescribeArch(a), AllOf(HasSubstr("family: Qwen2ForCausalLM"),
                                     HasSubstr("q/k/v biases on")));
  ASSERT_OK(WriteConfigJson(a, dir_ + "/config.json"));
  std::string text;
  ASSERT_OK(ReadFileToString(dir_ + "/config.json", &text));
  EXPECT_EQ(json::parse(text)["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_FALSE(json::parse(text).contains("attention_bias"));  // Qwen2 has no switch
  ASSERT_OK_AND_ASSIGN(Arch back, ReadConfigJson(dir_ + "/config.json"));
  EXPECT_TRUE(back.qkv_bias);
  json wrong = Qwen25Config();
  wrong["no_rope_layers"] = {1, 0};
  EXPECT_THAT(Read(wrong), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("\"no_rope_layers\" [1,0] is SmolLM3ForCausalLM's, not read for "
                                              "Qwen2ForCausalLM")));
  wrong = Qwen25Config();
  wrong["use_sliding_window"] = true;
  EXPECT_THAT(Read(wrong), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("use_sliding_window")));
}

TEST_F(HfConfigTest, SmolLm3ReadsItsNoPeLayersEitherWay) {
  ASSERT_OK_AND_ASSIGN(Arch a, Read(SmolLm3Config()));
  EXPECT_EQ(a.no_rope,
            (std::vector<bool>{false, false, false, true, false, false, false, true}));
  EXPECT_FALSE(a.qkv_bias);
  EXPECT_THAT(DescribeArch(a), HasSubstr("NoPE layers (no RoPE): 3, 7"));
  json listed = SmolLm3Config();
  listed["no_rope_layers"] = {1, 0, 1, 1, 1, 1, 0, 1};  // the list wins over the interval
  ASSERT_OK_AND_ASSIGN(Arch b, Read(listed));
  EXPECT_EQ(b.no_rope,
            (std::vector<bool>{false, true, false, false, false, false, true, false}));
  ASSERT_OK(WriteConfigJson(b, dir_ + "/config.json"));
  ASSERT_OK_AND_ASSIGN(Arch back, ReadConfigJson(dir_ + "/config.json"));
  EXPECT_EQ(back.no_rope, b.no_rope);
  EXPECT_STREQ(ArchFamily(back), "SmolLM3ForCausalLM");
  listed["no_rope_layers"] = {1, 0, 1};
  EXPECT_THAT(Read(listed), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("no_rope_layers [1,0,1] is not a list of "
                                               "num_hidden_layers (8) flags")));
  listed["no_rope_layers"] = {1, 0, 1, 1, 1, 1, 2, 1};
  EXPECT_THAT(Read(listed), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("no_rope_layers[6] 2 is not 1 (RoPE) or 0")));
  json sliding = SmolLm3Config();
  sliding["use_sliding_window"] = true;
  EXPECT_THAT(Read(sliding), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("use_sliding_window")));
}

// Gemma 3 1B's published config.json, scaled down in layers and vocabulary:
// no layer_types (every 6th layer full) and no tie_word_embeddings (tied).
json Gemma3Config() {
  return json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": 1, "final_logit_softcapping": null, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 12, "num_key_value_heads": 1,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 512})");
}

// MobileLLM-R1-950M's config.json (Llama4ForCausalLM) as far as its public
// readers report it (tests/reference/hf_reference.py says which), 22 layers
// cut to 4, the vocabulary to 512.
json MobileLlmR1Config() {
  return json::parse(R"({
    "architectures": ["Llama4ForCausalLM"], "attention_bias": false,
    "attention_chunk_size": 32768, "attention_dropout": 0.0, "attn_scale": 0.1,
    "attn_temperature_tuning": false, "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009], "floor_scale": 8192, "for_llm_compressor": false,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 1536, "initializer_range": 0.02,
    "interleave_moe_layer_step": 0, "intermediate_size": 6144, "intermediate_size_mlp": 6144,
    "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention"],
    "max_position_embeddings": 32768, "model_type": "llama4_text", "moe_layers": [],
    "no_rope_layers": [1, 1, 1, 1], "num_attention_heads": 24, "num_experts_per_tok": 0,
    "num_hidden_layers": 4, "num_key_value_heads": 6, "num_local_experts": 0,
    "output_router_logits": false, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "rope_theta": 8000000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
    "use_qk_norm": true, "vocab_size": 512})");
}

TEST_F(HfConfigTest, Llama4ReadsItsDefaultsAndTemperatureAndRefusesExperts) {
  ASSERT_OK_AND_ASSIGN(Arch a, Read(MobileLlmR1Config()));
  EXPECT_TRUE(a.llama4);
  EXPECT_TRUE(a.qk_l2_norm);
  EXPECT_FALSE(a.qk_norm);
  EXPECT_TRUE(a.no_rope.empty());  // every layer rotates
  EXPECT_EQ(a.attention_chunk, 0);  // every layer full
  EXPECT_EQ(a.d_ffn, 6144);
  EXPECT_EQ(a.head_dim, 64);
  EXPECT_EQ(a.rope_theta, 8e6);
  EXPECT_STREQ(ArchFamily(a), "Llama4ForCausalLM");
  EXPECT_THAT(DescribeArch(a), HasSubstr("Llama 4: QK L2-norm on (RoPE layers), every layer full"));
  ASSERT_OK(WriteConfigJson(a, dir_ + "/config.json"));
  ASSERT_OK_AND_ASSIGN(Arch back, ReadConfigJson(dir_ + "/config.json"));
  EXPECT_EQ(ArchToProto(back).DebugString(), ArchToProto(a).DebugString());

  // The class's defaults: every 4th layer NoPE, the RoPE layers chunked by
  // 8192, head_dim 128, dense only when moe_layers says so.
  json defaults = {{"architectures", {"Llama4ForCausalLM"}}, {"hidden_size", 256},
                   {"intermediate_size_mlp", 512},           {"num_hidden_layers", 8},
                   {"num_attention_heads", 2},               {"num_key_value_heads", 1},
                   {"vocab_size", 64},                       {"moe_layers", json::array()},
                   {"attn_temperature_tuning", false}};
  ASSERT_OK_AND_ASSIGN(Arch d, Read(defaults));
  EXPECT_EQ(d.no_rope, (std::vector<bool>{false, false, false, true, false, false, false, true}));
  EXPECT_EQ(d.attention_chunk, 8192);
  EXPECT_EQ(d.head_dim, 128);
  EXPECT_EQ(d.norm_eps, 1e-5);
  EXPECT_EQ(d.rope_theta, 500000.0);
  EXPECT_FALSE(d.tie_embeddings);
  ASSERT_OK(WriteConfigJson(d, dir_ + "/config.json"));
  ASSERT_OK_AND_ASSIGN(Arch d_back, ReadConfigJson(dir_ + "/config.json"));
  EXPECT_EQ(ArchToProto(d_back).DebugString(), ArchToProto(d).DebugString());

  json c = defaults;
  c.erase("moe_layers");
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("moe_layers is absent, so Llama4TextConfig derives "
                                          "expert layers from interleave_moe_layer_step 1")));
  c = defaults;
  c["moe_layers"] = {1, 3};
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("mixture-of-experts layers are not supported")));
  EXPECT_EQ(d.temperature_floor_scale, 0);  // tuning off
  // Temperature tuning, on by default: the class's floor_scale 8192 and
  // attn_scale 0.1, written back as they were read.
  c = defaults;
  c.erase("attn_temperature_tuning");
  ASSERT_OK_AND_ASSIGN(Arch tuned, Read(c));
  EXPECT_EQ(tuned.temperature_floor_scale, 8192);
  EXPECT_EQ(tuned.temperature_attn_scale, 0.1);
  EXPECT_EQ(QueryTemperature(tuned, 8190), 1.0);  // floor(8191 / 8192) = 0
  EXPECT_DOUBLE_EQ(QueryTemperature(tuned, 8191), std::log(2.0) * 0.1 + 1);
  EXPECT_EQ(QueryTemperature(d, 8191), 1.0);  // tuning off
  EXPECT_THAT(DescribeArch(tuned), HasSubstr("NoPE queries x log(floor((pos + 1) / 8192) + 1)"));
  c["floor_scale"] = 16;
  c["attn_scale"] = 0.5;
  ASSERT_OK_AND_ASSIGN(tuned, Read(c));
  ASSERT_OK(WriteConfigJson(tuned, dir_ + "/config.json"));
  ASSERT_OK_AND_ASSIGN(Arch tuned_back, ReadConfigJson(dir_ + "/config.json"));
  EXPECT_EQ(tuned_back.temperature_floor_scale, 16);
  EXPECT_EQ(tuned_back.temperature_attn_scale, 0.5);
  c["floor_scale"] = 0;
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("floor_scale 0 must be positive")));
  c = defaults;
  c["layer_types"] = json::array();
  for (int i = 0; i < 8; ++i) c["layer_types"].push_back(i == 0 ? "chunked_attention" : "full_attention");
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("chunks layers other than the RoPE layers")));
  c = MobileLlmR1Config();
  c["no_rope_layers"] = {1, 1};
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("has no flag for each of the 4 layers")));
  c = SmolLm3Config();
  c["use_qk_norm"] = true;  // Llama 4's key in another family's config
  EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("\"use_qk_norm\" true is Llama4ForCausalLM's")));
}

TEST_F(HfConfigTest, Gemma3ReadsItsLayoutAndRefusesWhatItCannotRun) {
  ASSERT_OK_AND_ASSIGN(Arch a, Read(Gemma3Config()));
  EXPECT_TRUE(a.gemma);
  EXPECT_TRUE(a.qk_norm);
  EXPECT_TRUE(a.tie_embeddings);
  EXPECT_EQ(PatternString(a.attention), "WWWWWFWWWWWF");
  EXPECT_EQ(a.sliding_window, 512);
  EXPECT_EQ(a.rope_theta, 1e6);
  EXPECT_EQ(a.local_rope_theta, 1e4);
  EXPECT_STREQ(ArchFamily(a), "Gemma3ForCausalLM");
  ASSERT_OK(WriteConfigJson(a, dir_ + "/config.json"));
  ASSERT_OK_AND_ASSIGN(Arch back, ReadConfigJson(dir_ + "/config.json"));
  EXPECT_TRUE(back.gemma);
  EXPECT_EQ(back.local_rope_theta, 1e4);
  EXPECT_EQ(back.attention, a.attention);
  // transformers 5: one RoPE entry per layer kind, each its own base.
  json t5 = Gemma3Config();
  t5.erase("rope_theta");
  t5.erase("rope_local_base_freq");
  t5.erase("rope_scaling");
  t5["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  ASSERT_OK_AND_ASSIGN(Arch b, Read(t5));
  EXPECT_EQ(b.rope_theta, 1e6);
  EXPECT_EQ(b.local_rope_theta, 1e4);
  for (const auto& [key, value, named] :
       {std::tuple{"query_pre_attn_scalar", json(168), "query_pre_attn_scalar 168"},
        std::tuple{"attn_logit_softcapping", json(50.0), "attn_logit_softcapping"},
        std::tuple{"final_logit_softcapping", json(30.0), "final_logit_softcapping"},
        std::tuple{"hidden_activation", json("gelu"), "hidden_activation"},
        std::tuple{"use_bidirectional_attention", json(true), "use_bidirectional_attention"}}) {
    json c = Gemma3Config();
    c[key] = value;
    EXPECT_THAT(Read(c), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(named))) << key;
  }
  json llama = SmolLm2Config();
  llama["rope_local_base_freq"] = 10000;
  EXPECT_THAT(Read(llama), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("\"rope_local_base_freq\" 10000 is Gemma3ForCausalLM's, not read "
                                              "for LlamaForCausalLM")));
}

}  // namespace
}  // namespace hilnas
