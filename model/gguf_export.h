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

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "search_space/arch.h"

namespace hilnas {

class Decoder;

struct GgufExportOptions {
  // Matrices: f32, f16, or q4_0 / q8_0 (llama-quantize --pure's tensors,
  // byte for byte: every matrix, the token embedding included). Norms stay
  // f32, as llama.cpp's.
  GgmlType dtype = GgmlType::kF32;
  int64_t context_length = 8192;  // {arch}.context_length: the training context llama.cpp assumes
};

// "llama" or "qwen3"; INVALID_ARGUMENT naming the first layer or option
// llama.cpp cannot express.
absl::StatusOr<std::string> GgufLayoutFor(const Arch& arch);

// Reads the checkpoint folder (config.json + safetensors, sharded or not)
// and writes `out_path`. The vocabulary is a placeholder of the model's
// size (<unk>, <s>, </s>, byte tokens, then numbered ones): hilnas has no
// tokenizer, and timing does not need one.
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
