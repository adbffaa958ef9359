#include "search_space/space.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

uint64_t SatMul(uint64_t a, uint64_t b) {
  if (a != 0 && b > kSaturated / a) return kSaturated;
  return a * b;
}
uint64_t SatAdd(uint64_t a, uint64_t b) { return a > kSaturated - b ? kSaturated : a + b; }

// Choices a dimension may have: d_ffn 2048..8192 step 256 (Tab. 3) has 25;
// past this a range is a typo (step 1 over 2^31 values would be 8 GiB).
constexpr int64_t kMaxChoices = 4096;

std::vector<int> Expand(const char* field, const IntChoices& c, std::vector<std::string>* errors) {
  if (c.values_size() > kMaxChoices) {
    errors->push_back(
        absl::StrCat(field, ": ", c.values_size(), " values; at most ", kMaxChoices, " accepted"));
    return {};
  }
  if (c.values_size() > 0) return {c.values().begin(), c.values().end()};
  std::vector<int> out;
  const int64_t step = c.step() > 0 ? c.step() : 1;
  // Counted in 64 bits before anything is allocated (and no int overflow
  // in the loop when max is near INT_MAX).
  const int64_t count = c.max() >= c.min() ? (int64_t{c.max()} - c.min()) / step + 1 : 0;
  if (count > kMaxChoices) {
    errors->push_back(absl::StrCat(field, ": ", c.min(), "..", c.max(), " step ", step, " has ",
                                   count, " choices; at most ", kMaxChoices, " accepted"));
    return {};
  }
  for (int64_t v = c.min(); v <= c.max() && c.max() > 0; v += step) {
    out.push_back(static_cast<int>(v));
  }
  return out;
}

void CheckChoices(const char* field, const std::vector<int>& values, int block, int64_t max,
                  std::vector<std::string>* errors) {
  if (values.empty()) errors->push_back(absl::StrCat(field, ": no choices"));
  for (int v : values) {
    if (v <= 0) errors->push_back(absl::StrCat(field, ": choice ", v, " must be positive"));
    if (v > max) {
      errors->push_back(
          absl::StrCat(field, ": choice ", v, " exceeds the largest accepted, ", max));
    }
    if (block > 0 && v % block != 0) {
      errors->push_back(
          absl::StrCat(field, ": choice ", v, " is not a multiple of block size ", block));
    }
  }
  std::vector<int> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    errors->push_back(absl::StrCat(field, ": duplicate choices"));
  }
}

double BinCentre(int index, int n) { return (index + 0.5) / n; }

absl::StatusOr<int> Bin(double x, int n, const std::string& name) {
  if (!(x >= 0.0 && x <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinate ", name, " = ", x, " is outside [0, 1]"));
  }
  return std::min(n - 1, static_cast<int>(std::floor(x * n)));
}

template <typename T>
int IndexOf(const std::vector<T>& v, const T& x) {
  auto it = std::find(v.begin(), v.end(), x);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

bool SameAux(const KvPredictionSpec& a, const KvPredictionSpec& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case KvPredictionSpec::Kind::kNone:
      return true;
    case KvPredictionSpec::Kind::kLayerPruned:
      return a.layer_pruned_ratio == b.layer_pruned_ratio && a.layer_map == b.layer_map;
    case KvPredictionSpec::Kind::kCanonical:
      return ArchToProto(a.canonical.at(0)).SerializeAsString() ==
                 ArchToProto(b.canonical.at(0)).SerializeAsString() &&
             a.layer_map == b.layer_map;
  }
  return false;
}

// Patterns of length `layers` over `full` full-attention and `efficient`
// efficient choices with no efficient run longer than `max_run` (0: no bound).
uint64_t CountPatterns(int layers, uint64_t full, uint64_t efficient, int max_run) {
  if (max_run <= 0) {
    uint64_t n = 1;
    for (int i = 0; i < layers; ++i) n = SatMul(n, full + efficient);
    return n;
  }
  std::vector<uint64_t> run(max_run + 1, 0);  // run[k]: patterns ending in k efficient layers
  run[0] = 1;
  for (int i = 0; i < layers; ++i) {
    std::vector<uint64_t> next(max_run + 1, 0);
    uint64_t all = 0;
    for (uint64_t r : run) all = SatAdd(all, r);
    next[0] = SatMul(all, full);
    for (int k = 1; k <= max_run; ++k) next[k] = SatMul(run[k - 1], efficient);
    run = next;
  }
  uint64_t total = 0;
  for (uint64_t r : run) total = SatAdd(total, r);
  return total;
}

}  // namespace

