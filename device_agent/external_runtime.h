// A runtime that drives an on-phone benchmark binary through commands the
// agent's operator configures (typically `adb shell ...`) and parses its
// output: llama.cpp's llama-bench (`-o json`) or ExecuTorch's llama runner
// (the `PyTorchObserver {...}` stats line). See docs/agents.md for a
// step-by-step set-up next to a phone.
//
// Safety: the commands are the operator's local configuration; nothing that
// arrives over the network is executed. Placeholders are filled only with
// numbers the agent validated and paths the agent chose.
#ifndef HILNAS_DEVICE_AGENT_EXTERNAL_RUNTIME_H_
#define HILNAS_DEVICE_AGENT_EXTERNAL_RUNTIME_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "device_agent/runtime.h"
#include "util/subprocess.h"

namespace hilnas {

enum class ExternalFormat { kLlamaBench, kExecuTorch };

// --export-command value selecting hilnas's own GGUF export.
inline constexpr char kBuiltinGgufExport[] = "builtin:gguf";

absl::StatusOr<ExternalFormat> ParseExternalFormat(const std::string& name);

struct ExternalRuntimeOptions {
  std::string name = "external";  // reported as the runtime, e.g. "llama.cpp"
  std::string version;            // reported as the runtime version
  ExternalFormat format = ExternalFormat::kLlamaBench;
  // Run once per architecture on the agent host; kBuiltinGgufExport uses
  // hilnas's own GGUF writer (llama-bench needs nothing else). Placeholders: {config}
  // (a Hugging Face config.json hilnas writes), {checkpoint} (the request's
  // checkpoint folder, or empty), {model} (the file to produce),
  // {precision} (fp32, bf16, fp16, int8, q4_0, q8_0). Empty: no export step, and
  // {model} is the checkpoint folder.
  std::string export_command;
  // Run once per timed run. Placeholders: {model}, {prompt_tokens},
  // {decode_tokens}, {depth} (= prompt_tokens: decode is timed after a
  // prompt, llama-bench's -d), {threads}. Its standard output is parsed.
  std::string bench_command;
  std::string work_dir = "/tmp/hilnas-agent";  // where {config} and {model} live
  double timeout_s = 900;                      // per command
};

std::unique_ptr<Runtime> NewExternalRuntime(const ExternalRuntimeOptions& options);

// llama-bench `-o json` (or `-o jsonl`): the prompt-processing test
// (n_prompt > 0, n_gen == 0, at depth 0) gives TTFT, the generation test
// (n_gen > 0, n_prompt == 0) at depth n_depth == prompt_tokens (run with
// `-d 0,{depth}`) gives decode time per token after the prompt, as the
// built-in runtime measures it; output without n_depth (llama-bench before
// depths existed) gives decode at depth 0. avg_ns is used, as samples come
// one run at a time. The version is "b{build_number} ({build_commit})".
// INVALID_ARGUMENT when a test is missing or the token counts differ from
// the ones asked for.
absl::StatusOr<RunTiming> ParseLlamaBenchOutput(const std::string& output, int prompt_tokens,
                                                int decode_tokens);

// ExecuTorch llama runner: the last line `PyTorchObserver {json}`; TTFT =
// first_token_ms - inference_start_ms, decode = (inference_end_ms -
// first_token_ms) / (generated_tokens - 1), as the runner's own report does.
absl::StatusOr<RunTiming> ParseExecuTorchOutput(const std::string& output);

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_EXTERNAL_RUNTIME_H_
