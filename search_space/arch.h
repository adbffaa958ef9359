// Arch: the plain-struct form of an ArchSpec that the rest of hilnas works
// with. Protos are converted once, at the edge, by ArchFromProto, which also
// validates; an Arch obtained that way is always buildable.
#ifndef HILNAS_SEARCH_SPACE_ARCH_H_
#define HILNAS_SEARCH_SPACE_ARCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/arch.pb.h"

namespace hilnas {

enum class Attention { kFull, kSlidingWindow, kSkip };
enum class KvLayout { kStandard, kSlim };

struct Arch;

// KV Prediction Sec. 4: an auxiliary model whose KV cache predicts the base's.
struct KvPredictionSpec {
  enum class Kind { kNone, kLayerPruned, kCanonical };
  Kind kind = Kind::kNone;
  double layer_pruned_ratio = 0;  // KVP-LP keep ratio, in (0, 1)
  std::vector<Arch> canonical;    // KVP-C: exactly one element
  std::vector<int> layer_map;     // explicit aux layer per base layer, or empty
};

// Predictive pipelined decoding at run time; k == 0 is plain greedy.
struct PpdSpec {
  int layer = 0;                 // early prediction after this many layers
  int k = 0;                     // candidates
  double timing_match_rate = 0;  // > 0: matches drawn at this rate (timing only)
};

// RoPE frequency scaling (proto/arch.proto's RopeScaling).
struct RopeScaling {
  enum class Kind { kNone, kLinear, kLlama3 };
  Kind kind = Kind::kNone;
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_max_position_embeddings = 8192;
  bool operator==(const RopeScaling& o) const {
    return kind == o.kind && factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor &&
           original_max_position_embeddings == o.original_max_position_embeddings;
  }
};

struct Arch {
  std::string name;
  int num_layers = 0;
  int d_model = 0;
  int d_ffn = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  bool tie_embeddings = true;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool qk_norm = false;
  // Qwen2 / Qwen2.5: learned biases on the q, k and v projections (o has none).
  bool qkv_bias = false;
  std::vector<Attention> attention;  // one per layer
  // SmolLM3's NoPE layers: empty, every attention layer rotates queries and
  // keys; else one flag per layer, true where the layer applies no RoPE
  // (config.json `no_rope_layers` holds the opposite: 1 = RoPE). Pruning
  // keeps each kept layer's flag; a layer's NoPE is not a search choice.
  std::vector<bool> no_rope;
  // Gemma 3's text layout (Gemma3ForCausalLM): RMSNorm scales (1 + w) (held
  // as 1 + w, so the runtime's norm is unchanged; checkpoints store w),
  // norms before and after both attention and MLP, GeGLU with tanh GELU,
  // the embedding scaled by sqrt(d_model), QK-norm; window layers rotate
  // with local_rope_theta, full ones with rope_theta (and rope_scaling).
  bool gemma = false;
  double local_rope_theta = 0;  // window layers' RoPE base; 0: rope_theta
  // Llama 4 text (Llama4ForCausalLM; MobileLLM-R1): the Llama layout written
  // in Hugging Face's Llama 4 file form (MLP named feed_forward, q/k rows
  // in interleaved RoPE pairs; held half-split, like every other family,
  // and converted at the file boundary: LlamaFourFileForm, decoder.h).
  bool llama4 = false;
  // Llama 4's use_qk_norm: queries and keys of every RoPE layer divided by
  // their RMS, without a weight (Llama4TextL2Norm); NoPE layers are not.
  bool qk_l2_norm = false;
  // Llama 4's attention_chunk_size when its RoPE layers are chunked; 0: all
  // layers full. A chunked layer's query attends to the keys of its own
  // chunk of attention_chunk positions (causal within it).
  int attention_chunk = 0;
  // Llama 4's attention temperature tuning (attn_temperature_tuning): a
  // NoPE layer's queries at absolute position p are multiplied by
  // log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1
  // (Llama4TextAttention; QueryTemperature). floor_scale 0: off; RoPE
  // layers are never scaled.
  double temperature_floor_scale = 0;
  double temperature_attn_scale = 0;
  int sliding_window = 0;            // tokens
  KvPredictionSpec kv_prediction;
  KvLayout kv_cache = KvLayout::kStandard;
  PpdSpec ppd;
  RopeScaling rope_scaling;

