#include "search_space/arch.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "util/status_macros.h"

namespace hilnas {

int Arch::num_attention_layers() const {
  return static_cast<int>(std::count_if(attention.begin(), attention.end(),
                                        [](Attention a) { return a != Attention::kSkip; }));
}

const char* ArchFamily(const Arch& a) {
  if (a.gemma) return "Gemma3ForCausalLM";
  if (a.llama4) return "Llama4ForCausalLM";
  if (a.qkv_bias) return "Qwen2ForCausalLM";
  if (!a.no_rope.empty()) return "SmolLM3ForCausalLM";
  if (a.qk_norm) return "Qwen3ForCausalLM";
  return "LlamaForCausalLM";
}

std::vector<int> NoRopeLayers(const Arch& a) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(a.no_rope.size()); ++i) {
    if (a.no_rope[i]) out.push_back(i);
  }
  return out;
}

// Llama4TextAttention (attn_temperature_tuning, after arXiv:2501.19399):
// log(floor((cache_position + 1) / floor_scale) + 1) * attn_scale + 1, on
// NoPE layers only.
double QueryTemperature(const Arch& a, int64_t position) {
  if (a.temperature_floor_scale <= 0) return 1.0;
  return std::log(std::floor((static_cast<double>(position) + 1.0) / a.temperature_floor_scale) +
                  1.0) *
             a.temperature_attn_scale +
         1.0;
}

const char* AttentionName(Attention a) {
  switch (a) {
    case Attention::kFull:
      return "full";
    case Attention::kSlidingWindow:
      return "swa";
    case Attention::kSkip:
      return "skip";
  }
  return "?";
}

bool AttentionFromProto(int proto_value, Attention* out) {
  switch (proto_value) {
    case FULL:
      *out = Attention::kFull;
      return true;
    case SLIDING_WINDOW:
      *out = Attention::kSlidingWindow;
      return true;
    case SKIP:
      *out = Attention::kSkip;
      return true;
    default:
      return false;
  }
}

AttentionType AttentionToProto(Attention a) {
  switch (a) {
    case Attention::kFull:
      return FULL;
    case Attention::kSlidingWindow:
      return SLIDING_WINDOW;
    case Attention::kSkip:
      return SKIP;
  }
  return ATTENTION_UNSPECIFIED;
}

std::string PatternString(const std::vector<Attention>& pattern) {
  std::string s;
  for (Attention a : pattern) {
    s += a == Attention::kFull ? 'F' : a == Attention::kSlidingWindow ? 'W' : 'S';
  }
  return s;
}

absl::StatusOr<std::vector<Attention>> ParsePattern(const std::string& pattern) {
  std::vector<Attention> out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    switch (pattern[i]) {
      case 'F':
        out.push_back(Attention::kFull);
        break;
      case 'W':
        out.push_back(Attention::kSlidingWindow);
        break;
      case 'S':
        out.push_back(Attention::kSkip);
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("pattern \"", pattern, "\": character ", i,
                                                       " '", std::string(1, pattern[i]),
                                                       "' is not F (full), W (SWA) or S (skip)"));
    }
  }
  return out;
}

int LongestEfficientRun(const std::vector<Attention>& pattern) {
  int longest = 0, run = 0;
  for (Attention a : pattern) {
    run = a == Attention::kFull ? 0 : run + 1;
    longest = std::max(longest, run);
  }
  return longest;
}

absl::StatusOr<std::vector<int>> LayerPrunedKeptLayers(int num_layers, double ratio) {
  if (!(ratio > 0 && ratio < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_prediction.layer_pruned_ratio ", ratio, " is not in (0, 1)"));
  }
  // Smallest q with ratio * q integral: ratios are simple fractions (Tab. 4).
  int p = 0, q = 0;
  for (int cand = 1; cand <= 64; ++cand) {
    const double scaled = ratio * cand;
    if (std::abs(scaled - std::round(scaled)) < 1e-9) {
      p = static_cast<int>(std::round(scaled));
      q = cand;
      break;
    }
  }
  if (q == 0) {
    return absl::InvalidArgumentError(absl::StrCat("kv_prediction.layer_pruned_ratio ", ratio,
                                                   " is not a fraction p/q with q <= 64"));
  }
  std::vector<int> kept;
  for (int i = 0; i < num_layers; ++i) {
    if (i % q < p) kept.push_back(i);
  }
  if (kept.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("kv_prediction.layer_pruned_ratio ", ratio,
                                                   " keeps no layer of ", num_layers));
  }
  return kept;
}

