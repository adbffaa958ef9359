// An architecture file: a .textproto ArchSpec or a Hugging Face
// config.json. Apart from tools/common.h so hilnas-agent can read one
// without linking the rest of the commands' shared code.
#ifndef HILNAS_TOOLS_ARCH_FILE_H_
#define HILNAS_TOOLS_ARCH_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "search_space/arch.h"

namespace hilnas::tools {

// Validated; errors name the file.
absl::StatusOr<Arch> ReadArchFile(const std::string& file);

// bench/runtime_compare.sh's full4, the agents' one-shot measurements'
// default shape: 4 layers x d 512, ffn 1536, 8/2 heads x 64, vocab 4096,
// QK-norm, every layer full attention, no window set.
Arch Full4Arch();

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_ARCH_FILE_H_
