#include "pruner/prune.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

// Indices of the `keep` largest scores, ascending; ties go to the lower index.
std::vector<int64_t> TopIndices(const std::vector<double>& score, int64_t keep) {
  std::vector<int64_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  idx.resize(keep);
  std::sort(idx.begin(), idx.end());
  return idx;
}

torch::Tensor Index(const std::vector<int64_t>& v) {
  return torch::tensor(v, torch::TensorOptions().dtype(torch::kLong));
}

}  // namespace

absl::StatusOr<PrunePlan> PlanPrune(const ActivationMetrics& m, const Arch& b, const Arch& t,
                                    const PruneOptions& o) {
  std::vector<std::string> errors;
  auto same = [&](const char* field, double target, double backbone, const char* why) {
    if (target != backbone) {
      errors.push_back(absl::StrCat(field, " ", target, " differs from the backbone's ", backbone,
                                    " (", why, ")"));
    }
  };
  same("vocab_size", t.vocab_size, b.vocab_size, "the vocabulary is not pruned");
  same("num_heads", t.num_heads, b.num_heads, "heads are never split");
  same("num_kv_heads", t.num_kv_heads, b.num_kv_heads, "heads are never split");
  same("head_dim", t.head_dim, b.head_dim, "heads are never split");
  same("qk_norm", t.qk_norm, b.qk_norm, "norm weights are inherited");
  same("qkv_bias", t.qkv_bias, b.qkv_bias, "biases are inherited");
  same("gemma", t.gemma, b.gemma, "the layer layout is the backbone's");
  same("llama4", t.llama4, b.llama4, "the layer layout is the backbone's");
  same("qk_l2_norm", t.qk_l2_norm, b.qk_l2_norm, "the QK-norm is the backbone's");
  same("attention_chunk", t.attention_chunk, b.attention_chunk, "positions are inherited");
  same("temperature_floor_scale", t.temperature_floor_scale, b.temperature_floor_scale,
       "positions are inherited");
  same("temperature_attn_scale", t.temperature_attn_scale, b.temperature_attn_scale,
       "positions are inherited");
  same("local_rope_theta", t.local_rope_theta, b.local_rope_theta, "positions are inherited");
  if (!(t.rope_scaling == b.rope_scaling)) {
    errors.push_back(
        "rope_scaling differs from the backbone's (positions are inherited: give the search "
        "space's base the backbone's rope_scaling)");
  }
  auto fits = [&](const char* field, int target, int backbone, bool blocked) {
    if (target > backbone) {
      errors.push_back(
          absl::StrCat(field, " ", target, " is larger than the backbone's ", backbone));
    } else if (target < 1) {
      errors.push_back(absl::StrCat(field, " ", target, " must be positive"));
    } else if (blocked && o.block_size > 0 && target != backbone && target % o.block_size != 0) {
      errors.push_back(
          absl::StrCat(field, " ", target, " is not a multiple of the block size ", o.block_size));
    }
  };
  auto refuse = [&] {
    return absl::InvalidArgumentError(absl::StrCat("cannot prune ", b.name, " to ", t.name, ":\n  ",
                                                   absl::StrJoin(errors, "\n  ")));
  };
  fits("num_layers", t.num_layers, b.num_layers, false);
  fits("d_model", t.d_model, b.d_model, true);
  fits("d_ffn", t.d_ffn, b.d_ffn, true);
  if (static_cast<int>(t.attention.size()) != t.num_layers) {
    errors.push_back(absl::StrCat("attention pattern has ", t.attention.size(),
                                  " layers, the target has ", t.num_layers));
  }
  if (t.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    errors.push_back("kv_prediction targets are built by the KV-prediction pruner, not Prune");
  }
  if (m.num_layers != b.num_layers || m.d_model != b.d_model || m.d_ffn != b.d_ffn) {
    errors.push_back(absl::StrCat("metrics are for a ", m.num_layers, "-layer d_model ", m.d_model,
                                  " d_ffn ", m.d_ffn, " model, the backbone is ", b.num_layers,
                                  "-layer d_model ", b.d_model, " d_ffn ", b.d_ffn));
  }
  if (!errors.empty()) return refuse();
  PrunePlan plan;
  for (int64_t l : TopIndices(m.layer, t.num_layers)) plan.layers.push_back(static_cast<int>(l));
  plan.model_dim = TopIndices(m.model_dim, t.d_model);
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const int src = plan.layers[i];
    if (t.attention[i] != Attention::kSkip && b.attention[src] == Attention::kSkip) {
      errors.push_back(absl::StrCat("target layer ", i, " wants ", AttentionName(t.attention[i]),
                                    " attention but it comes from backbone layer ", src,
                                    ", which has none"));
    }
    plan.ffn.push_back(TopIndices(m.ffn[src], t.d_ffn));
  }
  // NoPE layers keep their kind (SmolLM3): a target that states its flags
  // must state the kept layers' own.
  if (!t.no_rope.empty() && t.no_rope != PrunedNoRope(b, plan)) {
    errors.push_back(absl::StrCat("no_rope of the target differs from that of the backbone layers "
                                  "it keeps (a layer's NoPE is inherited, not chosen)"));
  }
  if (!errors.empty()) return refuse();
  return plan;
}

