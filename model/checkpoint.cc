#include "model/checkpoint.h"

#include <torch/torch.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace hilnas {

absl::Status SaveCheckpoint(const Decoder& decoder, const std::string& dir, StorageDtype dtype) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  // In the file form of the arch's family (decoder.h: HeldAsOnePlus,
  // FileTensorName).
  const Arch& arch = decoder.arch();
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& [name, tensor] : decoder.NamedTensors()) {
    torch::Tensor t = tensor;
    if (HeldAsOnePlus(arch, name)) t = t.detach().to(torch::kFloat) - 1;  // Gemma: w
    if (RopeRowsInterleavedInFile(arch, name)) t = InterleaveRopeRows(t.detach(), arch.head_dim);
    named.emplace_back(FileTensorName(arch, name), t);
  }
  HILNAS_RETURN_IF_ERROR(WriteSafetensors(WeightsFileName(dir), named, dtype));
  return WriteConfigJson(decoder.arch(), ConfigFileName(dir));
}

absl::Status CopyTokenizerFiles(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  for (const char* name : kTokenizerFiles) {
    std::error_code ec;
    const std::string source = CheckpointFile(from, name);
    if (!fs::is_regular_file(source, ec)) continue;
    fs::copy_file(source, CheckpointFile(to, name), fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat(source, ": cannot copy to ", to, ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFiniteWeights(const std::string& safetensors_path) {
  absl::StatusOr<std::map<std::string, torch::Tensor>> tensors;
  if (std::filesystem::is_directory(safetensors_path)) {
    HILNAS_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(safetensors_path));
    tensors = reader->ReadTensors();
  } else {
    tensors = ReadSafetensors(safetensors_path);
  }
  if (!tensors.ok()) return tensors.status();
  std::vector<std::string> bad;
  int64_t total = 0;
  try {
    for (const auto& [name, t] : *tensors) {
      const int64_t n = torch::logical_not(torch::isfinite(t)).sum().item<int64_t>();
      if (n == 0) continue;
      total += n;
      if (bad.size() < 8) bad.push_back(absl::StrCat(name, " (", n, " of ", t.numel(), ")"));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(safetensors_path, ": ", e.what_without_backtrace()));
  }
  if (total == 0) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(safetensors_path, ": ", total, " NaN or Inf weights, in ",
                                          absl::StrJoin(bad, ", "),
                                          bad.size() == 8 ? ", ..." : ""));
}

absl::StatusOr<Decoder> LoadCheckpoint(const std::string& dir, torch::Dtype dtype) {
  HILNAS_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(dir));
  return reader->Load(dtype);
}

}  // namespace hilnas