SearchSpace DefaultSearchSpace() {
  SearchSpace s;
  ArchSpec* base = s.mutable_base();
  base->set_name("mobilellm-flash-space");
  base->set_num_heads(32);
  base->set_num_kv_heads(8);
  base->set_head_dim(64);
  base->set_vocab_size(202048);
  base->set_tie_embeddings(true);
  base->set_rope_theta(500000.0);
  base->set_norm_eps(1e-5);
  base->set_qk_norm(true);
  base->set_sliding_window(256);
  s.mutable_num_layers()->set_min(10);
  s.mutable_num_layers()->set_max(16);
  s.mutable_num_layers()->set_step(1);
  s.mutable_d_ffn()->set_min(2048);
  s.mutable_d_ffn()->set_max(8192);
  s.mutable_d_ffn()->set_step(256);
  s.mutable_d_model()->set_min(1024);
  s.mutable_d_model()->set_max(2048);
  s.mutable_d_model()->set_step(128);
  s.add_attention_choices(FULL);
  s.add_attention_choices(SLIDING_WINDOW);
  s.add_attention_choices(SKIP);
  s.set_block_size(128);
  s.set_max_consecutive_efficient(2);
  return s;
}

namespace {

// The KV-prediction choices (none when the space names none); a
// layer-pruned ratio must leave layers at the space's smallest depth.
absl::StatusOr<std::vector<KvPredictionSpec>> AuxChoices(const SearchSpace& proto, int min_layers) {
  std::vector<KvPredictionSpec> out;
  for (int i = 0; i < proto.aux_choices_size(); ++i) {
    const AuxChoice& c = proto.aux_choices(i);
    KvPredictionSpec k;
    if (c.has_layer_pruned_ratio()) {
      k.kind = KvPredictionSpec::Kind::kLayerPruned;
      k.layer_pruned_ratio = c.layer_pruned_ratio();
      HILNAS_RETURN_IF_ERROR(LayerPrunedKeptLayers(min_layers, c.layer_pruned_ratio()).status());
    } else if (c.has_canonical()) {
      k.kind = KvPredictionSpec::Kind::kCanonical;
      auto aux = ArchFromProto(c.canonical());
      if (!aux.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("search space: aux_choices[", i, "]: ", aux.status().message()));
      }
      k.canonical.push_back(*std::move(aux));
    }
    out.push_back(std::move(k));
  }
  if (out.empty()) out.push_back(KvPredictionSpec{});
  return out;
}

// The KV-cache layouts (standard when the space names none); SLIM only
// over a multi-head base.
absl::StatusOr<std::vector<KvLayout>> KvCacheChoices(const SearchSpace& proto, const Arch& base) {
  std::vector<KvLayout> out;
  for (int i = 0; i < proto.kv_cache_choices_size(); ++i) {
    const KvLayout k = proto.kv_cache_choices(i) == SLIM ? KvLayout::kSlim : KvLayout::kStandard;
    if (std::find(out.begin(), out.end(), k) != out.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("search space: kv_cache_choices[", i, "] repeats a choice"));
    }
    if (k == KvLayout::kSlim && base.num_kv_heads != base.num_heads) {
      return absl::InvalidArgumentError(
          absl::StrCat("search space: kv_cache_choices has SLIM but base has ", base.num_heads,
                       " query heads sharing ", base.num_kv_heads,
                       " key/value heads; slim attention needs multi-head attention"));
    }
    out.push_back(k);
  }
  if (out.empty()) out.push_back(KvLayout::kStandard);
  return out;
}

