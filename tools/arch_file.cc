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

Arch Full4Arch() {
  Arch a;
  a.name = "full4";
  a.num_layers = 4;
  a.d_model = 512;
  a.d_ffn = 1536;
  a.num_heads = 8;
  a.num_kv_heads = 2;
  a.head_dim = 64;
  a.vocab_size = 4096;
  a.qk_norm = true;
  a.attention.assign(4, Attention::kFull);
  return a;
}

}  // namespace hilnas::tools