std::vector<bool> PrunedNoRope(const Arch& backbone, const PrunePlan& plan) {
  std::vector<bool> out;
  if (backbone.no_rope.empty()) return out;
  for (int src : plan.layers) out.push_back(backbone.no_rope[src]);
  return out;
}

absl::StatusOr<Decoder> ApplyPrune(Decoder& backbone, const PrunePlan& plan, const Arch& target) {
  Arch arch = target;
  arch.no_rope = PrunedNoRope(backbone.arch(), plan);
  HILNAS_ASSIGN_OR_RETURN(Decoder out, Decoder::Create(arch, /*seed=*/0, backbone.dtype()));
  const bool b_tied = backbone.arch().tie_embeddings;
  std::map<std::string, torch::Tensor> src;
  for (auto& [name, t] : backbone.NamedTensors()) src[name] = t;
  try {
    torch::NoGradGuard no_grad;
    const auto dim = Index(plan.model_dim);
    for (auto& [name, dst] : out.NamedTensors()) {
      std::string from = name;
      torch::Tensor ffn;
      if (absl::StartsWith(name, "model.layers.")) {
        const size_t dot = name.find('.', 13);
        const int layer = std::stoi(name.substr(13, dot - 13));
        from = absl::StrCat("model.layers.", plan.layers[layer], name.substr(dot));
        ffn = Index(plan.ffn[layer]);
      }
      // An untied head cut from a tied backbone starts as its embedding.
      if (name == "lm_head.weight" && b_tied) from = "model.embed_tokens.weight";
      auto it = src.find(from);
      if (it == src.end()) {
        return absl::InternalError(absl::StrCat("pruning: backbone has no tensor ", from));
      }
      torch::Tensor w = it->second;
      if (absl::EndsWith(name, "q_norm.weight") || absl::EndsWith(name, "k_norm.weight") ||
          absl::EndsWith(name, "_proj.bias")) {
        // head_dim wide, or one entry per q/k/v row (Qwen2): heads are kept whole
      } else if (absl::EndsWith(name, "layernorm.weight") || name == "model.norm.weight") {
        w = w.index_select(0, dim);
      } else if (absl::EndsWith(name, "o_proj.weight")) {
        w = w.index_select(0, dim);
      } else if (absl::StrContains(name, "self_attn.")) {  // q, k, v: [out, d_model]
        w = w.index_select(1, dim);
      } else if (absl::EndsWith(name, "gate_proj.weight") ||
                 absl::EndsWith(name, "up_proj.weight")) {
        w = w.index_select(0, ffn).index_select(1, dim);
      } else if (absl::EndsWith(name, "down_proj.weight")) {
        w = w.index_select(0, dim).index_select(1, ffn);
      } else if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
        w = w.index_select(1, dim);
      } else {
        return absl::InternalError(absl::StrCat("pruning: no rule for tensor ", name));
      }
      if (!w.sizes().equals(dst.sizes())) {
        return absl::InternalError(absl::StrCat("pruning ", name, ": got shape ",
                                                c10::str(w.sizes()), ", want ",
                                                c10::str(dst.sizes())));
      }
      dst.copy_(w);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("pruning: ", e.what_without_backtrace()));
  }
  return out;
}

absl::StatusOr<Arch> OverrideShape(const Arch& backbone, int num_layers, int d_model, int d_ffn,
                                   const std::string& pattern, int sliding_window) {
  Arch t = backbone;
  if (num_layers > 0) t.num_layers = num_layers;
  if (d_model > 0) t.d_model = d_model;
  if (d_ffn > 0) t.d_ffn = d_ffn;
  if (sliding_window > 0) t.sliding_window = sliding_window;
  // Which layers are NoPE follows from which are kept (ApplyPrune).
  if (t.num_layers != backbone.num_layers) t.no_rope.clear();
  if (!pattern.empty()) {
    HILNAS_ASSIGN_OR_RETURN(t.attention, ParsePattern(pattern));
  } else if (t.num_layers != backbone.num_layers) {
    // Keep the backbone's kind of attention; a mixed backbone needs a pattern.
    for (Attention a : backbone.attention) {
      if (a != backbone.attention[0]) {
        return absl::InvalidArgumentError(
            "the backbone mixes attention kinds: give the target's --pattern");
      }
    }
    t.attention.assign(t.num_layers, backbone.attention[0]);
  }
  if (static_cast<int>(t.attention.size()) != t.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pattern ", pattern, " has ", t.attention.size(), " layers, want ", t.num_layers));
  }
  t.name = absl::StrCat(backbone.name, "-L", t.num_layers, "-d", t.d_model, "-f", t.d_ffn, "-",
                        PatternString(t.attention));
  HILNAS_RETURN_IF_ERROR(ValidateArch(t));
  return t;
}

}  // namespace hilnas
