#include "tools/common.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device_agent/environment.h"
#include "model/checkpoint.h"
#include "proto/arch.pb.h"
#include "search_space/counts.h"
#include "search_space/shapes.h"
#include "search_space/space.h"
#include "tools/arch_file.h"
#include "util/files.h"
#include "util/status_macros.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace hilnas::tools {

std::pair<CLI::Option*, CLI::Option*> AddArchFlags(CLI::App* app, ArchFlags* flags) {
  CLI::Option* shape =
      app->add_option("--shape", flags->shape, "published shape name (see `hilnas shapes list`)");
  CLI::Option* arch = app->add_option("--arch", flags->arch,
                                      "ArchSpec .textproto file, or a Hugging Face config.json");
  shape->excludes(arch);
  return {shape, arch};
}

absl::StatusOr<Arch> ArchOf(const ArchFlags& flags) {
  const std::string shape = flags.shape;
  const std::string file = flags.arch;
  if (shape.empty() == file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --shape NAME or --arch FILE");
  }
  if (!shape.empty()) {
    HILNAS_ASSIGN_OR_RETURN(Shape s, FindShape(shape));
    return s.arch;
  }
  return ReadArchFile(file);
}

absl::StatusOr<Space> SpaceOf(const std::string& file) {
  SearchSpace proto = DefaultSearchSpace();
  if (!file.empty()) {
    proto.Clear();
    HILNAS_RETURN_IF_ERROR(ReadTextProtoFile(file, &proto));
  }
  auto space = Space::FromProto(proto);
  if (!space.ok() && !file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", space.status().message()));
  }
  return space;
}

CLI::Option* AddThreadsFlag(CLI::App* app, int32_t* threads) {
  return app->add_option("--threads", *threads, "intra-op threads; 0 = libtorch's default");
}

absl::StatusOr<StorageDtype> StorageDtypeOf(const std::string& dtype) {
  return ParseStorageDtype(dtype);
}

absl::StatusOr<TokenSplit> LoadSplit(const std::string& path, int64_t vocab, int64_t seq_len,
                                     double heldout) {
  if (path.empty()) return absl::InvalidArgumentError("give --tokens FILE (see `hilnas corpus`)");
  HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ReadTokenFile(path, vocab));
  auto split = SplitTokens(std::move(ids), heldout, seq_len + 1);
  if (!split.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", split.status().message()));
  return split;
}

absl::Status ApplyThreads(int32_t threads) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int t = threads;
  if (t < 0 || t > cores) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads ", t, " is not in 1..", cores, " (this machine's cores)"));
  }
  if (t > 0) at::set_num_threads(t);
  return absl::OkStatus();
}

absl::StatusOr<Decoder> LoadForCommand(const std::string& ckpt, int32_t threads, int64_t context,
                                       absl::string_view weight_dtype) {
  HILNAS_RETURN_IF_ERROR(ApplyThreads(threads));
  HILNAS_ASSIGN_OR_RETURN(auto checkpoint, CheckpointReader::Open(ckpt));
  HILNAS_RETURN_IF_ERROR(CheckFitsInMemory(checkpoint->arch(), std::max<int64_t>(context, 1) + 1, 4,
                                           absl::StrCat("checkpoint ", ckpt)));
  return checkpoint->Load(torch::kFloat, weight_dtype);
}

int BytesPerElement(StorageDtype dtype) { return dtype == StorageDtype::kF32 ? 4 : 2; }

absl::Status CheckFitsInMemory(const Arch& arch, int64_t context_tokens, int bytes_per_element,
                               const std::string& what) {
  const int64_t need = EstimateRunBytes(arch, context_tokens, bytes_per_element);
  const int64_t have = MemAvailableBytes();
  if (have > 0 && need > have) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": the model needs about ", need >> 20, " MiB for weights and KV cache at ",
        context_tokens, " tokens; this machine has ", have >> 20, " MiB available"));
  }
  return absl::OkStatus();
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

pid_t SpawnSelf(const std::vector<std::string>& args, const std::string& log) {
  return SpawnProcess("/proc/self/exe", args, log, /*append_log=*/false);
}

absl::StatusOr<OutputFolder> OutputFolder::Prepare(const std::string& out, bool overwrite,
                                                   const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target = fs::weakly_canonical(fs::absolute(out, ec), ec);
  for (const std::string& in : inputs) {
    if (in.empty()) continue;
    std::error_code iec;
    const fs::path input = fs::weakly_canonical(fs::absolute(in, iec), iec);
    if (PathWithin(target, input) || PathWithin(input, target)) {
      return absl::InvalidArgumentError(absl::StrCat("--out ", out, " would write over the input ",
                                                     in, "; choose another folder"));
    }
  }
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec)) {
      return absl::AlreadyExistsError(
          absl::StrCat("--out ", out, " exists and is not a folder; choose another path"));
    }
    if (!fs::is_empty(target, ec) && !overwrite) {
      return absl::AlreadyExistsError(absl::StrCat(
          "--out ", out, " exists and is not empty; choose a new folder or pass --overwrite"));
    }
  }
  fs::create_directories(target.parent_path(), ec);
  std::string staging = TempPathBeside(target.string());
  fs::remove_all(staging, ec);
  if (!fs::create_directory(staging, ec)) {
    return absl::PermissionDeniedError(
        absl::StrCat("--out ", out, ": cannot create ", staging, ": ", ec.message()));
  }
  return OutputFolder(target.string(), std::move(staging));
}

OutputFolder::OutputFolder(OutputFolder&& other) noexcept
    : out_(std::move(other.out_)), staging_(std::move(other.staging_)) {
  other.staging_.clear();
}

OutputFolder::~OutputFolder() {
  if (staging_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(staging_, ec);
}

absl::Status OutputFolder::Commit() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string old;
  if (fs::exists(out_, ec)) {
    old = absl::StrCat(out_, ".old-", getpid());
    fs::remove_all(old, ec);
    fs::rename(out_, old, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot move the old ", out_, " aside: ", ec.message()));
    }
  }
  fs::rename(staging_, out_, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, out_, ec);  // put the old one back
    return absl::PermissionDeniedError(
        absl::StrCat("cannot move ", staging_, " to ", out_, ": ", ec.message()));
  }
  staging_.clear();
  if (!old.empty()) fs::remove_all(old, ec);
  return absl::OkStatus();
}

}  // namespace hilnas::tools