namespace {

// The paper's maps (Tab. 1) assume every layer has attention. With skip
// layers (MobileLLM-Flash's patterns), a base attention layer whose mapped
// auxiliary layer is a skip layer takes the nearest auxiliary attention
// layer before it, else after it. FAILED_PRECONDITION when the auxiliary
// model has no attention layer and the base has one.
absl::StatusOr<std::vector<int>> AvoidSkipLayers(const Arch& base, std::vector<int> map) {
  HILNAS_ASSIGN_OR_RETURN(Arch aux, AuxiliaryArch(base));
  std::vector<int> attention;
  for (int a = 0; a < aux.num_layers; ++a) {
    if (aux.attention[a] != Attention::kSkip) attention.push_back(a);
  }
  for (int i = 0; i < base.num_layers; ++i) {
    if (base.attention[i] == Attention::kSkip || aux.attention[map[i]] != Attention::kSkip)
      continue;
    if (attention.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kv_prediction: the auxiliary model keeps no attention layer to predict base layer ", i,
          "'s keys and values from"));
    }
    auto after = std::upper_bound(attention.begin(), attention.end(), map[i]);
    map[i] = after == attention.begin() ? *after : *(after - 1);
  }
  return map;
}

}  // namespace

absl::StatusOr<std::vector<int>> KvPredictionLayerMap(const Arch& base) {
  const KvPredictionSpec& kvp = base.kv_prediction;
  if (!kvp.layer_map.empty()) return kvp.layer_map;
  std::vector<int> map;
  map.reserve(base.num_layers);
  switch (kvp.kind) {
    case KvPredictionSpec::Kind::kNone:
      return absl::FailedPreconditionError(
          absl::StrCat("arch ", base.name, " has no KV-prediction auxiliary model"));
    case KvPredictionSpec::Kind::kLayerPruned: {
      HILNAS_ASSIGN_OR_RETURN(std::vector<int> kept,
                              LayerPrunedKeptLayers(base.num_layers, kvp.layer_pruned_ratio));
      int aux = -1;
      for (int i = 0; i < base.num_layers; ++i) {
        if (aux + 1 < static_cast<int>(kept.size()) && kept[aux + 1] <= i) ++aux;
        map.push_back(std::max(aux, 0));
      }
      return AvoidSkipLayers(base, std::move(map));
    }
    case KvPredictionSpec::Kind::kCanonical: {
      const int n_b = base.num_layers;
      const int n_a = kvp.canonical.at(0).num_layers;
      const int q = n_b / n_a, r = n_b % n_a;
      for (int a = 0; a < n_a; ++a) {
        for (int k = 0; k < (a < r ? q + 1 : q); ++k) map.push_back(a);
      }
      return AvoidSkipLayers(base, std::move(map));
    }
  }
  return map;
}

