#include "model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/checkpoint_files.h"
#include "util/files.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using json = nlohmann::json;

// Typed field access that names the file and field on a mismatch.
template <typename T>
absl::StatusOr<T> Field(const json& j, const std::string& path, const char* key,
                        std::optional<T> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing field \"", key, "\""));
  }
  const bool ok = std::is_same_v<T, bool> ? it->is_boolean()
                  : std::is_integral_v<T> ? it->is_number_integer()
                                          : it->is_number();
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": field \"", key, "\" has the wrong type: ", it->dump()));
  }
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Range-checked before narrowing: 4294967552 must not become 256.
    const bool fits =
        it->is_number_unsigned()
            ? it->template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
            : it->template get<int64_t>() >= std::numeric_limits<T>::min() &&
                  it->template get<int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": field \"", key, "\" ", it->dump(),
                                                     " is out of range (at most ",
                                                     std::numeric_limits<T>::max(), ")"));
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(it->template get<double>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field \"", key, "\" ", it->dump(), " is not finite"));
    }
  }
  return it->template get<T>();
}

bool Present(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

// ---- Which keys a family's config may carry ----

// A key that does not change the forward pass: with any value when
// `only_value` is null, else only with that value (JSON text; numbers
// compare by value, so "0" also matches 0.0).
struct InertKey {
  const char* name;
  const char* only_value;
};

// Read by ReadConfigJson for every family (hilnas's own extras last).
constexpr const char* kReadKeys[] = {
    "architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps",
    "rope_theta", "rope_scaling", "rope_parameters", "original_max_position_embeddings",
    "tie_word_embeddings", "hidden_act", "attention_bias", "mlp_bias", "layer_types",
    "sliding_window", "qk_norm", "kv_cache", "hilnas_name", "kv_prediction"};

// Read for one family only; in another family's config they are refused.
struct FamilyKey {
  const char* name;
  ConfigFamily family;
};
// A key two families read has an entry for each.
constexpr FamilyKey kFamilyKeys[] = {
    {"no_rope_layers", ConfigFamily::kSmolLm3},
    {"no_rope_layer_interval", ConfigFamily::kSmolLm3},
    {"no_rope_layers", ConfigFamily::kLlama4},
    {"no_rope_layer_interval", ConfigFamily::kLlama4},
    {"use_qk_norm", ConfigFamily::kLlama4},
    {"intermediate_size_mlp", ConfigFamily::kLlama4},
    {"attention_chunk_size", ConfigFamily::kLlama4},
    {"attn_temperature_tuning", ConfigFamily::kLlama4},
    {"floor_scale", ConfigFamily::kLlama4},
    {"attn_scale", ConfigFamily::kLlama4},
    {"moe_layers", ConfigFamily::kLlama4},
    {"interleave_moe_layer_step", ConfigFamily::kLlama4},
    {"num_local_experts", ConfigFamily::kLlama4},
    {"num_experts_per_tok", ConfigFamily::kLlama4},
    {"hidden_activation", ConfigFamily::kGemma3},
    {"query_pre_attn_scalar", ConfigFamily::kGemma3},
    {"rope_local_base_freq", ConfigFamily::kGemma3},
    {"sliding_window_pattern", ConfigFamily::kGemma3},
    {"_sliding_window_pattern", ConfigFamily::kGemma3},
};

// Bookkeeping, token ids and context limits the RoPE types hilnas runs do
// not read (default, linear and llama3 ignore max_position_embeddings;
// llama3 reads original_max_position_embeddings).
constexpr InertKey kInertEverywhere[] = {
    {"_name_or_path", nullptr},   {"transformers_version", nullptr},
    {"torch_dtype", nullptr},     {"dtype", nullptr},
    {"use_cache", nullptr},       {"initializer_range", nullptr},
    {"bos_token_id", nullptr},    {"eos_token_id", nullptr},
    {"pad_token_id", nullptr},    {"max_position_embeddings", nullptr},
    {"tokenizer_class", nullptr}, {"output_attentions", nullptr},
    {"output_hidden_states", nullptr}, {"return_dict", nullptr},
    // hilnas trains without dropout and rotates every dimension.
    {"attention_dropout", "0"},   {"partial_rotary_factor", "1"},
};

struct FamilyInfo {
  ConfigFamily family;
  const char* class_name;
  const char* model_type;
  std::vector<InertKey> inert;
};

const std::vector<FamilyInfo>& Families() {
  static const std::vector<FamilyInfo> kFamilies = {
      // pretraining_tp > 1 slices the projections into equal sums (the same
      // numbers); is_llama_config is nanotron's marker in SmolLM2's config;
      // rope_interleaved false is the half-split rotation hilnas runs.
      {ConfigFamily::kLlama,
       "LlamaForCausalLM",
       "llama",
       {{"pretraining_tp", nullptr}, {"is_llama_config", nullptr}, {"rope_interleaved", "false"}}},
      // Qwen's window settings take effect only with use_sliding_window.
      {ConfigFamily::kQwen3,
       "Qwen3ForCausalLM",
       "qwen3",
       {{"use_sliding_window", "false"}, {"max_window_layers", nullptr}}},
      // Qwen2 / Qwen2.5: Llama with biased q/k/v projections (the class
      // hard-codes them; the config has no switch). Window settings as Qwen3's.
      {ConfigFamily::kQwen2,
       "Qwen2ForCausalLM",
       "qwen2",
       {{"use_sliding_window", "false"}, {"max_window_layers", nullptr}}},
      // SmolLM3: Llama with NoPE layers (no_rope_layers, else every
      // no_rope_layer_interval-th layer); pretraining_tp as Llama's.
      {ConfigFamily::kSmolLm3,
       "SmolLM3ForCausalLM",
       "smollm3",
       {{"use_sliding_window", "false"},
        {"max_window_layers", nullptr},
        {"pretraining_tp", nullptr}}},
      // Gemma 3 text (Gemma3ForCausalLM, the 270M and 1B checkpoints):
      // cache_implementation picks a cache class, not numbers; soft-capping
      // keys are read only when null (skipped), else refused as unknown.
      {ConfigFamily::kGemma3,
       "Gemma3ForCausalLM",
       "gemma3_text",
       {{"cache_implementation", nullptr}, {"use_bidirectional_attention", "false"}}},
      // Llama 4 text (Llama4ForCausalLM; MobileLLM-R1 ships as it), dense
      // layers only: the expert width `intermediate_size` is unused without
      // expert layers (ReadLlama4 refuses them); the router's settings are
      // training-time; for_llm_compressor marks a quantisation recipe.
      {ConfigFamily::kLlama4,
       "Llama4ForCausalLM",
       "llama4_text",
       {{"cache_implementation", nullptr},
        {"for_llm_compressor", nullptr},
        {"router_aux_loss_coef", nullptr},
        {"router_jitter_noise", nullptr},
        {"output_router_logits", nullptr}}},
      // auto_map names the remote modelling code hilnas implements itself.
      {ConfigFamily::kMobileLlm,
       "MobileLLMForCausalLM",
       "mobilellm",
       {{"pretraining_tp", nullptr},
        {"auto_map", nullptr},
        {"share_embedding", nullptr},
        {"layer_sharing", "false"}}},
  };
  return kFamilies;
}

absl::Status Refuse(const std::string& path, const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", field, " ", why));
}

// The family from `architectures` and `model_type`; at least one must be
// set, and where both are they must name the same family.
absl::StatusOr<const FamilyInfo*> ReadFamily(const json& j, const std::string& path) {
  const FamilyInfo* by_class = nullptr;
  const FamilyInfo* by_type = nullptr;
  std::vector<std::string> known_classes, known_types;
  for (const FamilyInfo& f : Families()) {
    known_classes.push_back(f.class_name);
    known_types.push_back(f.model_type);
  }
  if (Present(j, "architectures")) {
    const json& archs = j["architectures"];
    if (!archs.is_array() || archs.size() != 1 || !archs[0].is_string()) {
      return Refuse(path, "architectures", absl::StrCat(archs.dump(), " is not one class name"));
    }
    for (const FamilyInfo& f : Families()) {
      if (archs[0] == f.class_name) by_class = &f;
    }
    if (by_class == nullptr) {
      return Refuse(path, "architectures",
                    absl::StrCat(archs[0].dump(), " is not supported (",
                                 absl::StrJoin(known_classes, ", "), ")"));
    }
  }
  if (Present(j, "model_type")) {
    for (const FamilyInfo& f : Families()) {
      if (j["model_type"] == f.model_type) by_type = &f;
    }
    if (by_type == nullptr) {
      return Refuse(path, "model_type",
                    absl::StrCat(j["model_type"].dump(), " is not supported (",
                                 absl::StrJoin(known_types, ", "), ")"));
    }
  }
  if (by_class == nullptr && by_type == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": neither \"architectures\" nor \"model_type\" is set, so the model family (and "
              "what it computes) is unknown; add e.g. \"architectures\": [\"LlamaForCausalLM\"]"));
  }
  if (by_class != nullptr && by_type != nullptr && by_class != by_type) {
    return Refuse(path, "architectures",
                  absl::StrCat(j["architectures"].dump(), " and model_type ",
                               j["model_type"].dump(), " name different families"));
  }
  return by_class != nullptr ? by_class : by_type;
}

