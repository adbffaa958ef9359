#include "model/gguf_export.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/quant.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

// llama.cpp's placeholder-free token types (llama_token_type).
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUnused = 5, kByte = 6;

std::string Bytes(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

}  // namespace

std::vector<std::string> PlaceholderVocabulary(int vocab_size) {
  std::vector<std::string> tokens;
  tokens.reserve(vocab_size);
  for (int i = 0; i < vocab_size; ++i) {
    if (i == 0) {
      tokens.push_back("<unk>");
    } else if (i == 1) {
      tokens.push_back("<s>");
    } else if (i == 2) {
      tokens.push_back("</s>");
    } else if (i < 3 + 256) {
      tokens.push_back(absl::StrFormat("<0x%02X>", i - 3));
    } else {
      tokens.push_back(absl::StrCat("[", i, "]"));
    }
  }
  return tokens;
}

// llama.cpp's gemma3: layer i is global iff (i + 1) % 6 == 0 (its
// set_swa_pattern(6)), window layers rotate with base 10000, scores are
// scaled by head_dim^-1/2 (hilnas refuses other query_pre_attn_scalar).
absl::Status CheckGemma3Layout(const Arch& arch) {
  for (int i = 0; i < arch.num_layers; ++i) {
    const Attention want = (i + 1) % 6 == 0 ? Attention::kFull : Attention::kSlidingWindow;
    if (arch.attention[i] != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", i, " has ", AttentionName(arch.attention[i]),
          " attention, but llama.cpp's gemma3 layout makes every 6th layer (5, 11, ...) full and "
          "the rest sliding-window; this pattern cannot be expressed"));
    }
  }
  const double local = arch.local_rope_theta > 0 ? arch.local_rope_theta : arch.rope_theta;
  if (local != 10000.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local_rope_theta ", local, ": llama.cpp's gemma3 window layers rotate with base 10000"));
  }
  if (arch.rope_scaling.kind == RopeScaling::Kind::kLlama3) {
    return absl::InvalidArgumentError(
        "rope_scaling llama3: llama.cpp's gemma3 layout has no rope_freqs tensor");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GgufLayoutFor(const Arch& arch) {
  if (arch.gemma) HILNAS_RETURN_IF_ERROR(CheckGemma3Layout(arch));
  for (int i = 0; i < arch.num_layers && !arch.gemma; ++i) {
    if (arch.attention[i] != Attention::kFull) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", i, " has ", AttentionName(arch.attention[i]),
          " attention: llama.cpp's llama, qwen2, qwen3 and smollm3 layouts run full attention "
          "in every layer"));
    }
  }
  if (arch.kv_cache != KvLayout::kStandard) {
    return absl::InvalidArgumentError(
        "kv_cache slim: llama.cpp keeps a standard K and V cache (export the checkpoint before "
        "`hilnas slim`)");
  }
  if (arch.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    return absl::InvalidArgumentError(
        "kv_prediction: llama.cpp has no auxiliary model predicting the KV cache");
  }
  if (arch.ppd.k > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ppd k ", arch.ppd.k, ": llama.cpp decodes one token at a time"));
  }
  if (arch.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", arch.head_dim, ": rope needs an even head dimension"));
  }
  if (arch.gemma) return std::string("gemma3");
  if (arch.llama4) {
    // llama.cpp's llama4 without experts (its MobileLLM-R1 case): every
    // layer rotated and full when attention.sliding_window is 0, and the
    // weightless QK-norm on for every model but the 128-expert one.
    if (!NoRopeLayers(arch).empty()) {
      return absl::InvalidArgumentError(
          "llama4 with NoPE layers: llama.cpp runs them only with its chunked-attention graph "
          "for mixture-of-experts models (every 4th layer NoPE, chunks of 8192), which hilnas "
          "does not write");
    }
    if (arch.attention_chunk != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "llama4 with attention_chunk ", arch.attention_chunk,
          ": llama.cpp chunks attention only in its mixture-of-experts llama4 graph"));
    }
    if (!arch.qk_l2_norm) {
      return absl::InvalidArgumentError(
          "llama4 without use_qk_norm: llama.cpp normalises queries and keys of every llama4 "
          "model without experts");
    }
    return std::string("llama4");
  }
  std::string layout = "llama";
  if (arch.qk_norm) layout = "qwen3";
  if (arch.qkv_bias) {
    // llama.cpp sizes qwen2's query matrix and bias n_embd x n_embd.
    if (arch.q_width() != arch.d_model) {
      return absl::InvalidArgumentError(absl::StrCat(
          "qkv_bias with num_heads x head_dim ", arch.q_width(), " != d_model ", arch.d_model,
          ": llama.cpp's qwen2 layout needs the query width to equal d_model (prune Qwen2 "
          "candidates' d_model in whole heads, or keep it, to export them)"));
    }
    layout = "qwen2";
  }
  if (!arch.no_rope.empty()) {
    // llama.cpp's smollm3 graph: layer i skips RoPE iff (i + 1) % 4 == 0.
    for (int i = 0; i < arch.num_layers; ++i) {
      if (arch.no_rope[i] != ((i + 1) % 4 == 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "no_rope: layer ", i, " is ", arch.no_rope[i] ? "NoPE" : "rotated",
            ", but llama.cpp's smollm3 layout makes exactly every 4th layer NoPE (3, 7, 11, ...); "
            "this candidate's NoPE layers (kept from the backbone) cannot be expressed"));
      }
    }
    layout = "smollm3";
  }
  if (layout != "llama" && layout != "llama4" &&
      arch.rope_scaling.kind == RopeScaling::Kind::kLlama3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope_scaling llama3: llama.cpp's ", layout, " layout has no rope_freqs tensor"));
  }
  return layout;
}