absl::StatusOr<Arch> AuxiliaryArch(const Arch& base) {
  const KvPredictionSpec& kvp = base.kv_prediction;
  switch (kvp.kind) {
    case KvPredictionSpec::Kind::kNone:
      break;
    case KvPredictionSpec::Kind::kCanonical:
      return kvp.canonical.at(0);
    case KvPredictionSpec::Kind::kLayerPruned: {
      HILNAS_ASSIGN_OR_RETURN(std::vector<int> kept,
                              LayerPrunedKeptLayers(base.num_layers, kvp.layer_pruned_ratio));
      Arch aux = base;
      aux.name =
          absl::StrCat(base.name, base.name.empty() ? "" : "-", "aux-lp-", kvp.layer_pruned_ratio);
      aux.kv_prediction = KvPredictionSpec{};
      aux.num_layers = static_cast<int>(kept.size());
      aux.attention.clear();
      aux.no_rope.clear();
      for (int i : kept) {
        aux.attention.push_back(base.attention[i]);
        if (!base.no_rope.empty()) aux.no_rope.push_back(base.no_rope[i]);
      }
      return aux;
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("arch ", base.name, " has no KV-prediction auxiliary model"));
}

namespace {

void CheckPositive(const char* field, double value, std::vector<std::string>* errors) {
  if (!(value > 0)) errors->push_back(absl::StrCat(field, " ", value, " must be positive"));
}

// Upper bounds no language model comes near (the largest published ones use
// ~126 layers, d_model 16384, d_ffn 53248, 128 heads of 128, vocabularies
// of ~260k): past them a value is a typo or an attack, and is refused before
// anything is sized from it. Every product the code forms from these fits
// in int64 (the memory estimate, counts.h, is checked separately).
void CheckAtMost(const char* field, int64_t value, int64_t max, std::vector<std::string>* errors) {
  if (value > max) {
    errors->push_back(absl::StrCat(field, " ", value, " exceeds the largest accepted, ", max));
  }
}

void ValidateKvPrediction(const Arch& arch, std::vector<std::string>* errors) {
  const KvPredictionSpec& kvp = arch.kv_prediction;
  if (kvp.kind == KvPredictionSpec::Kind::kNone) {
    if (!kvp.layer_map.empty()) {
      errors->push_back("kv_prediction.layer_map is set but no auxiliary model is chosen");
    }
    return;
  }
  int aux_layers = 0;
  if (kvp.kind == KvPredictionSpec::Kind::kLayerPruned) {
    auto kept = LayerPrunedKeptLayers(arch.num_layers, kvp.layer_pruned_ratio);
    if (!kept.ok()) {
      errors->push_back(std::string(kept.status().message()));
      return;
    }
    aux_layers = static_cast<int>(kept->size());
  } else {
    if (kvp.canonical.size() != 1) {
      errors->push_back("kv_prediction.canonical must hold exactly one auxiliary arch");
      return;
    }
    const Arch& aux = kvp.canonical[0];
    absl::Status s = ValidateArch(aux);
    if (!s.ok()) errors->push_back(absl::StrCat("kv_prediction.canonical: ", s.message()));
    if (aux.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
      errors->push_back("kv_prediction.canonical must not itself have an auxiliary model");
    }
    if (aux.vocab_size != arch.vocab_size) {
      errors->push_back(absl::StrCat("kv_prediction.canonical.vocab_size ", aux.vocab_size,
                                     " differs from the base's ", arch.vocab_size));
    }
    if (aux.num_layers > arch.num_layers) {
      errors->push_back(absl::StrCat("kv_prediction.canonical.num_layers ", aux.num_layers,
                                     " exceeds the base's ", arch.num_layers));
    }
    aux_layers = aux.num_layers;
  }
  if (kvp.layer_map.empty() && arch.num_attention_layers() > 0) {
    if (absl::StatusOr<Arch> aux = AuxiliaryArch(arch);
        aux.ok() && aux->num_attention_layers() == 0) {
      errors->push_back(
          "kv_prediction: the auxiliary model keeps no attention layer to predict the base's keys "
          "and values from");
    }
  }
  if (!kvp.layer_map.empty()) {
    if (static_cast<int>(kvp.layer_map.size()) != arch.num_layers) {
      errors->push_back(absl::StrCat("kv_prediction.layer_map has ", kvp.layer_map.size(),
                                     " entries, expected num_layers ", arch.num_layers));
    }
    for (size_t i = 0; i < kvp.layer_map.size(); ++i) {
      if (kvp.layer_map[i] < 0 || kvp.layer_map[i] >= aux_layers) {
        errors->push_back(absl::StrCat("kv_prediction.layer_map[", i, "] ", kvp.layer_map[i],
                                       " is not an auxiliary layer (0..", aux_layers - 1, ")"));
      }
    }
  }
}

}  // namespace

namespace {

// RoPE scaling's parameters, when the arch has any.
void CheckRopeScaling(const RopeScaling& r, std::vector<std::string>* errors_out) {
  std::vector<std::string>& errors = *errors_out;
  if (r.kind == RopeScaling::Kind::kNone) return;
  if (!(r.factor >= 1 && r.factor < 1e6)) {
    errors.push_back(absl::StrCat("rope_scaling.factor ", r.factor, " must be in [1, 1e6)"));
  }
  if (r.kind == RopeScaling::Kind::kLlama3 &&
      !(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
        r.high_freq_factor < 1e6 && r.original_max_position_embeddings > 0)) {
    errors.push_back(absl::StrCat("rope_scaling (llama3): want 0 < low_freq_factor (",
                                  r.low_freq_factor, ") < high_freq_factor (", r.high_freq_factor,
                                  ") and original_max_position_embeddings (",
                                  r.original_max_position_embeddings, ") > 0"));
  }
}

// What sets a family apart (ArchFamily), in combinations a family has and
// the runtime computes exactly.
void CheckFamily(const Arch& a, std::vector<std::string>* errors_out) {
  std::vector<std::string>& errors = *errors_out;
  if (!a.no_rope.empty() && static_cast<int>(a.no_rope.size()) != a.num_layers) {
    errors.push_back(absl::StrCat("no_rope has ", a.no_rope.size(),
                                  " entries, expected num_layers ", a.num_layers));
  }
  // Llama 4 has NoPE layers and its own QK-norm; the count is of the rest.
  const int features = int{a.qk_norm && !a.gemma} + int{a.qkv_bias} +
                       int{!a.no_rope.empty() && !a.llama4};
  if (features > 1) {
    errors.push_back(absl::StrCat(
        "qk_norm ", a.qk_norm, ", qkv_bias ", a.qkv_bias, " and no_rope (", a.no_rope.size(),
        " entries): at most one of them (Qwen3 normalises queries and keys, Qwen2 biases "
        "them, SmolLM3 skips RoPE in some layers; no published family does two)"));
  }
  if (a.gemma && !a.qk_norm) {
    errors.push_back("gemma without qk_norm: Gemma 3 normalises queries and keys");
  }
  if (a.gemma && (a.qkv_bias || !a.no_rope.empty())) {
    errors.push_back("gemma with qkv_bias or no_rope: Gemma 3 has neither");
  }
  if (!(a.local_rope_theta >= 0 && std::isfinite(a.local_rope_theta))) {
    errors.push_back(absl::StrCat("local_rope_theta ", a.local_rope_theta,
                                  " must be a finite base, or 0 for rope_theta"));
  }
  if (a.qk_l2_norm && !a.llama4) {
    errors.push_back("qk_l2_norm without llama4: only Llama 4 text divides queries and keys by "
                     "their RMS without a weight");
  }
  if (a.attention_chunk != 0 && !a.llama4) {
    errors.push_back(absl::StrCat("attention_chunk ", a.attention_chunk,
                                  " without llama4: only Llama 4 text chunks attention"));
  }
  if (a.attention_chunk < 0) {
    errors.push_back(absl::StrCat("attention_chunk ", a.attention_chunk,
                                  " must be a positive chunk size, or 0 for none"));
  }
  if (a.temperature_floor_scale != 0 && !a.llama4) {
    errors.push_back(absl::StrCat("temperature_floor_scale ", a.temperature_floor_scale,
                                  " without llama4: only Llama 4 text scales queries by position"));
  }
  if (!(a.temperature_floor_scale >= 0 && std::isfinite(a.temperature_floor_scale))) {
    errors.push_back(absl::StrCat("temperature_floor_scale ", a.temperature_floor_scale,
                                  " must be a positive finite scale, or 0 for no tuning"));
  }
  if (!std::isfinite(a.temperature_attn_scale)) {
    errors.push_back(
        absl::StrCat("temperature_attn_scale ", a.temperature_attn_scale, " must be finite"));
  }
  if (a.llama4 && (a.gemma || a.qkv_bias || a.qk_norm)) {
    errors.push_back("llama4 with gemma, qkv_bias or qk_norm: Llama 4 text has none of them (its "
                     "QK-norm is qk_l2_norm, without weights)");
  }
  if (a.llama4) {
    for (int i = 0; i < static_cast<int>(a.attention.size()); ++i) {
      if (a.attention[i] != Attention::kFull) {
        errors.push_back(absl::StrCat(
            "llama4 layer ", i, " is ", AttentionName(a.attention[i]),
            ": Llama4ForCausalLM has full (and chunked) attention layers only; search a Llama 4 "
            "backbone with attention_choices FULL"));
        break;
      }
    }
  }
  if (a.kv_cache == KvLayout::kSlim && a.llama4) {
    errors.push_back("kv_cache SLIM with llama4: the runtime's slim path has no Llama 4 layout");
  }
  if (a.kv_cache == KvLayout::kSlim && a.gemma) {
    errors.push_back("kv_cache SLIM with gemma: the runtime's slim path has no Gemma layout");
  }
  if (a.kv_cache == KvLayout::kSlim && (a.qkv_bias || !a.no_rope.empty())) {
    errors.push_back(absl::StrCat("kv_cache SLIM with ", a.qkv_bias ? "qkv_bias" : "no_rope",
                                  ": Slim Attention's V = K W_KV needs unbiased keys rotated in "
                                  "every layer"));
  }
}

// Pipelined decoding's parameters (PPD Theorem 4.1), when the arch sets any.
void CheckPpd(const Arch& a, std::vector<std::string>* errors_out) {
  std::vector<std::string>& errors = *errors_out;
  if (a.ppd.k == 0 && a.ppd.layer == 0) return;
  if (a.ppd.k < 1 || a.ppd.k > a.vocab_size) {
    errors.push_back(absl::StrCat("ppd.k ", a.ppd.k, " must be in 1..", a.vocab_size));
  }
  if (2 * a.ppd.layer < a.num_layers || a.ppd.layer >= a.num_layers) {
    errors.push_back(absl::StrCat("ppd.layer ", a.ppd.layer, " is outside [",
                                  (a.num_layers + 1) / 2, ", ", a.num_layers - 1,
                                  "] (PPD Theorem 4.1 needs num_layers/2 <= layer < "
                                  "num_layers)"));
  }
  if (a.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    errors.push_back("ppd cannot be combined with kv_prediction");
  }
  if (!(a.ppd.timing_match_rate >= 0 && a.ppd.timing_match_rate <= 1)) {
    errors.push_back(
        absl::StrCat("ppd.timing_match_rate ", a.ppd.timing_match_rate, " is outside [0, 1]"));
  }
}

}  // namespace

absl::Status ValidateArch(const Arch& a, const ValidateOptions& options) {
  std::vector<std::string> errors;
  CheckPositive("num_layers", a.num_layers, &errors);
  CheckPositive("d_model", a.d_model, &errors);
  CheckPositive("d_ffn", a.d_ffn, &errors);
  CheckPositive("num_heads", a.num_heads, &errors);
  CheckPositive("num_kv_heads", a.num_kv_heads, &errors);
  CheckPositive("head_dim", a.head_dim, &errors);
  CheckPositive("vocab_size", a.vocab_size, &errors);
  CheckPositive("rope_theta", a.rope_theta, &errors);
  CheckPositive("norm_eps", a.norm_eps, &errors);
  CheckAtMost("num_layers", a.num_layers, kMaxLayers, &errors);
  CheckAtMost("d_model", a.d_model, kMaxWidth, &errors);
  CheckAtMost("d_ffn", a.d_ffn, 4 * kMaxWidth, &errors);
  CheckAtMost("num_heads", a.num_heads, kMaxHeads, &errors);
  CheckAtMost("num_kv_heads", a.num_kv_heads, kMaxHeads, &errors);
  CheckAtMost("head_dim", a.head_dim, kMaxHeadDim, &errors);
  CheckAtMost("vocab_size", a.vocab_size, kMaxVocab, &errors);
  CheckAtMost("sliding_window", a.sliding_window, kMaxContext, &errors);
  if (!std::isfinite(a.rope_theta)) errors.push_back("rope_theta must be finite");
  CheckRopeScaling(a.rope_scaling, &errors);
  if (!(a.norm_eps < 1)) errors.push_back(absl::StrCat("norm_eps ", a.norm_eps, " must be < 1"));
  if (a.head_dim > 0 && a.head_dim % 2 != 0) {
    errors.push_back(absl::StrCat("head_dim ", a.head_dim, " must be even for rotary embeddings"));
  }
  if (a.num_heads > 0 && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads != 0) {
    errors.push_back(
        absl::StrCat("num_kv_heads ", a.num_kv_heads, " does not divide num_heads ", a.num_heads));
  }
  if (options.block_size > 0) {
    if (a.d_model % options.block_size != 0) {
      errors.push_back(absl::StrCat("d_model ", a.d_model, " is not a multiple of block size ",
                                    options.block_size));
    }
    if (a.d_ffn % options.block_size != 0) {
      errors.push_back(
          absl::StrCat("d_ffn ", a.d_ffn, " is not a multiple of block size ", options.block_size));
    }
  }
  if (static_cast<int>(a.attention.size()) != a.num_layers) {
    errors.push_back(absl::StrCat("attention pattern has ", a.attention.size(),
                                  " entries, expected num_layers ", a.num_layers));
  }
  const bool any_swa =
      std::count(a.attention.begin(), a.attention.end(), Attention::kSlidingWindow) > 0;
  if (any_swa && a.sliding_window <= 0) {
    errors.push_back(absl::StrCat("sliding_window ", a.sliding_window,
                                  " must be positive when a layer uses SLIDING_WINDOW"));
  }
  if (a.kv_cache == KvLayout::kSlim &&
      (a.num_kv_heads != a.num_heads || a.q_width() != a.d_model)) {
    errors.push_back(absl::StrCat(
        "kv_cache SLIM needs multi-head attention (num_kv_heads == num_heads and num_heads * "
        "head_dim == d_model); got ",
        a.num_heads, "/", a.num_kv_heads, " heads of ", a.head_dim, " with d_model ", a.d_model));
  }
  CheckFamily(a, &errors);
  CheckPpd(a, &errors);
  if (a.kv_cache == KvLayout::kSlim && a.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    errors.push_back(
        "kv_cache SLIM cannot be combined with kv_prediction: predicted values are not K W_KV");
  }
  ValidateKvPrediction(a, &errors);
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(a.name.empty() ? "arch" : a.name, ": ", absl::StrJoin(errors, "; ")));
}

