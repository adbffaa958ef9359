// Decoder: the libtorch decoder-only transformer family that every hilnas
// candidate is an instance of (MobileLLM-Flash Sec. 3.3): token embedding,
// RMSNorm, rotary embeddings, grouped-query attention with optional QK-norm,
// per-layer full / sliding-window / skip attention, SwiGLU FFN, tied or
// separate output head. Parameter names follow Hugging Face Llama
// ("model.layers.3.self_attn.q_proj.weight") so checkpoints load elsewhere.
//
// Not thread-safe: one Decoder (and its KvCache) per thread.
#ifndef HILNAS_MODEL_DECODER_H_
#define HILNAS_MODEL_DECODER_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/work_split.h"
#include "search_space/arch.h"

// The module tree is a torch::nn::Module; callers of module() include
// <torch/torch.h> themselves (this header stays light: issue 34).
namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace hilnas {

enum class QuantType;  // model/quant.h

// Preallocated key/value cache for one sequence batch: per attention layer,
// K and V of shape [batch, kv_heads, slots, head_dim], slots = capacity for
// a full layer and min(capacity, window) for a sliding-window layer, whose
// cache is a ring (position p in slot p % slots), so a window layer holds
// `window` tokens however long the context (what KvCacheBytes counts).
// Appending writes into the preallocated storage, so decoding allocates no
// cache memory per token. Keys are stored after RoPE. Skip layers hold
// nothing. A q8_0 cache (Decoder::SetKvDtype) is uint8 with rows of
// head_dim / 32 Q8_0 blocks: [batch, kv_heads, slots, head_dim / 32 * 34].
//
// A SLIM architecture (Slim Attention Sec. 2) caches keys only, before
// K-norm and RoPE, [batch, slots, kv_width]: exactly half the bytes.
class KvCache {
 public:
  // Storage for attention layers below `layers` only (all when negative).
  KvCache(const Arch& arch, int64_t batch, int64_t capacity, torch::Dtype dtype, int layers = -1);

  int64_t length() const { return length_; }      // tokens cached
  int64_t capacity() const { return capacity_; }  // tokens that fit
  int64_t bytes() const;                          // allocated bytes

  // Internal to the decoder: layer storage and the commit of new tokens.
  torch::Tensor& keys(int layer) { return keys_[layer]; }
  torch::Tensor& values(int layer) { return values_[layer]; }
  const torch::Tensor& keys(int layer) const { return keys_[layer]; }
  const torch::Tensor& values(int layer) const { return values_[layer]; }
  void Advance(int64_t tokens) { length_ += tokens; }
  void SetLength(int64_t tokens) { length_ = tokens; }
  bool slim() const { return slim_; }

  // Copies positions [begin, end) of layers [first_layer, last_layer) from a
  // cache of the same architecture (pipelined decoding keeps one cache per
  // compute unit and shares committed tokens this way).
  void CopyPositions(const KvCache& from, int64_t begin, int64_t end, int first_layer,
                     int last_layer);

 private:
  int64_t capacity_;
  int64_t length_ = 0;
  bool slim_ = false;
  std::vector<torch::Tensor> keys_, values_;  // undefined for skip layers (values: and SLIM)
};

namespace decoder_internal {
class DecoderImpl;  // model/internal/decoder_layers.h
}  // namespace decoder_internal

// One attention layer's keys and values supplied from outside the layer
// (KV Prediction Sec. 4): keys before the layer's K-norm and RoPE, values as
// projected, both [batch, T, kv_heads, head_dim].
struct LayerKv {
  torch::Tensor keys, values;
};

// Sees the activations that calibration measures (MobileLLM-Flash Sec. 3.3)
// during Decoder::Forward. Tensors are [batch, T, width] and valid only
// during the call.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // Output of a norm that feeds a block: the layer's input_layernorm (before
  // attention) and post_attention_layernorm (before the FFN).
  virtual void OnBlockNorm(int /*layer*/, const torch::Tensor& /*normed*/) {}
  // The FFN hidden, the input of down_proj: silu(gate) * up.
  virtual void OnFfnHidden(int /*layer*/, const torch::Tensor& /*hidden*/) {}
  // The residual stream entering and leaving a layer.
  virtual void OnLayer(int /*layer*/, const torch::Tensor& /*input*/,
                       const torch::Tensor& /*output*/) {}
  // The keys (before K-norm and RoPE) and values an attention layer attends
  // to, [batch, T, kv_heads, head_dim]: what a KV predictor reads from an
  // auxiliary model and is trained to match in the base.
  virtual void OnKeysValues(int /*layer*/, const torch::Tensor& /*keys*/,
                            const torch::Tensor& /*values*/) {}
};