namespace {

absl::Status CheckOptions(const GgufExportOptions& options) {
  if (options.dtype == GgmlType::kBF16) {
    return absl::InvalidArgumentError("GGUF export writes f32, f16, q4_0 or q8_0, not bf16");
  }
  if (options.context_length <= 0 || options.context_length > kMaxContext) {
    return absl::InvalidArgumentError(
        absl::StrCat("context length ", options.context_length, " is not in 1..", kMaxContext));
  }
  return absl::OkStatus();
}

// What both entry points share: `weights` by Hugging Face name (consumed),
// `source` names them in messages. REQUIRES CheckOptions(options) ok.
// The model's hyperparameters under llama.cpp's keys for `layout` (a).
void AddHyperparameters(GgufWriter& w, const Arch& arch, const std::string& a,
                        const GgufExportOptions& options) {
  w.Add("general.architecture", GgufValue::Str(a));
  w.Add("general.name", GgufValue::Str(arch.name.empty() ? "hilnas" : arch.name));
  w.Add("general.alignment", GgufValue::U32(32));
  // llama_ftype: 0 ALL_F32, 1 MOSTLY_F16, 2 MOSTLY_Q4_0, 7 MOSTLY_Q8_0;
  // quantized files carry ggml's quantization version (2), as
  // llama-quantize writes it.
  const uint32_t ftype = options.dtype == GgmlType::kF16    ? 1
                         : options.dtype == GgmlType::kQ4_0 ? 2
                         : options.dtype == GgmlType::kQ8_0 ? 7
                                                            : 0;
  w.Add("general.file_type", GgufValue::U32(ftype));
  if (GgmlIsBlock(options.dtype)) w.Add("general.quantization_version", GgufValue::U32(2));
  w.Add(a + ".context_length", GgufValue::U32(static_cast<uint32_t>(options.context_length)));
  w.Add(a + ".embedding_length", GgufValue::U32(arch.d_model));
  w.Add(a + ".block_count", GgufValue::U32(arch.num_layers));
  w.Add(a + ".feed_forward_length", GgufValue::U32(arch.d_ffn));
  w.Add(a + ".attention.head_count", GgufValue::U32(arch.num_heads));
  w.Add(a + ".attention.head_count_kv", GgufValue::U32(arch.num_kv_heads));
  w.Add(a + ".attention.key_length", GgufValue::U32(arch.head_dim));
  w.Add(a + ".attention.value_length", GgufValue::U32(arch.head_dim));
  w.Add(a + ".attention.layer_norm_rms_epsilon", GgufValue::F32(static_cast<float>(arch.norm_eps)));
  w.Add(a + ".rope.dimension_count", GgufValue::U32(arch.head_dim));
  w.Add(a + ".rope.freq_base", GgufValue::F32(static_cast<float>(arch.rope_theta)));
  w.Add(a + ".vocab_size", GgufValue::U32(arch.vocab_size));
  if (arch.gemma) w.Add(a + ".attention.sliding_window", GgufValue::U32(arch.sliding_window));
  if (arch.llama4) {  // dense (no expert layers), every layer full
    w.Add(a + ".interleave_moe_layer_step", GgufValue::U32(0));
    w.Add(a + ".expert_feed_forward_length", GgufValue::U32(arch.d_ffn));
    w.Add(a + ".attention.sliding_window", GgufValue::U32(0));
  }
  if (arch.rope_scaling.kind == RopeScaling::Kind::kLinear) {
    w.Add(a + ".rope.scaling.type", GgufValue::Str("linear"));
    w.Add(a + ".rope.scaling.factor", GgufValue::F32(static_cast<float>(arch.rope_scaling.factor)));
  }
}

// The checkpoint's vocabulary, padded to the model's size as llama.cpp's
// converter pads (the embedding may have more rows than the tokenizer ids).
absl::Status AddTokenizer(GgufWriter& w, const Arch& arch, const GgufVocabulary& v) {
  const size_t n = static_cast<size_t>(arch.vocab_size);
  if (v.tokens.size() > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer has ", v.tokens.size(), " ids but the model's vocabulary is ", n,
        ": ids past ", n - 1, " would have no embedding row"));
  }
  if (v.types.size() != v.tokens.size() || (v.model == "llama" && v.scores.size() != v.tokens.size())) {
    return absl::InternalError("GGUF vocabulary: tokens, types and scores differ in length");
  }
  std::vector<std::string> tokens = v.tokens;
  std::vector<int32_t> types = v.types;
  std::vector<float> scores = v.scores;
  for (size_t id = tokens.size(); id < n; ++id) {
    tokens.push_back(absl::StrCat("[PAD", id, "]"));
    types.push_back(kUnused);
    scores.push_back(0.f);
  }
  w.Add("tokenizer.ggml.model", GgufValue::Str(v.model));
  if (v.model == "gpt2") w.Add("tokenizer.ggml.pre", GgufValue::Str(v.pre));
  w.Add("tokenizer.ggml.tokens", GgufValue::StrArray(std::move(tokens)));
  w.Add("tokenizer.ggml.token_type", GgufValue::I32Array(types));
  if (v.model == "llama") {
    w.Add("tokenizer.ggml.scores", GgufValue::F32Array(scores));
    w.Add("tokenizer.ggml.add_space_prefix", GgufValue::Bool(v.add_space_prefix));
  } else {
    w.Add("tokenizer.ggml.merges", GgufValue::StrArray(v.merges));
  }
  auto id = [&](const char* key, int32_t value) {
    if (value >= 0) w.Add(key, GgufValue::U32(static_cast<uint32_t>(value)));
  };
  id("tokenizer.ggml.bos_token_id", v.bos);
  id("tokenizer.ggml.eos_token_id", v.eos);
  id("tokenizer.ggml.unknown_token_id", v.unk);
  id("tokenizer.ggml.padding_token_id", v.pad);
  w.Add("tokenizer.ggml.add_bos_token", GgufValue::Bool(v.add_bos));
  w.Add("tokenizer.ggml.add_eos_token", GgufValue::Bool(v.add_eos));
  return absl::OkStatus();
}

