// What several commands share: option groups (a model named by --shape or
// --arch, a coordinator connection), output folders, size checks. Each
// command's own options are in its file under tools/commands/.
#ifndef HILNAS_TOOLS_COMMON_H_
#define HILNAS_TOOLS_COMMON_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "quality/tokens.h"
#include "search_space/arch.h"
#include "search_space/space.h"
#include "tools/cli.h"

namespace hilnas::tools {

// --shape NAME | --arch FILE, at most one (CLI11 checks).
struct ArchFlags {
  std::string shape;
  std::string arch;
  bool given() const { return !shape.empty() || !arch.empty(); }
};
// Adds --shape and --arch to `app`, excluding each other; returns them.
std::pair<CLI::Option*, CLI::Option*> AddArchFlags(CLI::App* app, ArchFlags* flags);

// The architecture named by --shape or read from --arch (a .textproto
// ArchSpec or a Hugging Face config.json); exactly one must be given.
absl::StatusOr<Arch> ArchOf(const ArchFlags& flags);

// --space FILE, else MobileLLM-Flash Tab. 3; errors name the file.
absl::StatusOr<Space> SpaceOf(const std::string& file);

// Adds --threads (0 = libtorch's default, at most this machine's cores).
CLI::Option* AddThreadsFlag(CLI::App* app, int32_t* threads);

// The checkpoint storage type named by --dtype (f32 | f16 | bf16).
absl::StatusOr<StorageDtype> StorageDtypeOf(const std::string& dtype);

// The token file at `path` (ids checked against `vocab`), split as the
// trainer splits it: the last `heldout` fraction held out, both parts at
// least one window of seq_len + 1. Errors name the file.
absl::StatusOr<TokenSplit> LoadSplit(const std::string& path, int64_t vocab, int64_t seq_len,
                                     double heldout);

// at::set_num_threads(threads) when threads > 0; INVALID_ARGUMENT for more
// threads than the machine has cores (100000 threads would hang it).
absl::Status ApplyThreads(int32_t threads);

// Loads the checkpoint at `ckpt` for eval and generate: --threads applied,
// memory for f32 weights and a context of `context` tokens checked first;
// matrices stored as `weight_dtype` as they are read (CheckpointReader::Load).
absl::StatusOr<Decoder> LoadForCommand(const std::string& ckpt, int32_t threads, int64_t context,
                                       absl::string_view weight_dtype = "f32");

// Bytes per weight of a storage dtype.
int BytesPerElement(StorageDtype dtype);

// RESOURCE_EXHAUSTED naming `what` when EstimateRunBytes (weights and a KV
// cache of `context_tokens`) exceeds this machine's available memory:
// checked before anything is allocated.
absl::Status CheckFitsInMemory(const Arch& arch, int64_t context_tokens, int bytes_per_element,
                               const std::string& what);

// 394613632 -> "394,613,632".
std::string WithCommas(int64_t n);

// Starts this binary with `args` as a child process, its output to `log`
// (inherited when empty).
pid_t SpawnSelf(const std::vector<std::string>& args, const std::string& log = "");

// Where a command writes a checkpoint folder (prune, train, checkpoint init,
// slim). Prepare refuses an --out that exists and is not empty unless
// `overwrite`, and always one that is, contains or lies inside one of
// `inputs` (`prune --base D --out D` must not destroy the backbone). The
// command writes into staging(), a fresh folder beside --out; Commit()
// moves it into place (with `overwrite`, the old folder is moved aside
// first and removed after), so a crash leaves the old checkpoint or the
// new one, never a mix. Without Commit the staging folder is removed.
class OutputFolder {
 public:
  static absl::StatusOr<OutputFolder> Prepare(const std::string& out, bool overwrite,
                                              const std::vector<std::string>& inputs);
  OutputFolder(OutputFolder&& other) noexcept;
  OutputFolder& operator=(OutputFolder&&) = delete;
  OutputFolder(const OutputFolder&) = delete;
  ~OutputFolder();

  const std::string& staging() const { return staging_; }
  absl::Status Commit();

 private:
  OutputFolder(std::string out, std::string staging)
      : out_(std::move(out)), staging_(std::move(staging)) {}
  std::string out_;
  std::string staging_;  // empty once committed or moved from
};

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMON_H_