// Owns the module tree; cheap to move, never copied implicitly: a second
// handle on the same weights is asked for by name (Share).
class Decoder {
 public:
  Decoder(Decoder&&) = default;
  Decoder& operator=(Decoder&&) = default;
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Another handle on this decoder's module tree: training through either
  // changes both (a KV predictor holds its base this way).
  Decoder Share() const { return Decoder(impl_); }

  // Builds the architecture with deterministic random weights from `seed`
  // (latency does not depend on weight values). REQUIRES: ValidateArch ok.
  // `weight_dtype` other than f32 stores each matrix as StoreWeightsAs(name)
  // would, as soon as it is drawn: the same values, and a Q4_0 model never
  // holds all its f32 matrices at once (its errors are StoreWeightsAs's).
  static absl::StatusOr<Decoder> Create(const Arch& arch, uint64_t seed,
                                        torch::Dtype dtype = torch::kFloat,
                                        absl::string_view weight_dtype = "f32");
  // The architecture with weights that are about to be overwritten (by
  // LoadCheckpoint): no random initialisation. Matrices already have the
  // shape and type `weight_dtype` stores them in (SetterFor of the same
  // name then writes stored rows in place); errors are StoreWeightsAs's.
  // Every decoder's parameters share one buffer advised as huge pages.
  static absl::StatusOr<Decoder> CreateForLoading(const Arch& arch, torch::Dtype dtype,
                                                  absl::string_view weight_dtype = "f32");
  // How a loader sets a parameter of this decoder (one of NamedTensors())
  // from `rows` read from a file: rows [row0, row0 + rows.size(0)) of it
  // (any float dtype; blocks of a matrix in order, from row 0; a 1-D
  // parameter whole): copied, or, for a matrix when `weight_dtype` is not
  // f32, stored as StoreWeightsAs(weight_dtype) would as they arrive, so a
  // Q4_0 load never holds the f32 model. Errors are StoreWeightsAs's,
  // before any parameter is set.
  using ParameterSetter =
      std::function<void(torch::Tensor& param, const torch::Tensor& rows, int64_t row0)>;
  absl::StatusOr<ParameterSetter> SetterFor(absl::string_view weight_dtype) const;
  // After a loader's last SetterFor write: each matrix in the form the
  // kernels read it in (Q4_0 grouped eight rows at a time where
  // QuantGroupsRowsHere(), model/quant.h). Create and StoreWeightsAs do
  // this themselves.
  void FinishLoading();

  const Arch& arch() const;
  torch::Dtype dtype() const;  // what activations, norms and the cache compute in

  // Stores every matrix (projections, MLP, embedding, head) in `storage`
  // (bf16 or f16) while computing in f32, as phones run half-precision
  // weights: decode reads half the weight bytes. Inference only (the
  // half-precision products have no gradient). REQUIRES dtype() == f32;
  // UNIMPLEMENTED for slim caches.
  absl::Status StoreWeightsAs(torch::Dtype storage);
  // Stores every matrix (projections, embedding, head) as Q4_0 or Q8_0
  // blocks (model/quant.h): products quantize their activations to Q8_0
  // and multiply in integers, as llama.cpp's CPU path and ExecuTorch's
  // 8da4w do; embedding rows are dequantized when read. Inference only.
  // REQUIRES dtype() == f32; INVALID_ARGUMENT naming the first matrix
  // whose rows are not whole blocks of 32 (nothing is changed then);
  // UNIMPLEMENTED for slim caches.
  absl::Status QuantizeWeights(QuantType type);
  // The storage named by --weight-dtype: f32 (as built), bf16, f16, q4_0
  // or q8_0; INVALID_ARGUMENT naming any other.
  absl::Status StoreWeightsAs(absl::string_view name);