// A placeholder vocabulary of arch.vocab_size tokens (unknown, BOS, EOS,
// the 256 bytes, then numbered tokens): the model runs, no text is read.
void AddPlaceholderTokenizer(GgufWriter& w, const Arch& arch) {
  std::vector<std::string> tokens = PlaceholderVocabulary(arch.vocab_size);
  std::vector<int32_t> types(tokens.size(), kNormal);
  for (size_t i = 0; i < types.size(); ++i) {
    types[i] = i == 0 ? kUnknown : i < 3 ? kControl : i < 3 + 256 ? kByte : kNormal;
  }
  w.Add("tokenizer.ggml.model", GgufValue::Str("llama"));
  w.Add("tokenizer.ggml.tokens", GgufValue::StrArray(std::move(tokens)));
  w.Add("tokenizer.ggml.scores", GgufValue::F32Array(std::vector<float>(arch.vocab_size, 0.f)));
  w.Add("tokenizer.ggml.token_type", GgufValue::I32Array(types));
  w.Add("tokenizer.ggml.unknown_token_id", GgufValue::U32(0));
  w.Add("tokenizer.ggml.bos_token_id", GgufValue::U32(std::min(1, arch.vocab_size - 1)));
  w.Add("tokenizer.ggml.eos_token_id", GgufValue::U32(std::min(2, arch.vocab_size - 1)));
}

// llama.cpp divides each RoPE pair's angle by its factor: base / scaled
// inverse frequencies (Llama 3.1's scaling).
torch::Tensor Llama3RopeFactors(const Arch& arch) {
  torch::Tensor scaled = RopeInverseFrequencies(arch).to(torch::kDouble);
  torch::Tensor base =
      torch::pow(arch.rope_theta, -torch::arange(0, arch.head_dim, 2, torch::kDouble) /
                                      static_cast<double>(arch.head_dim));
  return (base / scaled).to(torch::kFloat);
}