const InertKey* FindInert(const FamilyInfo& family, const std::string& key) {
  for (const InertKey& k : family.inert) {
    if (key == k.name) return &k;
  }
  for (const InertKey& k : kInertEverywhere) {
    if (key == k.name) return &k;
  }
  return nullptr;
}

// Every top-level key is read, inert for the family, or refused by name.
absl::Status CheckEveryKeyKnown(const json& j, const std::string& path, const FamilyInfo& family) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (it.value().is_null()) continue;
    if (std::find(std::begin(kReadKeys), std::end(kReadKeys), key) != std::end(kReadKeys)) {
      continue;
    }
    const bool read_here =
        std::any_of(std::begin(kFamilyKeys), std::end(kFamilyKeys), [&](const FamilyKey& k) {
          return key == k.name && k.family == family.family;
        });
    if (read_here) continue;
    const FamilyKey* owned = std::find_if(std::begin(kFamilyKeys), std::end(kFamilyKeys),
                                          [&](const FamilyKey& k) { return key == k.name; });
    if (owned != std::end(kFamilyKeys)) {
      return Refuse(path, absl::StrCat("field \"", key, "\""),
                    absl::StrCat(it.value().dump(), " is ", ConfigFamilyClass(owned->family),
                                 "'s, not read for ", family.class_name,
                                 "; refused rather than ignored"));
    }
    const InertKey* inert = FindInert(family, key);
    if (inert != nullptr && inert->only_value == nullptr) continue;
    if (inert != nullptr && it.value() == json::parse(inert->only_value)) continue;
    if (inert != nullptr) {
      return Refuse(path, absl::StrCat("field \"", key, "\""),
                    absl::StrCat(it.value().dump(), ": hilnas computes ", family.class_name,
                                 " as with ", inert->only_value, "; refused rather than ignored"));
    }
    return Refuse(path, absl::StrCat("field \"", key, "\""),
                  absl::StrCat(it.value().dump(), " is not a field hilnas reads for ",
                               family.class_name,
                               " and may change what the model computes; refused rather than "
                               "ignored"));
  }
  return absl::OkStatus();
}

// ---- RoPE: transformers 4's rope_theta/rope_scaling, 5's rope_parameters ----

struct Rope {
  std::optional<double> theta;
  RopeScaling scaling;
};

std::string DescribeScaling(const RopeScaling& r) {
  switch (r.kind) {
    case RopeScaling::Kind::kNone:
      return "default (no scaling)";
    case RopeScaling::Kind::kLinear:
      return absl::StrFormat("linear, factor %g", r.factor);
    case RopeScaling::Kind::kLlama3:
      return absl::StrFormat(
          "llama3, factor %g, low_freq_factor %g, high_freq_factor %g, "
          "original_max_position_embeddings %d",
          r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings);
  }
  return "?";
}

