// A Runtime builds an architecture on this device and times single runs of
// it. The measurement protocol (protocol.h) decides how many runs, warm-ups
// and cool-downs; a Runtime only knows how to execute one.
#ifndef HILNAS_DEVICE_AGENT_RUNTIME_H_
#define HILNAS_DEVICE_AGENT_RUNTIME_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/benchmark.pb.h"

namespace hilnas {

// One timed run: prefill `prompt_tokens`, then decode.
struct RunTiming {
  double ttft_ms = 0;              // prompt submitted -> first token chosen
  double decode_ms_per_token = 0;  // over the tokens after the first
  int decode_tokens = 0;           // tokens generated after the first
  int64_t kv_cache_bytes = 0;      // the run's KV cache (0 when the runtime cannot tell)
  // An external runtime's own process: its peak resident memory, and the
  // version it reported in its output (0 / empty for in-process runtimes,
  // whose memory is the agent's own).
  int64_t process_peak_rss_bytes = 0;
  std::string reported_version;
};

// A model built and ready to run. Not thread-safe.
class PreparedModel {
 public:
  virtual ~PreparedModel() = default;
  // Errors: RESOURCE_EXHAUSTED when memory runs out, DEADLINE_EXCEEDED when
  // an external command times out, INTERNAL for anything else.
  virtual absl::StatusOr<RunTiming> Run(int prompt_tokens, int decode_tokens) = 0;
  // What the runtime chose for this model on this device, for the result
  // (DeviceIdentity.runtime_kernels): the built-in runtime's decode kernel
  // and its tuned form. Empty when there is nothing to say.
  virtual std::string kernels() const { return ""; }
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string name() const = 0;  // "libtorch-cpu", "llama.cpp", "executorch"
  virtual std::string version() const = 0;
  // False for runtimes that time another process (the agent's own memory
  // then says nothing of the model's).
  virtual bool runs_in_process() const { return true; }
  // Builds what `request` names (its arch, or checkpoint_dir on this device),
  // at its precision and thread count. Errors: INVALID_ARGUMENT or
  // UNIMPLEMENTED for an architecture or precision this runtime cannot run
  // (reported as UNSUPPORTED_ARCH), RESOURCE_EXHAUSTED when it does not fit.
  virtual absl::StatusOr<std::unique_ptr<PreparedModel>> Prepare(
      const BenchmarkRequest& request) = 0;
};

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_RUNTIME_H_