// INVALID_ARGUMENT naming a tensor the layout had no place for.
absl::Status NothingLeft(const std::map<std::string, torch::Tensor>& weights,
                         const std::string& source, const std::string& layout) {
  if (weights.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(source, ": tensor \"", weights.begin()->first,
                                                 "\" has no place in llama.cpp's ", layout,
                                                 " layout"));
}

// Adds tensors to a GGUF file: matrices at the export's type (f32, f16,
// or quantized blocks made when the file is written), everything else f32.
// dims innermost first ([out, in] -> {in, out}). A matrix a block type
// cannot hold is remembered in `refused` (the first one), not added.
struct TensorAdder {
  GgufWriter& w;
  GgmlType matrix_type;
  absl::Status refused;

  void operator()(const std::string& name, const torch::Tensor& t, bool matrix) {
    std::vector<uint64_t> dims;
    for (int64_t d = t.dim() - 1; d >= 0; --d) dims.push_back(static_cast<uint64_t>(t.size(d)));
    const GgmlType type = matrix ? matrix_type : GgmlType::kF32;
    if (!GgmlIsBlock(type)) {
      torch::Tensor stored = type == GgmlType::kF16 ? t.to(torch::kHalf) : t;
      w.AddTensor(name, dims, type,
                  [stored]() -> absl::StatusOr<std::string> { return Bytes(stored); });
      return;
    }
    const QuantType q = type == GgmlType::kQ4_0 ? QuantType::kQ4_0 : QuantType::kQ8_0;
    if (t.size(1) % kQuantBlock != 0) {
      if (refused.ok()) {
        refused = absl::InvalidArgumentError(absl::StrCat(name, " has rows of ", t.size(1),
                                                          " values: ", GgmlTypeName(type),
                                                          " stores whole blocks of ", kQuantBlock));
      }
      return;
    }
    w.AddTensor(name, dims, type, [t, q]() -> absl::StatusOr<std::string> {
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor blocks, QuantizeMatrix(t.contiguous(), q));
      return std::string(reinterpret_cast<const char*>(blocks.data_ptr<uint8_t>()), blocks.numel());
    });
  }
};