// One RoPE object (`rope_scaling`, `rope_parameters`, or one layer kind's
// entry of it). Only the keys its type reads are accepted: a parameter
// hilnas would not apply is refused by name.
absl::StatusOr<Rope> ParseRopeObject(const json& s, const std::string& where, const json& top,
                                     const std::string& path) {
  if (!s.is_object()) return Refuse(path, where, absl::StrCat(s.dump(), " is not an object"));
  if (Present(s, "rope_type") && Present(s, "type") && s["rope_type"] != s["type"]) {
    return Refuse(path, where,
                  absl::StrCat("rope_type ", s["rope_type"].dump(), " and type ", s["type"].dump(),
                               " disagree"));
  }
  const json type = Present(s, "rope_type") ? s["rope_type"] : s.value("type", json("default"));
  std::vector<std::string> allowed = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
  Rope r;
  const std::string at = absl::StrCat(path, " ", where);
  if (type == "linear") {
    r.scaling.kind = RopeScaling::Kind::kLinear;
    allowed.push_back("factor");
  } else if (type == "llama3") {
    r.scaling.kind = RopeScaling::Kind::kLlama3;
    allowed.insert(allowed.end(), {"factor", "low_freq_factor", "high_freq_factor",
                                   "original_max_position_embeddings"});
    HILNAS_ASSIGN_OR_RETURN(r.scaling.low_freq_factor,
                            Field<double>(s, at, "low_freq_factor", std::nullopt));
    HILNAS_ASSIGN_OR_RETURN(r.scaling.high_freq_factor,
                            Field<double>(s, at, "high_freq_factor", std::nullopt));
    // Inside the object where Hugging Face puts it, else at the top.
    HILNAS_ASSIGN_OR_RETURN(const int outer,
                            Field<int>(top, path, "original_max_position_embeddings", 8192));
    HILNAS_ASSIGN_OR_RETURN(r.scaling.original_max_position_embeddings,
                            Field<int>(s, at, "original_max_position_embeddings", outer));
  } else if (type != "default") {
    return Refuse(path, absl::StrCat(where, ".rope_type"),
                  absl::StrCat(type.dump(), " is not supported (default, linear, llama3)"));
  }
  if (r.scaling.kind != RopeScaling::Kind::kNone) {
    HILNAS_ASSIGN_OR_RETURN(r.scaling.factor, Field<double>(s, at, "factor", std::nullopt));
  }
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
      return Refuse(path, absl::StrCat(where, ".", it.key()),
                    absl::StrCat(it.value().dump(), " is not read for rope_type ", type.dump(),
                                 "; refused rather than ignored"));
    }
  }
  if (Present(s, "partial_rotary_factor") && s["partial_rotary_factor"] != 1) {
    return Refuse(path, absl::StrCat(where, ".partial_rotary_factor"),
                  absl::StrCat(s["partial_rotary_factor"].dump(),
                               ": hilnas rotates every dimension of a head"));
  }
  if (Present(s, "rope_theta")) {
    HILNAS_ASSIGN_OR_RETURN(r.theta, Field<double>(s, at, "rope_theta", std::nullopt));
  }
  return r;
}

const char* LayerKindKey(Attention a) {
  return a == Attention::kSlidingWindow ? "sliding_attention" : "full_attention";
}

// transformers 5 keys rope_parameters by layer kind where a family has
// several ({"full_attention": {...}, "sliding_attention": {...}}). hilnas
// runs one RoPE, so the kinds the model uses must agree.
bool IsPerLayerKind(const json& p) {
  if (!p.is_object() || p.empty()) return false;
  for (auto it = p.begin(); it != p.end(); ++it) {
    if (!it.value().is_object()) return false;
  }
  return true;
}

absl::StatusOr<Rope> ReadRopeParameters(const json& j, const std::string& path, Arch& arch) {
  const std::vector<Attention>& layers = arch.attention;
  const json& p = j["rope_parameters"];
  if (!IsPerLayerKind(p)) return ParseRopeObject(p, "rope_parameters", j, path);
  if (arch.gemma) {
    // Gemma 3 rotates window layers with their own base, unscaled (the
    // local_rope_theta hilnas runs), full layers with the global RoPE.
    if (p.contains("sliding_attention")) {
      HILNAS_ASSIGN_OR_RETURN(Rope local, ParseRopeObject(p["sliding_attention"],
                                                          "rope_parameters.sliding_attention",
                                                          j, path));
      if (local.scaling.kind != RopeScaling::Kind::kNone) {
        return Refuse(path, "rope_parameters.sliding_attention",
                      "is scaled: Gemma's window layers run unscaled RoPE in hilnas");
      }
      if (local.theta) arch.local_rope_theta = *local.theta;
    }
    if (!p.contains("full_attention")) return Rope{};
    return ParseRopeObject(p["full_attention"], "rope_parameters.full_attention", j, path);
  }
  std::optional<Rope> chosen;
  std::string chosen_kind;
  for (auto it = p.begin(); it != p.end(); ++it) {
    const std::string where = absl::StrCat("rope_parameters.", it.key());
    if (it.key() != "full_attention" && it.key() != "sliding_attention") {
      return Refuse(path, where, "is not a layer kind hilnas runs (full_attention, "
                                 "sliding_attention)");
    }
    HILNAS_ASSIGN_OR_RETURN(Rope r, ParseRopeObject(it.value(), where, j, path));
    const bool used = std::any_of(layers.begin(), layers.end(), [&](Attention a) {
      return a != Attention::kSkip && it.key() == LayerKindKey(a);
    });
    if (!used) continue;
    if (chosen && (chosen->theta != r.theta || !(chosen->scaling == r.scaling))) {
      return Refuse(path, where,
                    absl::StrCat("differs from rope_parameters.", chosen_kind,
                                 " (hilnas runs one RoPE for every layer): ", it.value().dump(),
                                 " vs ", p[chosen_kind].dump()));
    }
    chosen = r;
    chosen_kind = it.key();
  }
  for (Attention a : layers) {
    if (a != Attention::kSkip && !p.contains(LayerKindKey(a))) {
      return Refuse(path, "rope_parameters",
                    absl::StrCat("has no entry for ", LayerKindKey(a), " layers"));
    }
  }
  return chosen ? *chosen : Rope{};
}