  // Full causal forward over tokens [batch, T] without a cache; logits
  // [batch, T, vocab].
  torch::Tensor Forward(const torch::Tensor& tokens, ForwardObserver* observer = nullptr);

  // Appends tokens [batch, T] to `cache` (positions cache.length() onward)
  // and returns logits [batch, T, vocab], or [batch, 1, vocab] for the last
  // position only when `last_only`. REQUIRES: cache.length() + T <= capacity.
  // One f32 token (decode) takes an allocation-free path of raw loops
  // (DecodeStep in decode_step.cc), the same kernels without ATen dispatch.
  torch::Tensor ForwardCached(const torch::Tensor& tokens, KvCache& cache, bool last_only);

  // ForwardCached of the one token `token` ([1, 1]), last_only, without the
  // token's tensor where the in-place step takes it: a generation loop's
  // step, which otherwise pays a tensor's dispatch for one id.
  torch::Tensor ForwardToken(int64_t token, KvCache& cache);

  // Off: ForwardCached decodes through the ATen modules, as prompts run
  // (for tests and benchmarks that compare the two). On by default.
  void SetInPlaceDecode(bool on);

  // A cache for `capacity` tokens. Also extends the decoder's RoPE tables to
  // `capacity`, after which decoding into this cache mutates nothing shared
  // (pipelined decoding runs several caches on one Decoder from threads).
  KvCache NewCache(int64_t batch, int64_t capacity, int layers = -1) const;
  // The storage of caches NewCache makes from now on: "f32" (the compute
  // dtype, the default), "f16" (half the bytes; keys and values rounded
  // once when stored, widened when read, as llama.cpp's default cache) or
  // "q8_0" (MobileLLM-Flash Sec. 4.2's quantized cache: each head's row as
  // Q8_0 blocks, 1.0625 bytes a value; scores in integer dot products
  // against the query quantized to Q8_0, as llama.cpp's -ctk/-ctv q8_0).
  // FAILED_PRECONDITION unless the decoder computes in f32; UNIMPLEMENTED
  // for slim caches; INVALID_ARGUMENT for q8_0 when head_dim is not a
  // multiple of 32, and for any other name.
  absl::Status SetKvDtype(absl::string_view name);
  // What SetKvDtype set: "f32" (the compute dtype; also for bf16 decoders),
  // "f16" or "q8_0".
  const char* kv_dtype() const;

  // ForwardCached taken apart, for decoding that runs layers on different
  // threads (Predictive Pipelined Decoding Alg. 1): token embedding; layers
  // [first, last) over hidden [batch, T, d] at positions start.., writing
  // their keys and values into `cache` without advancing its length; final
  // norm and head. Embed, then RunLayers over all layers, then Head is
  // ForwardCached, operation for operation. Head on an intermediate layer's
  // hidden state is the early-exit prediction (PPD Sec. 3).
  torch::Tensor Embed(const torch::Tensor& tokens);
  torch::Tensor RunLayers(const torch::Tensor& hidden, KvCache& cache, int64_t start, int first,
                          int last);
  torch::Tensor Head(const torch::Tensor& hidden);

  // Causal forward over tokens [batch, T] in which every attention layer
  // attends to `kv[layer]` (T positions) instead of its own keys and values;
  // queries stay the model's own; entries of skip layers are ignored. This is
  // how a KV predictor trains: the base's queries attend causally to the
  // predicted cache only (KV Prediction Sec. 4.2). REQUIRES kv.size() ==
  // num_layers.
  torch::Tensor ForwardWithKv(const torch::Tensor& tokens, const std::vector<LayerKv>& kv,
                              ForwardObserver* observer = nullptr);