  int q_width() const { return num_heads * head_dim; }
  int kv_width() const { return num_kv_heads * head_dim; }
  int num_attention_layers() const;  // layers whose attention is not kSkip
  bool rotates(int layer) const { return no_rope.empty() || !no_rope[layer]; }
};

// The Hugging Face family an architecture is written as (config.json's
// `architectures`): a Llama layout plus what sets the family apart, QK-norm
// (Qwen3ForCausalLM), q/k/v biases (Qwen2ForCausalLM) or NoPE layers
// (SmolLM3ForCausalLM); Gemma3ForCausalLM for the Gemma layout,
// Llama4ForCausalLM for Llama 4 text's.
// ValidateArch refuses combinations no family has.
const char* ArchFamily(const Arch& arch);

// The NoPE layers of an arch, ascending (empty when every layer rotates).
std::vector<int> NoRopeLayers(const Arch& arch);

// The factor Llama 4's temperature tuning multiplies a NoPE layer's queries
// at absolute position `position` by (RoPE layers are never scaled); 1
// with tuning off (Arch::temperature_floor_scale 0).
double QueryTemperature(const Arch& arch, int64_t position);

struct ValidateOptions {
  // When > 0, d_model and d_ffn must be multiples of it (MobileLLM-Flash
  // Sec. 3.3 prunes widths in blocks of 128).
  int block_size = 0;
};

// What ValidateArch accepts at most (see arch.cc for why these).
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxWidth = 65536;  // d_model; d_ffn up to 4x
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxHeadDim = 1024;
inline constexpr int64_t kMaxVocab = 1 << 22;
inline constexpr int64_t kMaxContext = 1 << 20;  // tokens: prompts, windows, generation

// Checks every rule and reports all violations at once, one per line, each
// naming the field and value ("d_ffn 3000 is not a multiple of block size
// 128"). INVALID_ARGUMENT when any rule fails.
absl::Status ValidateArch(const Arch& arch, const ValidateOptions& options = {});

// Converts and validates. A proto with head_dim 0 takes d_model / num_heads
// (Hugging Face's convention) when that divides.
absl::StatusOr<Arch> ArchFromProto(const ArchSpec& proto, const ValidateOptions& options = {});
ArchSpec ArchToProto(const Arch& arch);
// Bytes equal for equal architectures whatever their names (deterministic
// serialisation without the name): the identity campaigns deduplicate by.
std::string ArchKey(const ArchSpec& arch);

const char* AttentionName(Attention a);  // "full", "swa", "skip"
// The proto enum as an Attention; false for ATTENTION_UNSPECIFIED and
// values this build does not know.
bool AttentionFromProto(int proto_value, Attention* out);
AttentionType AttentionToProto(Attention a);
// Compact pattern string, one letter per layer: F (full), W (SWA), S (skip).
std::string PatternString(const std::vector<Attention>& pattern);
absl::StatusOr<std::vector<Attention>> ParsePattern(const std::string& pattern);

// Longest run of consecutive efficient-attention layers (SWA or skip); the
// MobileLLM-Flash Sec. 3.5 constraint bounds it at 2.
int LongestEfficientRun(const std::vector<Attention>& pattern);

// Layers the KVP-LP auxiliary model keeps from an n-layer base (KV Prediction
// App. A, Tab. 4): with ratio p/q in lowest terms, layer i is kept when
// i mod q < p (0.5 keeps 0,2,4,...; 0.75 drops 3,7,11,...).
absl::StatusOr<std::vector<int>> LayerPrunedKeptLayers(int num_layers, double ratio);

// Aux layer feeding each base layer (KV Prediction Sec. 4.1, Tab. 1):
// KVP-LP maps base layer i to the latest kept layer at or before i; KVP-C
// gives aux layer a q+1 base layers if a < r else q, q = n_B div n_A,
// r = n_B mod n_A. An explicit layer_map wins over both.
absl::StatusOr<std::vector<int>> KvPredictionLayerMap(const Arch& base);

// The auxiliary model of a KVP architecture (LP: the base with layers
// removed; C: the canonical model). FAILED_PRECONDITION when there is none.
absl::StatusOr<Arch> AuxiliaryArch(const Arch& base);

}  // namespace hilnas

#endif  // HILNAS_SEARCH_SPACE_ARCH_H_