// The pipelined-decoding choices (plain greedy when the space names none).
absl::StatusOr<std::vector<PpdChoice>> PpdChoices(const SearchSpace& proto) {
  std::vector<PpdChoice> out;
  for (int i = 0; i < proto.ppd_choices_size(); ++i) {
    const PpdChoice& c = proto.ppd_choices(i);
    if (c.k() < 0 || (c.k() > 0 && c.layers_from_end() < 1) ||
        !(c.timing_match_rate() >= 0 && c.timing_match_rate() <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("search space: ppd_choices[", i, "]: k ", c.k(), ", layers_from_end ",
                       c.layers_from_end(), ", timing_match_rate ", c.timing_match_rate(),
                       ": need k >= 0, layers_from_end >= 1 when k > 0, and a rate in [0, 1]"));
    }
    out.push_back(c);
  }
  if (out.empty()) out.emplace_back();
  return out;
}

}  // namespace

absl::StatusOr<Space> Space::FromProto(const SearchSpace& proto) {
  Space sp;
  sp.proto_ = proto;
  std::vector<std::string> errors;
  sp.layers_ = Expand("num_layers", proto.num_layers(), &errors);
  sp.ffn_ = Expand("d_ffn", proto.d_ffn(), &errors);
  sp.model_ = Expand("d_model", proto.d_model(), &errors);
  CheckChoices("num_layers", sp.layers_, 0, kMaxLayers, &errors);
  CheckChoices("d_ffn", sp.ffn_, proto.block_size(), 4 * kMaxWidth, &errors);
  CheckChoices("d_model", sp.model_, proto.block_size(), kMaxWidth, &errors);
  if (proto.block_size() < 0) {
    errors.push_back(absl::StrCat("block_size ", proto.block_size(), " must not be negative"));
  }
  if (proto.max_consecutive_efficient() < 0) {
    errors.push_back(absl::StrCat("max_consecutive_efficient ", proto.max_consecutive_efficient(),
                                  " must not be negative"));
  }
  for (int a : proto.attention_choices()) {
    Attention at;
    if (AttentionFromProto(a, &at)) {
      sp.attention_.push_back(at);
    } else {
      errors.push_back(
          absl::StrCat("attention_choices: ", AttentionType_Name(static_cast<AttentionType>(a)),
                       " is not a layer type"));
    }
  }
  if (sp.attention_.empty()) errors.push_back("attention_choices: no choices");
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("search space: ", absl::StrJoin(errors, "; ")));
  }
  // The base: fill the searched fields with first choices so it validates.
  ArchSpec base = proto.base();
  base.set_num_layers(sp.layers_[0]);
  base.set_d_ffn(sp.ffn_[0]);
  base.set_d_model(sp.model_[0]);
  base.clear_attention();
  base.clear_kv_prediction();
  for (int i = 0; i < sp.layers_[0]; ++i) base.add_attention(proto.attention_choices(0));
  if (base.sliding_window() <= 0 && IndexOf(sp.attention_, Attention::kSlidingWindow) >= 0) {
    return absl::InvalidArgumentError(
        "search space: attention_choices has SLIDING_WINDOW but base.sliding_window is unset");
  }
  auto base_arch = ArchFromProto(base);
  if (!base_arch.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("search space: base: ", base_arch.status().message()));
  }
  sp.base_ = *std::move(base_arch);

  HILNAS_ASSIGN_OR_RETURN(
      sp.aux_, AuxChoices(proto, *std::min_element(sp.layers_.begin(), sp.layers_.end())));
  HILNAS_ASSIGN_OR_RETURN(sp.kv_cache_, KvCacheChoices(proto, sp.base_));
  HILNAS_ASSIGN_OR_RETURN(sp.ppd_, PpdChoices(proto));

  // Coordinate names, in encoding order.
  const int max_layers = *std::max_element(sp.layers_.begin(), sp.layers_.end());
  if (sp.layers_.size() > 1) sp.names_.push_back("num_layers");
  if (sp.ffn_.size() > 1) sp.names_.push_back("d_ffn");
  if (sp.model_.size() > 1) sp.names_.push_back("d_model");
  if (sp.attention_.size() > 1) {
    for (int i = 0; i < max_layers; ++i) sp.names_.push_back(absl::StrCat("attention[", i, "]"));
  }
  if (sp.aux_.size() > 1) sp.names_.push_back("kv_prediction");
  if (sp.kv_cache_.size() > 1) sp.names_.push_back("kv_cache");
  if (sp.ppd_.size() > 1) sp.names_.push_back("ppd");
  return sp;
}

