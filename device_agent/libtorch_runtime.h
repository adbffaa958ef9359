// The built-in runtime: the hilnas decoder (model/) on this machine's CPU
// through libtorch, fp32 or bf16, with chunked prefill.
#ifndef HILNAS_DEVICE_AGENT_LIBTORCH_RUNTIME_H_
#define HILNAS_DEVICE_AGENT_LIBTORCH_RUNTIME_H_

#include <memory>

#include "device_agent/runtime.h"

namespace hilnas {

struct LibtorchRuntimeOptions {
  // Refuse (RESOURCE_EXHAUSTED) a model whose weights plus KV cache would
  // exceed this many bytes; 0 = MemAvailable from /proc/meminfo. A phone
  // kills an over-large process rather than failing an allocation, so the
  // agent checks before it builds.
  int64_t memory_limit_bytes = 0;
};

std::unique_ptr<Runtime> NewLibtorchRuntime(const LibtorchRuntimeOptions& options = {});

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_LIBTORCH_RUNTIME_H_
