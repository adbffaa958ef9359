// A checkpoint as a llama.cpp GGUF file, for the external llama-bench
// runtime and for checking hilnas's forward against llama.cpp's
// (docs/agents.md, "llama.cpp"). Two layouts, as llama.cpp's own converter
// (convert_hf_to_gguf.py) writes them:
//  - "qwen3" for models with QK-norm: NeoX rope (the rotate-half pairing
//    hilnas and Hugging Face use), per-head q/k RMS norms;
//  - "llama" otherwise: llama.cpp pairs rope dimensions (2i, 2i+1), so the
//    q and k rows of each head are permuted from (i, i + d/2) to adjacent.
// Only what llama.cpp can run is written: full attention in every layer, a
// standard KV cache, no KV prediction or pipelined decoding; llama3 rope
// scaling only in the llama layout (its rope_freqs tensor).
#ifndef HILNAS_MODEL_GGUF_EXPORT_H_
#define HILNAS_MODEL_GGUF_EXPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "search_space/arch.h"

namespace hilnas {

class Decoder;

// The tokenizer a GGUF file carries (tokenizer.ggml.*), as llama.cpp reads
// it: "gpt2" (byte-level BPE: tokens as the vocabulary spells them, merges,
// and the pre-tokenizer's llama.cpp name) or "llama" (SentencePiece-style:
// tokens with scores, byte tokens typed as bytes). tools/ fills it from a
// checkpoint's tokenizer.json (tokenizer/), so model/ needs no tokenizer.
struct GgufVocabulary {
  std::string model;  // "gpt2" | "llama"
  std::string pre;    // tokenizer.ggml.pre (gpt2 only): "llama-bpe", "qwen2", "gpt-2"
  std::vector<std::string> tokens;
  std::vector<int32_t> types;       // llama_token_type: 1 normal ... 6 byte
  std::vector<float> scores;        // llama only
  std::vector<std::string> merges;  // gpt2 only, "left right" in rank order
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;  // -1: none
  bool add_bos = false, add_eos = false, add_space_prefix = false;
};

struct GgufExportOptions {
  // Matrices: f32, f16, or q4_0 / q8_0 (llama-quantize --pure's tensors,
  // byte for byte: every matrix, the token embedding included). Norms stay
  // f32, as llama.cpp's.
  GgmlType dtype = GgmlType::kF32;
  int64_t context_length = 8192;  // {arch}.context_length: the training context llama.cpp assumes
  // The checkpoint's own tokenizer; null: a placeholder vocabulary of the
  // model's size (<unk>, <s>, </s>, byte tokens, numbered ones), enough for
  // timing. Fewer tokens than the model's vocabulary are padded with
  // "[PAD<id>]" as llama.cpp's converter pads; more are refused.
  std::shared_ptr<const GgufVocabulary> vocabulary;
};

// llama.cpp's architecture for the arch's family: "llama", "qwen3"
// (QK-norm), "qwen2" (q/k/v biases; query width must equal d_model) or
// "smollm3" (NoPE in exactly every 4th layer); INVALID_ARGUMENT naming the
// first layer or option llama.cpp cannot express.
absl::StatusOr<std::string> GgufLayoutFor(const Arch& arch);

// Reads the checkpoint folder (config.json + safetensors, sharded or not)
// and writes `out_path` (the vocabulary: options.vocabulary).
absl::Status ExportGguf(const std::string& checkpoint_dir, const std::string& out_path,
                        const GgufExportOptions& options = {});
// The same from a model in memory (its weights as they are, no checkpoint
// written and read back): the agent's built-in export of random weights.
absl::Status ExportGguf(const Decoder& decoder, const std::string& out_path,
                        const GgufExportOptions& options = {});

// The placeholder vocabulary's tokens, exposed for tests.
std::vector<std::string> PlaceholderVocabulary(int vocab_size);

}  // namespace hilnas

#endif  // HILNAS_MODEL_GGUF_EXPORT_H_