Arch Space::Base(int layers) const {
  Arch a = base_;
  a.num_layers = layers;
  a.attention.assign(layers, attention_[0]);
  a.no_rope.clear();  // NoPE layers are inherited when pruning, not chosen
  return a;
}

absl::Status Space::Contains(const Arch& arch) const {
  std::vector<std::string> errors;
  if (IndexOf(layers_, arch.num_layers) < 0) {
    errors.push_back(absl::StrCat("num_layers ", arch.num_layers, " is not a choice"));
  }
  if (IndexOf(ffn_, arch.d_ffn) < 0) {
    errors.push_back(absl::StrCat("d_ffn ", arch.d_ffn, " is not a choice"));
  }
  if (IndexOf(model_, arch.d_model) < 0) {
    errors.push_back(absl::StrCat("d_model ", arch.d_model, " is not a choice"));
  }
  for (size_t i = 0; i < arch.attention.size(); ++i) {
    if (IndexOf(attention_, arch.attention[i]) < 0) {
      errors.push_back(absl::StrCat("attention[", i, "] ", AttentionName(arch.attention[i]),
                                    " is not a choice"));
    }
  }
  const int run = LongestEfficientRun(arch.attention);
  if (max_consecutive_efficient() > 0 && run > max_consecutive_efficient()) {
    errors.push_back(absl::StrCat("pattern ", PatternString(arch.attention), " has ", run,
                                  " consecutive efficient-attention layers; at most ",
                                  max_consecutive_efficient(),
                                  " allowed (MobileLLM-Flash Sec. 3.5)"));
  }
  // Fixed fields must equal the base's.
  const Arch& b = base_;
  auto fixed = [&](const char* field, double got, double want) {
    if (got != want)
      errors.push_back(absl::StrCat(field, " ", got, " differs from the space's ", want));
  };
  fixed("num_heads", arch.num_heads, b.num_heads);
  fixed("num_kv_heads", arch.num_kv_heads, b.num_kv_heads);
  fixed("head_dim", arch.head_dim, b.head_dim);
  fixed("vocab_size", arch.vocab_size, b.vocab_size);
  fixed("tie_embeddings", arch.tie_embeddings, b.tie_embeddings);
  fixed("qk_norm", arch.qk_norm, b.qk_norm);
  fixed("qkv_bias", arch.qkv_bias, b.qkv_bias);
  fixed("gemma", arch.gemma, b.gemma);
  fixed("llama4", arch.llama4, b.llama4);
  fixed("qk_l2_norm", arch.qk_l2_norm, b.qk_l2_norm);
  fixed("attention_chunk", arch.attention_chunk, b.attention_chunk);
  fixed("temperature_floor_scale", arch.temperature_floor_scale, b.temperature_floor_scale);
  fixed("temperature_attn_scale", arch.temperature_attn_scale, b.temperature_attn_scale);
  fixed("local_rope_theta", arch.local_rope_theta, b.local_rope_theta);
  fixed("rope_theta", arch.rope_theta, b.rope_theta);
  fixed("norm_eps", arch.norm_eps, b.norm_eps);
  fixed("sliding_window", arch.sliding_window, b.sliding_window);
  if (!(arch.rope_scaling == b.rope_scaling))
    errors.push_back("rope_scaling differs from the space's");
  bool aux_found = false;
  for (const auto& k : aux_) aux_found = aux_found || SameAux(k, arch.kv_prediction);
  if (!aux_found) errors.push_back("kv_prediction is not one of the space's auxiliary choices");
  if (IndexOf(kv_cache_, arch.kv_cache) < 0) {
    errors.push_back("kv_cache is not one of the space's kv_cache_choices");
  }
  if (PpdIndex(arch) < 0) errors.push_back("ppd is not one of the space's ppd_choices");
  ValidateOptions options;
  options.block_size = block_size();
  HILNAS_RETURN_IF_ERROR(ValidateArch(arch, options));
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(arch.name.empty() ? "arch" : arch.name,
                   " is not in the search space: ", absl::StrJoin(errors, "; ")));
}