  // Writes `kv` for positions 0..T-1 into an empty cache, applying each
  // layer's K-norm and RoPE as the layer would; the cache then holds T
  // tokens and later steps read it like any other cache (KV Prediction
  // Sec. 4.3). REQUIRES cache.length() == 0 and T <= capacity.
  void FillCache(KvCache& cache, const std::vector<LayerKv>& kv);

  // Hugging Face names -> tensors (tied heads appear once, as the embedding).
  std::vector<std::pair<std::string, torch::Tensor>> NamedTensors() const;
  std::vector<torch::Tensor> Parameters() const;
  // The matrices a decode step multiplies by: every layer's projections
  // and MLP, and the head (the embedding table only when it is the tied
  // head). What TuneGemvForm (model/gemv.h) times before a run.
  std::vector<torch::Tensor> DecodeMatrices() const;
  torch::nn::Module& module();

 private:
  static absl::StatusOr<Decoder> CreateImpl(const Arch& arch, uint64_t seed, torch::Dtype dtype,
                                            bool initialize, absl::string_view weight_dtype);
  explicit Decoder(std::shared_ptr<decoder_internal::DecoderImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<decoder_internal::DecoderImpl> impl_;
};

// Which pool a decode step's splits run on (model/work_split.h), timed on
// this model's own decode step at `keys` cached keys (a zeroed cache, the
// length set back after each step) and the faster kept for the process:
// what the agents and `hilnas run` do before their runs, after the GEMV's
// form is chosen and before decode attention's split is, whose threshold is
// a hand-over's cost and so the pool's. Errors (an arch too big for the
// memory at hand, say) come back as a status, libtorch's included.
absl::StatusOr<ThreadPoolTuning> TuneDecodeThreadPool(Decoder& decoder, int64_t keys = 256);

// RoPE inverse frequencies theta^(-2i/hd) (double, hd/2 of them), with the
// arch's rope_scaling applied (linear, or Llama 3.1's llama3).
torch::Tensor RopeInverseFrequencies(const Arch& arch);

// The parameter names and shapes an architecture implies, in a fixed order.
std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedTensorShapes(const Arch& arch);

// Gemma 3 scales by (1 + w) in every RMSNorm; a Decoder holds 1 + w (its
// norm multiplies by the scale as Llama's does) while checkpoints store w,
// as Hugging Face does. True for the tensors so held: the loader adds 1,
// the writer subtracts it (GGUF wants 1 + w, as llama.cpp's converter
// writes it).
bool HeldAsOnePlus(const Arch& arch, const std::string& name);

// Llama 4 text's files (Llama4ForCausalLM) name each layer's MLP
// `feed_forward` and rotate queries and keys in adjacent pairs (2i, 2i+1)
// of a head (its apply_rotary_emb, complex multiplication); a Decoder keeps
// Llama's names and rotates the pairs (i, i + d/2), with each head's q/k
// rows reordered to match, which computes the same scores (QK-norm, a
// per-head RMS, does not see the order). Every file boundary converts:
// the checkpoint reader, SaveCheckpoint, GGUF export from a folder.
std::string FileTensorName(const Arch& arch, const std::string& name);     // decoder -> file
std::string DecoderTensorName(const Arch& arch, const std::string& name);  // file -> decoder
// True for the decoder's tensors whose rows the file holds interleaved.
bool RopeRowsInterleavedInFile(const Arch& arch, const std::string& name);
// A q/k projection's rows per head of `head_dim`: (i, i + d/2) -> (2i, 2i+1)
// (what llama.cpp's "normal" RoPE and Llama 4's files want), and back.
torch::Tensor InterleaveRopeRows(const torch::Tensor& w, int64_t head_dim);
torch::Tensor HalfSplitRopeRows(const torch::Tensor& w, int64_t head_dim);

}  // namespace hilnas

#endif  // HILNAS_MODEL_DECODER_H_