namespace {

absl::StatusOr<Arch> ConvertArch(const ArchSpec& p) {
  Arch a;
  a.name = p.name();
  a.num_layers = p.num_layers();
  a.d_model = p.d_model();
  a.d_ffn = p.d_ffn();
  a.num_heads = p.num_heads();
  a.num_kv_heads = p.num_kv_heads();
  a.head_dim = p.head_dim();
  if (a.head_dim == 0 && a.num_heads > 0) {
    if (a.d_model % a.num_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.name().empty() ? "arch" : p.name(), ": head_dim is unset and d_model ",
                       a.d_model, " is not divisible by num_heads ", a.num_heads));
    }
    a.head_dim = a.d_model / a.num_heads;
  }
  a.vocab_size = p.vocab_size();
  a.tie_embeddings = p.tie_embeddings();
  a.rope_theta = p.rope_theta();
  a.norm_eps = p.norm_eps();
  a.qk_norm = p.qk_norm();
  a.qkv_bias = p.qkv_bias();
  a.no_rope.assign(p.no_rope().begin(), p.no_rope().end());
  a.gemma = p.gemma();
  a.local_rope_theta = p.local_rope_theta();
  a.llama4 = p.llama4();
  a.qk_l2_norm = p.qk_l2_norm();
  a.attention_chunk = p.attention_chunk();
  a.temperature_floor_scale = p.temperature_floor_scale();
  a.temperature_attn_scale = p.temperature_attn_scale();
  a.sliding_window = p.sliding_window();
  if (p.has_rope_scaling() && p.rope_scaling().kind() != RopeScalingSpec::NONE) {
    const RopeScalingSpec& r = p.rope_scaling();
    a.rope_scaling.kind = r.kind() == RopeScalingSpec::LINEAR ? RopeScaling::Kind::kLinear
                                                              : RopeScaling::Kind::kLlama3;
    a.rope_scaling.factor = r.factor();
    a.rope_scaling.low_freq_factor = r.low_freq_factor();
    a.rope_scaling.high_freq_factor = r.high_freq_factor();
    a.rope_scaling.original_max_position_embeddings = r.original_max_position_embeddings();
  }
  for (int i = 0; i < p.attention_size(); ++i) {
    Attention at;
    if (AttentionFromProto(p.attention(i), &at)) {
      a.attention.push_back(at);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(p.name().empty() ? "arch" : p.name(), ": attention[", i, "] ",
                       AttentionType_Name(p.attention(i)), " is not FULL, SLIDING_WINDOW or SKIP"));
    }
  }
  a.kv_cache = p.kv_cache() == SLIM ? KvLayout::kSlim : KvLayout::kStandard;
  a.ppd.layer = p.ppd().layer();
  a.ppd.k = p.ppd().k();
  a.ppd.timing_match_rate = p.ppd().timing_match_rate();
  if (p.has_kv_prediction()) {
    const KvPrediction& k = p.kv_prediction();
    if (k.has_layer_pruned_ratio()) {
      a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
      a.kv_prediction.layer_pruned_ratio = k.layer_pruned_ratio();
    } else if (k.has_canonical()) {
      a.kv_prediction.kind = KvPredictionSpec::Kind::kCanonical;
      HILNAS_ASSIGN_OR_RETURN(Arch aux, ConvertArch(k.canonical()));
      a.kv_prediction.canonical.push_back(std::move(aux));
    }
    a.kv_prediction.layer_map.assign(k.layer_map().aux_layer().begin(),
                                     k.layer_map().aux_layer().end());
  }
  return a;
}

}  // namespace