absl::StatusOr<std::vector<double>> Space::Encode(const Arch& arch) const {
  HILNAS_RETURN_IF_ERROR(Contains(arch));
  std::vector<double> x;
  x.reserve(names_.size());
  auto put = [&x](int index, size_t n) {
    if (n > 1) x.push_back(BinCentre(index, static_cast<int>(n)));
  };
  put(IndexOf(layers_, arch.num_layers), layers_.size());
  put(IndexOf(ffn_, arch.d_ffn), ffn_.size());
  put(IndexOf(model_, arch.d_model), model_.size());
  if (attention_.size() > 1) {
    const int max_layers = *std::max_element(layers_.begin(), layers_.end());
    for (int i = 0; i < max_layers; ++i) {
      put(i < arch.num_layers ? IndexOf(attention_, arch.attention[i]) : 0, attention_.size());
    }
  }
  int aux_index = 0;
  for (size_t i = 0; i < aux_.size(); ++i) {
    if (SameAux(aux_[i], arch.kv_prediction)) aux_index = static_cast<int>(i);
  }
  put(aux_index, aux_.size());
  put(IndexOf(kv_cache_, arch.kv_cache), kv_cache_.size());
  put(PpdIndex(arch), ppd_.size());
  return x;
}

absl::StatusOr<Arch> Space::Decode(absl::Span<const double> x) const {
  if (static_cast<int>(x.size()) != dimensions()) {
    return absl::InvalidArgumentError(
        absl::StrCat("point has ", x.size(), " coordinates, the space has ", dimensions()));
  }
  size_t next = 0;
  auto take = [&](size_t n) -> absl::StatusOr<int> {
    if (n <= 1) return 0;
    const std::string& name = names_[next];
    return Bin(x[next++], static_cast<int>(n), name);
  };
  HILNAS_ASSIGN_OR_RETURN(int li, take(layers_.size()));
  HILNAS_ASSIGN_OR_RETURN(int fi, take(ffn_.size()));
  HILNAS_ASSIGN_OR_RETURN(int mi, take(model_.size()));
  Arch a = Base(layers_[li]);
  a.name.clear();
  a.d_ffn = ffn_[fi];
  a.d_model = model_[mi];
  if (attention_.size() > 1) {
    const int max_layers = *std::max_element(layers_.begin(), layers_.end());
    for (int i = 0; i < max_layers; ++i) {
      HILNAS_ASSIGN_OR_RETURN(int ai, take(attention_.size()));
      if (i < a.num_layers) a.attention[i] = attention_[ai];
    }
  }
  HILNAS_ASSIGN_OR_RETURN(int xi, take(aux_.size()));
  a.kv_prediction = aux_[xi];
  HILNAS_ASSIGN_OR_RETURN(int ci, take(kv_cache_.size()));
  a.kv_cache = kv_cache_[ci];
  HILNAS_ASSIGN_OR_RETURN(int pi, take(ppd_.size()));
  if (ppd_[pi].k() > 0) {
    a.ppd = {a.num_layers - ppd_[pi].layers_from_end(), ppd_[pi].k(), ppd_[pi].timing_match_rate()};
  }
  return a;
}

uint64_t Space::Size(bool constrained) const {
  uint64_t full = IndexOf(attention_, Attention::kFull) >= 0 ? 1 : 0;
  uint64_t efficient = attention_.size() - full;
  const int max_run = constrained ? max_consecutive_efficient() : 0;
  uint64_t patterns = 0;
  for (int l : layers_) patterns = SatAdd(patterns, CountPatterns(l, full, efficient, max_run));
  uint64_t n = SatMul(patterns, ffn_.size());
  n = SatMul(n, model_.size());
  // SLIM members with an auxiliary model or non-MHA widths are infeasible
  // (ValidateArch), so this counts an upper bound when both dimensions vary.
  return SatMul(SatMul(SatMul(n, aux_.size()), kv_cache_.size()), ppd_.size());
}

int Space::PpdIndex(const Arch& arch) const {
  for (size_t i = 0; i < ppd_.size(); ++i) {
    const PpdChoice& c = ppd_[i];
    const bool same = c.k() == 0 ? arch.ppd.k == 0
                                 : arch.ppd.k == c.k() &&
                                       arch.ppd.layer == arch.num_layers - c.layers_from_end() &&
                                       arch.ppd.timing_match_rate == c.timing_match_rate();
    if (same) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace hilnas
