// config.json as Hugging Face writes it, read so that nothing in it is
// silently ignored (issue 41). Every top-level key is read, or on a list of
// keys known not to change what the model computes (kept per family), or
// refused by name with the file and value. Both generations of RoPE fields
// are read: transformers 4's `rope_theta` / `rope_scaling` and transformers
// 5's `rope_parameters` (flat, or per layer kind); where both are present
// they must agree.
#ifndef HILNAS_MODEL_HF_CONFIG_H_
#define HILNAS_MODEL_HF_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "search_space/arch.h"

namespace hilnas {

// The families read as published. Llama covers Llama 2/3.x, SmolLM2 and
// MobileLLM's Llama layout; Qwen3 adds QK-norm; MobileLLM (Liu et al. 2024)
// ties its head through `share_embedding`.
// Qwen2 (Qwen2.5) adds q/k/v biases; SmolLM3 NoPE layers.
// Gemma 3 text (Gemma3ForCausalLM) has its own layout (Arch::gemma).
enum class ConfigFamily { kLlama, kQwen3, kMobileLlm, kQwen2, kSmolLm3, kGemma3, kLlama4 };
const char* ConfigFamilyClass(ConfigFamily family);  // "LlamaForCausalLM", ...

// Writes the family ArchFamily names (LlamaForCausalLM; Qwen3ForCausalLM
// when queries and keys are normalised; Qwen2ForCausalLM with q/k/v biases;
// SmolLM3ForCausalLM with NoPE layers, as `no_rope_layers`; Gemma3ForCausalLM
// and Llama4ForCausalLM in their own keys), with `rope_theta` / `rope_scaling` (transformers 4's form,
// which transformers 5 still reads); `layer_types` ("full_attention",
// "sliding_attention", hilnas's "skip_attention") with `sliding_window`;
// hilnas's own extras (`kv_cache`, `kv_prediction`, `hilnas_name`) in
// docs/checkpoints.md.
absl::Status WriteConfigJson(const Arch& arch, const std::string& path);

// INVALID_ARGUMENT naming the file, the field and its value for: a config
// with neither `architectures` nor `model_type`, an architecture or model
// type outside the families above (or the two disagreeing), any key that is
// neither read nor known to be inert for the family, biased projections, an
// activation other than silu, an unknown RoPE type or RoPE parameter,
// `rope_theta`/`rope_scaling` disagreeing with `rope_parameters`, and
// per-layer-kind RoPE parameters that differ between kinds in use.
absl::StatusOr<Arch> ReadConfigJson(const std::string& path);
// The same, of the text read from `path` (named in errors).
absl::StatusOr<Arch> ParseConfigJson(const std::string& text, const std::string& path);

// What was read, one field a line ("heads 32, KV heads 8, head_dim 64",
// "RoPE theta 500000, llama3 scaling factor 32 ..."), so that a wrong
// import can be seen (`hilnas checkpoint check`).
std::string DescribeArch(const Arch& arch);

}  // namespace hilnas

#endif  // HILNAS_MODEL_HF_CONFIG_H_