absl::Status ReadRope(const json& j, const std::string& path, Arch& a) {
  std::optional<double> top_theta;
  if (Present(j, "rope_theta")) {
    HILNAS_ASSIGN_OR_RETURN(top_theta, Field<double>(j, path, "rope_theta", std::nullopt));
  }
  std::optional<Rope> old_form, new_form;
  if (Present(j, "rope_scaling")) {
    HILNAS_ASSIGN_OR_RETURN(old_form, ParseRopeObject(j["rope_scaling"], "rope_scaling", j, path));
  }
  if (Present(j, "rope_parameters")) {
    HILNAS_ASSIGN_OR_RETURN(new_form, ReadRopeParameters(j, path, a));
  }
  std::optional<double> theta = top_theta;
  if (new_form && new_form->theta) {
    if (top_theta && *top_theta != *new_form->theta) {
      return Refuse(path, "rope_theta",
                    absl::StrCat(*top_theta, " and rope_parameters.rope_theta ",
                                 *new_form->theta, " disagree; which one holds is unknown"));
    }
    theta = new_form->theta;
  }
  if (old_form && old_form->theta && theta && *old_form->theta != *theta) {
    return Refuse(path, "rope_scaling.rope_theta",
                  absl::StrCat(*old_form->theta, " disagrees with rope_theta ", *theta));
  }
  // transformers' defaults: 10000 (Llama's family), 1e6 (Gemma3TextConfig),
  // 500000 (Llama4TextConfig).
  a.rope_theta = theta.value_or(a.gemma ? 1e6 : a.llama4 ? 500000.0 : 10000.0);
  if (old_form && new_form && !(old_form->scaling == new_form->scaling)) {
    return Refuse(path, "rope_scaling",
                  absl::StrCat("(", DescribeScaling(old_form->scaling),
                               ") and rope_parameters (", DescribeScaling(new_form->scaling),
                               ") disagree; which one holds is unknown"));
  }
  a.rope_scaling = new_form ? new_form->scaling : old_form ? old_form->scaling : RopeScaling();
  return absl::OkStatus();
}

// ---- The rest of the fields ----

// What the family computes that hilnas does not: refused, naming the field.
absl::Status RefuseWhatHilnasDoesNotRun(const json& j, const std::string& path,
                                        const FamilyInfo& family) {
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (Present(j, bias) && j[bias] != false) {
      return Refuse(path, bias, absl::StrCat(j[bias].dump(), ": biased projections are not supported"));
    }
  }
  if (family.family == ConfigFamily::kGemma3) {
    if (Present(j, "hidden_act")) {
      return Refuse(path, "hidden_act",
                    absl::StrCat(j["hidden_act"].dump(),
                                 ": Gemma 3 reads hidden_activation; which one holds is unknown"));
    }
    if (Present(j, "hidden_activation") && j["hidden_activation"] != "gelu_pytorch_tanh") {
      return Refuse(path, "hidden_activation",
                    absl::StrCat(j["hidden_activation"].dump(),
                                 " is not supported (GeGLU with gelu_pytorch_tanh)"));
    }
  }
  if (family.family != ConfigFamily::kGemma3 && Present(j, "hidden_act") &&
      j["hidden_act"] != "silu") {
    return Refuse(path, "hidden_act",
                  absl::StrCat(j["hidden_act"].dump(), " is not supported (SwiGLU with silu)"));
  }
  // MobileLLM's layer sharing repeats blocks, which hilnas does not run.
  if (family.family == ConfigFamily::kMobileLlm && Present(j, "layer_sharing") &&
      j["layer_sharing"] != false) {
    return Refuse(path, "layer_sharing",
                  absl::StrCat(j["layer_sharing"].dump(), ": repeated blocks are not supported"));
  }
  if (Present(j, "use_sliding_window") && j["use_sliding_window"] != false) {
    return Refuse(path, "use_sliding_window",
                  "true: Qwen-style window layers are not supported (layer_types and "
                  "sliding_window say which layers use a window)");
  }
  return absl::OkStatus();
}