absl::StatusOr<Arch> ArchFromProto(const ArchSpec& proto, const ValidateOptions& options) {
  HILNAS_ASSIGN_OR_RETURN(Arch a, ConvertArch(proto));
  HILNAS_RETURN_IF_ERROR(ValidateArch(a, options));
  return a;
}

ArchSpec ArchToProto(const Arch& a) {
  ArchSpec p;
  p.set_name(a.name);
  p.set_num_layers(a.num_layers);
  p.set_d_model(a.d_model);
  p.set_d_ffn(a.d_ffn);
  p.set_num_heads(a.num_heads);
  p.set_num_kv_heads(a.num_kv_heads);
  p.set_head_dim(a.head_dim);
  p.set_vocab_size(a.vocab_size);
  p.set_tie_embeddings(a.tie_embeddings);
  p.set_rope_theta(a.rope_theta);
  p.set_norm_eps(a.norm_eps);
  p.set_qk_norm(a.qk_norm);
  p.set_qkv_bias(a.qkv_bias);
  for (bool n : a.no_rope) p.add_no_rope(n);
  p.set_gemma(a.gemma);
  p.set_local_rope_theta(a.local_rope_theta);
  p.set_llama4(a.llama4);
  p.set_qk_l2_norm(a.qk_l2_norm);
  p.set_attention_chunk(a.attention_chunk);
  p.set_temperature_floor_scale(a.temperature_floor_scale);
  p.set_temperature_attn_scale(a.temperature_attn_scale);
  if (const RopeScaling& r = a.rope_scaling; r.kind != RopeScaling::Kind::kNone) {
    RopeScalingSpec* s = p.mutable_rope_scaling();
    s->set_kind(r.kind == RopeScaling::Kind::kLinear ? RopeScalingSpec::LINEAR
                                                     : RopeScalingSpec::LLAMA3);
    s->set_factor(r.factor);
    s->set_low_freq_factor(r.low_freq_factor);
    s->set_high_freq_factor(r.high_freq_factor);
    s->set_original_max_position_embeddings(r.original_max_position_embeddings);
  }
  for (Attention at : a.attention) {
    p.add_attention(AttentionToProto(at));
  }
  p.set_sliding_window(a.sliding_window);
  p.set_kv_cache(a.kv_cache == KvLayout::kSlim ? SLIM : STANDARD);
  if (a.ppd.k != 0 || a.ppd.layer != 0) {
    p.mutable_ppd()->set_layer(a.ppd.layer);
    p.mutable_ppd()->set_k(a.ppd.k);
    p.mutable_ppd()->set_timing_match_rate(a.ppd.timing_match_rate);
  }
  const KvPredictionSpec& k = a.kv_prediction;
  if (k.kind != KvPredictionSpec::Kind::kNone) {
    KvPrediction* kp = p.mutable_kv_prediction();
    if (k.kind == KvPredictionSpec::Kind::kLayerPruned) {
      kp->set_layer_pruned_ratio(k.layer_pruned_ratio);
    } else {
      *kp->mutable_canonical() = ArchToProto(k.canonical.at(0));
    }
    for (int j : k.layer_map) kp->mutable_layer_map()->add_aux_layer(j);
  }
  return p;
}

std::string ArchKey(const ArchSpec& arch) {
  ArchSpec a = arch;
  a.clear_name();
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    a.SerializeToCodedStream(&coded);
  }  // the streams trim `out` to the bytes written as they close
  return out;
}

}  // namespace hilnas