absl::Status WriteGguf(const Arch& arch, std::map<std::string, torch::Tensor> weights,
                       const std::string& source, const std::string& out_path,
                       const GgufExportOptions& options) {
  HILNAS_ASSIGN_OR_RETURN(const std::string layout, GgufLayoutFor(arch));
  try {
    auto take = [&](const std::string& name) -> absl::StatusOr<torch::Tensor> {
      auto it = weights.find(name);
      if (it == weights.end()) {
        return absl::DataLossError(
            absl::StrCat(source, ": no tensor \"", name, "\" for the GGUF file"));
      }
      torch::Tensor t = it->second.to(torch::kFloat);
      weights.erase(it);
      return t;
    };

    GgufWriter w;
    AddHyperparameters(w, arch, layout, options);
    if (options.vocabulary) {
      HILNAS_RETURN_IF_ERROR(AddTokenizer(w, arch, *options.vocabulary));
    } else {
      AddPlaceholderTokenizer(w, arch);
    }

    // Tensors in llama.cpp's names.
    TensorAdder add{w, options.dtype, absl::OkStatus()};
    HILNAS_ASSIGN_OR_RETURN(torch::Tensor embed, take("model.embed_tokens.weight"));
    add("token_embd.weight", embed, true);
    if (arch.rope_scaling.kind == RopeScaling::Kind::kLlama3) {
      add("rope_freqs.weight", Llama3RopeFactors(arch), false);
    }
    for (int i = 0; i < arch.num_layers; ++i) {
      const std::string hf = absl::StrCat("model.layers.", i, "."),
                        gg = absl::StrCat("blk.", i, ".");
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor attn_norm, take(hf + "input_layernorm.weight"));
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor q, take(hf + "self_attn.q_proj.weight"));
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor k, take(hf + "self_attn.k_proj.weight"));
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor v, take(hf + "self_attn.v_proj.weight"));
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor o, take(hf + "self_attn.o_proj.weight"));
      // llama and smollm3 rotate adjacent pairs (LLAMA_ROPE_TYPE_NORM);
      // qwen2 and qwen3 rotate halves, as Hugging Face does.
      const bool interleaved = layout == "llama" || layout == "smollm3" || layout == "llama4";
      if (interleaved) {
        q = InterleaveRopeRows(q, arch.head_dim);
        k = InterleaveRopeRows(k, arch.head_dim);
      }
      add(gg + "attn_norm.weight", attn_norm, false);
      add(gg + "attn_q.weight", q, true);
      add(gg + "attn_k.weight", k, true);
      add(gg + "attn_v.weight", v, true);
      add(gg + "attn_output.weight", o, true);
      if (arch.qkv_bias) {  // qwen2: never interleaved, biases as they are
        for (const char* part : {"q", "k", "v"}) {
          HILNAS_ASSIGN_OR_RETURN(torch::Tensor bias,
                                  take(absl::StrCat(hf, "self_attn.", part, "_proj.bias")));
          add(absl::StrCat(gg, "attn_", part, ".bias"), bias, false);
        }
      }
      if (arch.qk_norm) {
        HILNAS_ASSIGN_OR_RETURN(torch::Tensor qn, take(hf + "self_attn.q_norm.weight"));
        HILNAS_ASSIGN_OR_RETURN(torch::Tensor kn, take(hf + "self_attn.k_norm.weight"));
        add(gg + "attn_q_norm.weight", qn, false);
        add(gg + "attn_k_norm.weight", kn, false);
      }
      if (arch.gemma) {  // Gemma's norm of attention's output
        HILNAS_ASSIGN_OR_RETURN(torch::Tensor post, take(hf + "post_attention_layernorm.weight"));
        add(gg + "post_attention_norm.weight", post, false);
      }
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor ffn_norm,
                              take(hf + (arch.gemma ? "pre_feedforward_layernorm.weight"
                                                    : "post_attention_layernorm.weight")));
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor gate, take(hf + "mlp.gate_proj.weight"));
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor up, take(hf + "mlp.up_proj.weight"));
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor down, take(hf + "mlp.down_proj.weight"));
      add(gg + "ffn_norm.weight", ffn_norm, false);
      add(gg + "ffn_gate.weight", gate, true);
      add(gg + "ffn_up.weight", up, true);
      add(gg + "ffn_down.weight", down, true);
      if (arch.gemma) {
        HILNAS_ASSIGN_OR_RETURN(torch::Tensor post, take(hf + "post_feedforward_layernorm.weight"));
        add(gg + "post_ffw_norm.weight", post, false);
      }
    }
    HILNAS_ASSIGN_OR_RETURN(torch::Tensor norm, take("model.norm.weight"));
    add("output_norm.weight", norm, false);
    if (!arch.tie_embeddings) {
      HILNAS_ASSIGN_OR_RETURN(torch::Tensor head, take("lm_head.weight"));
      add("output.weight", head, true);
    }
    weights.erase("lm_head.weight");  // a tied checkpoint may store the copy
    HILNAS_RETURN_IF_ERROR(NothingLeft(weights, source, layout));
    HILNAS_RETURN_IF_ERROR(add.refused);
    return w.Write(out_path);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("GGUF export of ", source, ": ", e.what()));
  }
}

}  // namespace

absl::Status ExportGguf(const std::string& checkpoint_dir, const std::string& out_path,
                        const GgufExportOptions& options) {
  HILNAS_RETURN_IF_ERROR(CheckOptions(options));
  HILNAS_ASSIGN_OR_RETURN(auto checkpoint, CheckpointReader::Open(checkpoint_dir));
  const Arch& arch = checkpoint->arch();
  // Refused before the weights are read.
  HILNAS_RETURN_IF_ERROR(GgufLayoutFor(arch).status());
  try {
    HILNAS_ASSIGN_OR_RETURN(auto weights, checkpoint->ReadTensors());  // in the decoder's form
    for (auto& [name, t] : weights) {
      if (HeldAsOnePlus(arch, name)) t = t.to(torch::kFloat) + 1;  // llama.cpp's gemma3 wants 1 + w
    }
    return WriteGguf(arch, std::move(weights), checkpoint_dir, out_path, options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("GGUF export of ", checkpoint_dir, ": ", e.what()));
  }
}

absl::Status ExportGguf(const Decoder& decoder, const std::string& out_path,
                        const GgufExportOptions& options) {
  HILNAS_RETURN_IF_ERROR(CheckOptions(options));
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> weights;
  for (auto& [name, tensor] : decoder.NamedTensors()) weights.emplace(name, tensor);
  return WriteGguf(decoder.arch(), std::move(weights), "the model", out_path, options);
}

}  // namespace hilnas
