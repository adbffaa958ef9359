#include "tools/arch_file.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/hf_config.h"
#include "proto/arch.pb.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {

absl::StatusOr<Arch> ReadArchFile(const std::string& file) {
  if (absl::EndsWith(file, ".json")) return ReadConfigJson(file);  // a Hugging Face config.json
  ArchSpec spec;
  HILNAS_RETURN_IF_ERROR(ReadTextProtoFile(file, &spec));
  absl::StatusOr<Arch> arch = ArchFromProto(spec);
  if (!arch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", arch.status().message()));
  }
  return arch;
}

}  // namespace hilnas::tools