absl::Status ReadDimensions(const json& j, const std::string& path, const FamilyInfo& family,
                            Arch& a) {
  const bool llama4 = family.family == ConfigFamily::kLlama4;
  HILNAS_ASSIGN_OR_RETURN(a.d_model, Field<int>(j, path, "hidden_size", std::nullopt));
  if (llama4) {
    // Llama4TextConfig: dense layers are intermediate_size_mlp wide
    // (default 16384); intermediate_size is the experts'.
    HILNAS_ASSIGN_OR_RETURN(a.d_ffn, Field<int>(j, path, "intermediate_size_mlp", 16384));
  } else {
    HILNAS_ASSIGN_OR_RETURN(a.d_ffn, Field<int>(j, path, "intermediate_size", std::nullopt));
  }
  HILNAS_ASSIGN_OR_RETURN(a.num_layers, Field<int>(j, path, "num_hidden_layers", std::nullopt));
  HILNAS_ASSIGN_OR_RETURN(a.num_heads, Field<int>(j, path, "num_attention_heads", std::nullopt));
  HILNAS_ASSIGN_OR_RETURN(a.vocab_size, Field<int>(j, path, "vocab_size", std::nullopt));
  HILNAS_ASSIGN_OR_RETURN(a.num_kv_heads, Field<int>(j, path, "num_key_value_heads", a.num_heads));
  // Llama4TextConfig's head_dim defaults to 128, not hidden / heads.
  const int derived_head_dim = llama4 ? 128 : a.num_heads > 0 ? a.d_model / a.num_heads : 0;
  HILNAS_ASSIGN_OR_RETURN(a.head_dim, Field<int>(j, path, "head_dim", derived_head_dim));
  HILNAS_ASSIGN_OR_RETURN(a.norm_eps, Field<double>(j, path, "rms_norm_eps", llama4 ? 1e-5 : 1e-6));
  const bool gemma = family.family == ConfigFamily::kGemma3;
  // Gemma3TextConfig ties the head unless told otherwise (1B's config omits it).
  HILNAS_ASSIGN_OR_RETURN(a.tie_embeddings, Field<bool>(j, path, "tie_word_embeddings", gemma));
  // MobileLLM (Liu et al. 2024): `share_embedding` ties the head to the
  // embedding whatever tie_word_embeddings says.
  if (family.family == ConfigFamily::kMobileLlm) {
    HILNAS_ASSIGN_OR_RETURN(a.tie_embeddings, Field<bool>(j, path, "share_embedding", true));
  }
  a.qkv_bias = family.family == ConfigFamily::kQwen2;
  const bool qwen3 = family.family == ConfigFamily::kQwen3;
  HILNAS_ASSIGN_OR_RETURN(a.qk_norm, Field<bool>(j, path, "qk_norm", qwen3 || gemma));
  if ((qwen3 || gemma) && !a.qk_norm) {
    return Refuse(path, "qk_norm",
                  absl::StrCat("false: ", family.class_name, " normalises queries and keys"));
  }
  if (gemma) {
    a.gemma = true;
    HILNAS_ASSIGN_OR_RETURN(a.local_rope_theta,
                            Field<double>(j, path, "rope_local_base_freq", 10000.0));
    // Scores are scaled by query_pre_attn_scalar^-1/2; the runtime's
    // kernels scale by head_dim^-1/2, as llama.cpp's gemma3 does for every
    // size but 27B.
    HILNAS_ASSIGN_OR_RETURN(const double scalar,
                            Field<double>(j, path, "query_pre_attn_scalar", 256.0));
    if (scalar != a.head_dim) {
      return Refuse(path, "query_pre_attn_scalar",
                    absl::StrCat(scalar, " differs from head_dim ", a.head_dim,
                                 ": hilnas scales attention scores by head_dim^-1/2"));
    }
  }
  if (llama4) {
    a.llama4 = true;
    HILNAS_ASSIGN_OR_RETURN(a.qk_l2_norm, Field<bool>(j, path, "use_qk_norm", true));
  }
  HILNAS_ASSIGN_OR_RETURN(a.sliding_window, Field<int>(j, path, "sliding_window", 0));
  if (Present(j, "hilnas_name") && j["hilnas_name"].is_string()) a.name = j["hilnas_name"];
  if (Present(j, "kv_cache") && j["kv_cache"] == "slim") a.kv_cache = KvLayout::kSlim;
  return absl::OkStatus();
}

absl::Status ReadLayerKinds(const json& j, const std::string& path, const FamilyInfo& family,
                            Arch& a) {
  if (!Present(j, "layer_types") && family.family == ConfigFamily::kGemma3) {
    // Gemma3TextConfig: layer i is global when (i + 1) % pattern == 0.
    const char* key = Present(j, "sliding_window_pattern") ? "sliding_window_pattern"
                                                           : "_sliding_window_pattern";
    HILNAS_ASSIGN_OR_RETURN(const int pattern, Field<int>(j, path, key, 6));
    if (pattern < 1) return Refuse(path, key, absl::StrCat(pattern, " must be positive"));
    for (int i = 0; i < a.num_layers; ++i) {
      a.attention.push_back((i + 1) % pattern == 0 ? Attention::kFull
                                                   : Attention::kSlidingWindow);
    }
    return absl::OkStatus();
  }
  if (!Present(j, "layer_types")) {
    a.attention.assign(std::max(a.num_layers, 0), Attention::kFull);
    return absl::OkStatus();
  }
  if (!j["layer_types"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": field \"layer_types\" is not an array"));
  }
  for (size_t i = 0; i < j["layer_types"].size(); ++i) {
    const json& t = j["layer_types"][i];
    if (t == "full_attention") {
      a.attention.push_back(Attention::kFull);
    } else if (t == "sliding_attention") {
      a.attention.push_back(Attention::kSlidingWindow);
    } else if (t == "skip_attention") {
      a.attention.push_back(Attention::kSkip);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": layer_types[", i, "] ", t.dump(),
                       " is not full_attention, sliding_attention or skip_attention"));
    }
  }
  return absl::OkStatus();
}

