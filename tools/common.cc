#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "proto/arch.pb.h"
#include "search_space/shapes.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "util/status_macros.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace hilnas::tools {

absl::StatusOr<Arch> ArchOf(const CommandLine& cl) {
  const std::string shape = cl.shape;
  const std::string file = cl.arch;
  if (shape.empty() == file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --shape NAME or --arch FILE");
  }
  if (!shape.empty()) {
    HILNAS_ASSIGN_OR_RETURN(Shape s, FindShape(shape));
    return s.arch;
  }
  if (absl::EndsWith(file, ".json")) return ReadConfigJson(file);  // a Hugging Face config.json
  ArchSpec spec;
  HILNAS_RETURN_IF_ERROR(ReadTextProtoFile(file, &spec));
  auto arch = ArchFromProto(spec);
  if (!arch.ok())
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", arch.status().message()));
  return arch;
}

absl::StatusOr<StorageDtype> StorageDtypeOf(const CommandLine& cl) {
  return ParseStorageDtype(cl.dtype);
}

void ApplyThreads(const CommandLine& cl) {
  if (const int t = cl.threads; t > 0) at::set_num_threads(t);
}

std::string WithCommas(int64_t n) {
  std::string digits = absl::StrCat(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "hilnas: error: %s\n", std::string(status.message()).c_str());
  return 1;
}

pid_t SpawnSelf(const std::vector<std::string>& args, const std::string& log) {
  return SpawnProcess("/proc/self/exe", args, log, /*append_log=*/false);
}

}  // namespace hilnas::tools
