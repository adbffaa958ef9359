// Subcommands of the `hilnas` binary. Each takes the positional arguments
// after its name and the parsed command line (tools/flags.h), and returns a
// process exit code. hilnas_main.cc holds the one table of commands.
#ifndef HILNAS_TOOLS_COMMANDS_H_
#define HILNAS_TOOLS_COMMANDS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "quality/tokens.h"
#include "search_space/arch.h"
#include "tools/flags.h"

namespace hilnas::tools {

// One row of the command table: what `hilnas NAME` runs and how it is
// described in `hilnas help`.
struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>& args, const CommandLine& cl);
  // Usage lines: "ARGS [--flags]" then what it does (shown under the name).
  const char* usage;
  // Re-executes once with a passive OpenMP wait policy for stable timing
  // and compute speed (hilnas_main.cc, ReexecForStableTiming): with the
  // default policy OpenMP's idle workers spin while OpenBLAS's threads
  // want the same cores (`hilnas eval` of the demo backbone on 2 threads:
  // 4,500-5,900 tokens/s spinning, 12,000 passive, 11,200 on 1 thread).
  bool stable_timing;
};

int ShapesCommand(const std::vector<std::string>& args, const CommandLine& cl);
int SpaceCommand(const std::vector<std::string>& args, const CommandLine& cl);
int RunCommand(const std::vector<std::string>& args, const CommandLine& cl);
int CheckpointCommand(const std::vector<std::string>& args, const CommandLine& cl);
int DemoCommand(const std::vector<std::string>& args, const CommandLine& cl);
int CoordinatorCommand(const std::vector<std::string>& args, const CommandLine& cl);
int AgentCommand(const std::vector<std::string>& args, const CommandLine& cl);
int FleetCommand(const std::vector<std::string>& args, const CommandLine& cl);
int AgentsCommand(const std::vector<std::string>& args, const CommandLine& cl);
int BenchCommand(const std::vector<std::string>& args, const CommandLine& cl);
int LatencyCommand(const std::vector<std::string>& args, const CommandLine& cl);
int CorpusCommand(const std::vector<std::string>& args, const CommandLine& cl);
int TrainCommand(const std::vector<std::string>& args, const CommandLine& cl);
int CalibrateCommand(const std::vector<std::string>& args, const CommandLine& cl);
int PruneCommand(const std::vector<std::string>& args, const CommandLine& cl);
int BackboneCommand(const std::vector<std::string>& args, const CommandLine& cl);
int CampaignCommand(const std::vector<std::string>& args, const CommandLine& cl);
int ParetoCommand(const std::vector<std::string>& args, const CommandLine& cl);
int ExportCommand(const std::vector<std::string>& args, const CommandLine& cl);
int AuditCommand(const std::vector<std::string>& args, const CommandLine& cl);
int SlimCommand(const std::vector<std::string>& args, const CommandLine& cl);
int PpdCommand(const std::vector<std::string>& args, const CommandLine& cl);
int EvalCommand(const std::vector<std::string>& args, const CommandLine& cl);
int GenerateCommand(const std::vector<std::string>& args, const CommandLine& cl);

// Timing commands call util/subprocess.h's ReexecWithTimingThreads first:
// unless the user chose a policy, the binary re-executes once with bounded
// OpenMP spinning and OpenBLAS sized to --threads. Before that, libgomp's
// default policy moved mobilellm-flash-350m's TTFT by up to 40% between
// identical runs on 2 cores; training gains too (985 -> 1888 tokens/s for
// the demo backbone). The agent bundle's launcher sets the same variables
// itself (a binary started through the dynamic loader cannot re-exec
// /proc/self/exe).

// Starts this binary with `args` as a child process, its output to `log`
// (inherited when empty).
pid_t SpawnSelf(const std::vector<std::string>& args, const std::string& log = "");

// The architecture named by --shape or read from --arch (a .textproto
// ArchSpec); exactly one must be given.
absl::StatusOr<Arch> ArchOf(const CommandLine& cl);

// The checkpoint storage type named by --dtype (f32 | f16 | bf16).
absl::StatusOr<StorageDtype> StorageDtypeOf(const CommandLine& cl);

// The token file at `path` (ids checked against `vocab`), split as the
// trainer splits it: the last `heldout` fraction held out, both parts at
// least one window of seq_len + 1. Errors name the file.
absl::StatusOr<TokenSplit> LoadSplit(const std::string& path, int64_t vocab, int64_t seq_len,
                                     double heldout);

// at::set_num_threads(--threads) when --threads > 0; INVALID_ARGUMENT for
// more threads than the machine has cores (100000 threads would hang it).
absl::Status ApplyThreads(const CommandLine& cl);

// Bytes per weight of a storage dtype.
int BytesPerElement(StorageDtype dtype);

// RESOURCE_EXHAUSTED naming `what` when EstimateRunBytes (weights and a KV
// cache of `context_tokens`) exceeds this machine's available memory:
// checked before anything is allocated.
absl::Status CheckFitsInMemory(const Arch& arch, int64_t context_tokens, int bytes_per_element,
                               const std::string& what);

// 394613632 -> "394,613,632".
std::string WithCommas(int64_t n);

// Prints the error to stderr and returns exit code 1.
int Fail(const absl::Status& status);

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

#endif  // HILNAS_TOOLS_COMMANDS_H_