// Llama 4 text (Llama4TextConfig and Llama4TextAttention): NoPE layers from
// no_rope_layers (1 = RoPE, as SmolLM3's) or every no_rope_layer_interval-th
// (default 4); layer_types full_attention or chunked_attention (default:
// chunked where the layer rotates) with attention_chunk_size (default
// 8192); attention temperature tuning (default on) scales NoPE layers'
// queries by position; expert layers from moe_layers, else every
// interleave_moe_layer_step-th (default 1: all).
absl::Status ReadLlama4(const json& j, const std::string& path, Arch& a) {
  const int n = a.num_layers;
  HILNAS_ASSIGN_OR_RETURN(const int interval, Field<int>(j, path, "no_rope_layer_interval", 4));
  const bool listed = Present(j, "no_rope_layers") && !j["no_rope_layers"].empty();
  if (!listed) {
    if (interval < 1) {
      return Refuse(path, "no_rope_layer_interval", absl::StrCat(interval, " must be positive"));
    }
    for (int i = 0; i < n; ++i) a.no_rope.push_back((i + 1) % interval == 0);
  } else {
    // Llama4TextAttention reads entry i for layer i: a longer list's tail is unread.
    const json& flags = j["no_rope_layers"];
    if (!flags.is_array() || static_cast<int64_t>(flags.size()) < n) {
      return Refuse(path, "no_rope_layers",
                    absl::StrCat(flags.dump().substr(0, 80), " has no flag for each of the ", n,
                                 " layers"));
    }
    for (int i = 0; i < n; ++i) {
      if (flags[i] != 0 && flags[i] != 1) {
        return Refuse(path, absl::StrCat("no_rope_layers[", i, "]"),
                      absl::StrCat(flags[i].dump(), " is not 1 (RoPE) or 0 (NoPE)"));
      }
      a.no_rope.push_back(flags[i] == 0);
    }
  }
  const bool any_nope = std::find(a.no_rope.begin(), a.no_rope.end(), true) != a.no_rope.end();
  if (!any_nope) a.no_rope.clear();  // every layer rotates: hilnas's empty list

  // Expert layers.
  if (Present(j, "moe_layers")) {
    if (!j["moe_layers"].is_array() || !j["moe_layers"].empty()) {
      return Refuse(path, "moe_layers",
                    absl::StrCat(j["moe_layers"].dump().substr(0, 80),
                                 ": mixture-of-experts layers are not supported (dense Llama 4 "
                                 "text, as MobileLLM-R1, has moe_layers [])"));
    }
  } else {
    HILNAS_ASSIGN_OR_RETURN(const int step, Field<int>(j, path, "interleave_moe_layer_step", 1));
    // list(range(step - 1, n, step)): empty for step > n (or negative); 0 raises.
    if (step == 0 || (step >= 1 && step <= n)) {
      return Refuse(path, "moe_layers",
                    absl::StrCat("is absent, so Llama4TextConfig derives expert layers from "
                                 "interleave_moe_layer_step ", step,
                                 "; mixture-of-experts layers are not supported (give "
                                 "\"moe_layers\": [] for a dense model)"));
    }
  }

  // Attention temperature tuning: NoPE layers' queries times
  // log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1.
  if (Present(j, "attn_temperature_tuning")) {
    const json& t = j["attn_temperature_tuning"];
    if (!t.is_boolean() && !t.is_number()) {
      return Refuse(path, "attn_temperature_tuning", absl::StrCat(t.dump(), " is not a flag"));
    }
  }
  const bool tuning = !Present(j, "attn_temperature_tuning") ||
                      (j["attn_temperature_tuning"].is_boolean()
                           ? j["attn_temperature_tuning"].get<bool>()
                           : j["attn_temperature_tuning"].get<double>() != 0);
  HILNAS_ASSIGN_OR_RETURN(const double floor_scale, Field<double>(j, path, "floor_scale", 8192.0));
  HILNAS_ASSIGN_OR_RETURN(const double attn_scale, Field<double>(j, path, "attn_scale", 0.1));
  if (tuning) {
    // The class divides by floor_scale: zero or negative would give
    // infinities or a log of a non-positive number.
    if (!(floor_scale > 0 && std::isfinite(floor_scale))) {
      return Refuse(path, "floor_scale",
                    absl::StrCat(floor_scale, " must be positive (attn_temperature_tuning is on)"));
    }
    if (!std::isfinite(attn_scale)) {
      return Refuse(path, "attn_scale", absl::StrCat(attn_scale, " must be finite"));
    }
    a.temperature_floor_scale = floor_scale;
    a.temperature_attn_scale = attn_scale;
  }

  // Chunked layers.
  std::optional<int> chunk;
  if (Present(j, "attention_chunk_size")) {
    HILNAS_ASSIGN_OR_RETURN(chunk, Field<int>(j, path, "attention_chunk_size", std::nullopt));
    if (*chunk < 1) {
      return Refuse(path, "attention_chunk_size", absl::StrCat(*chunk, " must be positive"));
    }
  } else if (!Present(j, "layer_types")) {
    chunk = 8192;  // Llama4TextConfig's default, used by the derived layer_types
  }
  std::vector<bool> chunked;
  for (int i = 0; i < n; ++i) chunked.push_back(a.rotates(i));
  if (Present(j, "layer_types")) {
    const json& types = j["layer_types"];
    if (!types.is_array() || static_cast<int64_t>(types.size()) != n) {
      return Refuse(path, "layer_types",
                    absl::StrCat(types.dump().substr(0, 80), " is not one kind per layer (", n,
                                 ")"));
    }
    bool all_full = true, derived = true;
    for (int i = 0; i < n; ++i) {
      if (types[i] != "full_attention" && types[i] != "chunked_attention") {
        return Refuse(path, absl::StrCat("layer_types[", i, "]"),
                      absl::StrCat(types[i].dump(),
                                   " is not full_attention or chunked_attention"));
      }
      all_full &= types[i] == "full_attention";
      derived &= (types[i] == "chunked_attention") == chunked[i];
    }
    if (!all_full && !derived) {
      return Refuse(path, "layer_types",
                    "chunks layers other than the RoPE layers: hilnas runs Llama 4 with every "
                    "layer full, or with exactly its RoPE layers chunked");
    }
    if (all_full) chunked.assign(n, false);
  }
  const bool any_chunked = std::find(chunked.begin(), chunked.end(), true) != chunked.end();
  if (any_chunked && !chunk) {
    return Refuse(path, "attention_chunk_size", "is missing, and layers are chunked_attention");
  }
  a.attention_chunk = any_chunked ? *chunk : 0;
  a.attention.assign(std::max(n, 0), Attention::kFull);
  a.sliding_window = 0;
  return absl::OkStatus();
}

absl::Status ReadLayerTypes(const json& j, const std::string& path, const FamilyInfo& family,
                            Arch& a) {
  if (family.family == ConfigFamily::kLlama4) return ReadLlama4(j, path, a);
  HILNAS_RETURN_IF_ERROR(ReadLayerKinds(j, path, family, a));
  // Qwen and SmolLM3 configs carry a window size they do not use
  // (use_sliding_window false, refused otherwise).
  if ((family.family == ConfigFamily::kQwen3 || family.family == ConfigFamily::kQwen2 ||
       family.family == ConfigFamily::kSmolLm3) &&
      std::count(a.attention.begin(), a.attention.end(), Attention::kSlidingWindow) == 0) {
    a.sliding_window = 0;
  }
  return absl::OkStatus();
}

