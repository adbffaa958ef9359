// Flags shared by several subcommands; defined in hilnas_main.cc.
#ifndef HILNAS_TOOLS_FLAGS_H_
#define HILNAS_TOOLS_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, shape);
ABSL_DECLARE_FLAG(std::string, arch);
ABSL_DECLARE_FLAG(std::string, ckpt);
ABSL_DECLARE_FLAG(std::string, space);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(std::string, dtype);
ABSL_DECLARE_FLAG(int64_t, prompt_tokens);
ABSL_DECLARE_FLAG(int64_t, max_new_tokens);
ABSL_DECLARE_FLAG(int64_t, prefill_chunk);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(int32_t, n);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(std::string, coordinator);
ABSL_DECLARE_FLAG(std::string, token);

#endif  // HILNAS_TOOLS_FLAGS_H_