// SmolLM3's NoPE layers: `no_rope_layers` (1 = the layer uses RoPE, 0 =
// NoPE) when given, else every `no_rope_layer_interval`-th layer (default 4)
// is NoPE, as SmolLM3Config derives them. Other families have neither key.
absl::Status ReadNoRope(const json& j, const std::string& path, const FamilyInfo& family,
                        Arch& a) {
  // Other families' configs with these keys were refused (kFamilyKeys).
  if (family.family != ConfigFamily::kSmolLm3) return absl::OkStatus();
  HILNAS_ASSIGN_OR_RETURN(const int interval, Field<int>(j, path, "no_rope_layer_interval", 4));
  if (!Present(j, "no_rope_layers")) {
    if (interval < 1) {
      return Refuse(path, "no_rope_layer_interval", absl::StrCat(interval, " must be positive"));
    }
    for (int i = 0; i < a.num_layers; ++i) a.no_rope.push_back((i + 1) % interval == 0);
    return absl::OkStatus();
  }
  const json& flags = j["no_rope_layers"];
  if (!flags.is_array() || static_cast<int64_t>(flags.size()) != a.num_layers) {
    return Refuse(path, "no_rope_layers",
                  absl::StrCat(flags.dump().substr(0, 80), " is not a list of num_hidden_layers (",
                               a.num_layers, ") flags"));
  }
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] != 0 && flags[i] != 1) {
      return Refuse(path, absl::StrCat("no_rope_layers[", i, "]"),
                    absl::StrCat(flags[i].dump(), " is not 1 (RoPE) or 0 (NoPE)"));
    }
    a.no_rope.push_back(flags[i] == 0);
  }
  return absl::OkStatus();
}

absl::Status ReadKvPrediction(const json& j, const std::string& path, Arch& a) {
  if (!Present(j, "kv_prediction")) return absl::OkStatus();
  const json& k = j["kv_prediction"];
  const std::string type = k.is_object() ? k.value("type", "") : "";
  if (type == "layer_pruned" && k.contains("ratio") && k["ratio"].is_number()) {
    a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
    a.kv_prediction.layer_pruned_ratio = k["ratio"].get<double>();
  } else if (type == "canonical") {
    const std::string aux_path = (std::filesystem::path(path).parent_path() /
                                  k.value("auxiliary", kAuxiliaryDir) / kConfigFile)
                                     .string();
    HILNAS_ASSIGN_OR_RETURN(Arch aux, ReadConfigJson(aux_path));
    a.kv_prediction.kind = KvPredictionSpec::Kind::kCanonical;
    a.kv_prediction.canonical = {aux};
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": field \"kv_prediction\" ", k.dump(),
        " is not {\"type\": \"layer_pruned\", \"ratio\": R} or {\"type\": \"canonical\"}"));
  }
  if (k.contains("layer_map") && k["layer_map"].is_array()) {
    for (const json& v : k["layer_map"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > kMaxLayers) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": kv_prediction.layer_map entry ",
                                                       v.dump(), " is not a layer index"));
      }
      a.kv_prediction.layer_map.push_back(static_cast<int>(v.get<int64_t>()));
    }
  }
  return absl::OkStatus();
}

const char* LayerTypeName(Attention a) {
  switch (a) {
    case Attention::kFull:
      return "full_attention";
    case Attention::kSlidingWindow:
      return "sliding_attention";
    case Attention::kSkip:
      return "skip_attention";
  }
  return "full_attention";
}

}  // namespace

const char* ConfigFamilyClass(ConfigFamily family) {
  for (const FamilyInfo& f : Families()) {
    if (f.family == family) return f.class_name;
  }
  return "?";
}

absl::StatusOr<Arch> ReadConfigJson(const std::string& path) {
  std::string text;
  HILNAS_RETURN_IF_ERROR(ReadFileToString(path, &text));
  return ParseConfigJson(text, path);
}

absl::StatusOr<Arch> ParseConfigJson(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse errors and number overflow (1e999)
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  HILNAS_ASSIGN_OR_RETURN(const FamilyInfo* family, ReadFamily(j, path));
  HILNAS_RETURN_IF_ERROR(CheckEveryKeyKnown(j, path, *family));
  HILNAS_RETURN_IF_ERROR(RefuseWhatHilnasDoesNotRun(j, path, *family));
  Arch a;
  HILNAS_RETURN_IF_ERROR(ReadDimensions(j, path, *family, a));
  HILNAS_RETURN_IF_ERROR(ReadLayerTypes(j, path, *family, a));
  HILNAS_RETURN_IF_ERROR(ReadNoRope(j, path, *family, a));
  HILNAS_RETURN_IF_ERROR(ReadRope(j, path, a));
  HILNAS_RETURN_IF_ERROR(ReadKvPrediction(j, path, a));
  absl::Status valid = ValidateArch(a);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", valid.message()));
  return a;
}

absl::Status WriteConfigJson(const Arch& a, const std::string& path) {
  // The family that computes what the arch does (ArchFamily; docs/checkpoints.md).
  const std::string family = ArchFamily(a);
  const FamilyInfo* info = nullptr;
  for (const FamilyInfo& f : Families()) {
    if (family == f.class_name) info = &f;
  }
  if (info == nullptr) return absl::InternalError(absl::StrCat("no config family ", family));
  json j = {{"architectures", {family}},
            {"model_type", info->model_type},
            {"hidden_size", a.d_model},
            {"intermediate_size", a.d_ffn},
            {"num_hidden_layers", a.num_layers},
            {"num_attention_heads", a.num_heads},
            {"num_key_value_heads", a.num_kv_heads},
            {"head_dim", a.head_dim},
            {"vocab_size", a.vocab_size},
            {"rms_norm_eps", a.norm_eps},
            {"rope_theta", a.rope_theta},
            {"tie_word_embeddings", a.tie_embeddings},
            {"hidden_act", "silu"},
            {"qk_norm", a.qk_norm},
            {"sliding_window", a.sliding_window},
            {"kv_cache", a.kv_cache == KvLayout::kSlim ? "slim" : "standard"},
            {"hilnas_name", a.name}};
  if (!a.qkv_bias) {  // Qwen2 has no switch: its q/k/v are always biased
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  if (a.gemma) {  // Gemma3TextConfig's names
    j.erase("hidden_act");
    j.erase("mlp_bias");
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["query_pre_attn_scalar"] = a.head_dim;
    j["rope_local_base_freq"] = a.local_rope_theta > 0 ? a.local_rope_theta : a.rope_theta;
  }
  json types = json::array();
  for (Attention at : a.attention) types.push_back(LayerTypeName(at));
  j["layer_types"] = types;
  if (a.llama4) {
    // Llama4TextConfig's names; every default that would change the model
    // written out (its defaults make every 4th layer NoPE and every layer
    // an expert layer).
    j.erase("qk_norm");
    j.erase("sliding_window");
    j["intermediate_size_mlp"] = a.d_ffn;
    j["use_qk_norm"] = a.qk_l2_norm;
    json flags = json::array(), kinds = json::array();
    for (int i = 0; i < a.num_layers; ++i) {
      flags.push_back(a.rotates(i) ? 1 : 0);
      kinds.push_back(a.attention_chunk > 0 && a.rotates(i) ? "chunked_attention"
                                                           : "full_attention");
    }
    j["no_rope_layers"] = flags;
    j["layer_types"] = kinds;
    j["attention_chunk_size"] = a.attention_chunk > 0 ? a.attention_chunk : 8192;
    j["attn_temperature_tuning"] = a.temperature_floor_scale > 0;
    if (a.temperature_floor_scale > 0) {
      j["floor_scale"] = a.temperature_floor_scale;
      j["attn_scale"] = a.temperature_attn_scale;
    }
    j["moe_layers"] = json::array();
    j["num_local_experts"] = 0;
    j["num_experts_per_tok"] = 0;
    j["interleave_moe_layer_step"] = 0;
  } else if (!a.no_rope.empty()) {  // SmolLM3: 1 = RoPE, 0 = NoPE
    json flags = json::array();
    for (bool nope : a.no_rope) flags.push_back(nope ? 0 : 1);
    j["no_rope_layers"] = flags;
  }
  if (const RopeScaling& r = a.rope_scaling; r.kind == RopeScaling::Kind::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", r.factor}};
  } else if (r.kind == RopeScaling::Kind::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
  }
  // KV Prediction: the auxiliary model of a canonical (KVP-C) pair is the
  // checkpoint in the auxiliary/ folder beside this file.
  const KvPredictionSpec& kvp = a.kv_prediction;
  if (kvp.kind == KvPredictionSpec::Kind::kLayerPruned) {
    j["kv_prediction"] = {{"type", "layer_pruned"}, {"ratio", kvp.layer_pruned_ratio}};
  } else if (kvp.kind == KvPredictionSpec::Kind::kCanonical) {
    j["kv_prediction"] = {{"type", "canonical"}, {"auxiliary", kAuxiliaryDir}};
  }
  if (j.contains("kv_prediction") && !kvp.layer_map.empty()) {
    j["kv_prediction"]["layer_map"] = kvp.layer_map;
  }
  return WriteFileAtomically(path, j.dump(2) + "\n");
}

std::string DescribeArch(const Arch& a) {
  std::vector<std::string> lines;
  lines.push_back(absl::StrFormat("  layers %d, d_model %d, d_ffn %d, vocab %d", a.num_layers,
                                  a.d_model, a.d_ffn, a.vocab_size));
  lines.push_back(absl::StrCat("  family: ", ArchFamily(a)));
  lines.push_back(absl::StrFormat(
      "  attention: %d heads, %d KV heads, head_dim %d, QK-norm %s, q/k/v biases %s", a.num_heads,
      a.num_kv_heads, a.head_dim, a.qk_norm ? "on" : "off", a.qkv_bias ? "on" : "off"));
  if (!a.no_rope.empty()) {
    lines.push_back(
        absl::StrCat("  NoPE layers (no RoPE): ", absl::StrJoin(NoRopeLayers(a), ", ")));
  }
  if (a.llama4) {
    lines.push_back(absl::StrCat(
        "  Llama 4: QK L2-norm ", a.qk_l2_norm ? "on" : "off", " (RoPE layers), ",
        a.attention_chunk > 0
            ? absl::StrCat("RoPE layers chunked by ", a.attention_chunk,
                           " (attention within each chunk)")
            : std::string("every layer full")));
    if (a.temperature_floor_scale > 0) {
      lines.push_back(absl::StrFormat(
          "  attention temperature: NoPE queries x log(floor((pos + 1) / %g) + 1) * %g + 1",
          a.temperature_floor_scale, a.temperature_attn_scale));
    }
  }
  lines.push_back(absl::StrFormat("  RoPE: theta %g, %s", a.rope_theta,
                                  DescribeScaling(a.rope_scaling)));
  lines.push_back(absl::StrFormat("  RMSNorm epsilon %g", a.norm_eps));
  lines.push_back(absl::StrCat("  embeddings: ", a.tie_embeddings ? "tied (head = embedding)"
                                                                    : "untied head"));
  std::vector<std::string> kinds;
  for (Attention at : a.attention) kinds.push_back(LayerTypeName(at));
  lines.push_back(absl::StrCat("  layer kinds: ", PatternString(a.attention), " (",
                               absl::StrJoin(kinds, ", "), ")"));
  const bool windowed = std::count(a.attention.begin(), a.attention.end(),
                                   Attention::kSlidingWindow) > 0;
  lines.push_back(windowed ? absl::StrCat("  sliding window: ", a.sliding_window, " tokens")
                           : std::string("  sliding window: none (no sliding_attention layer)"));
  lines.push_back(absl::StrCat("  KV cache: ", a.kv_cache == KvLayout::kSlim ? "slim" : "standard"));
  return absl::StrJoin(lines, "\n");
}

}  // namespace hilnas
