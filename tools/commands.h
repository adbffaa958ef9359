// Subcommands of the `hilnas` binary. Each takes the positional arguments
// after its name (flags are parsed in main) and returns a process exit code.
#ifndef HILNAS_TOOLS_COMMANDS_H_
#define HILNAS_TOOLS_COMMANDS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "search_space/arch.h"

namespace hilnas::tools {

int ShapesCommand(const std::vector<std::string>& args);
int SpaceCommand(const std::vector<std::string>& args);
int RunCommand(const std::vector<std::string>& args);
int CheckpointCommand(const std::vector<std::string>& args);
int DemoCommand(const std::vector<std::string>& args);
int CoordinatorCommand(const std::vector<std::string>& args);
int AgentCommand(const std::vector<std::string>& args);
int FleetCommand(const std::vector<std::string>& args);
int AgentsCommand(const std::vector<std::string>& args);
int BenchCommand(const std::vector<std::string>& args);
int LatencyCommand(const std::vector<std::string>& args);
int CorpusCommand(const std::vector<std::string>& args);
int TrainCommand(const std::vector<std::string>& args);
int CalibrateCommand(const std::vector<std::string>& args);
int PruneCommand(const std::vector<std::string>& args);
int BackboneCommand(const std::vector<std::string>& args);
int CampaignCommand(const std::vector<std::string>& args);
int ParetoCommand(const std::vector<std::string>& args);
int ExportCommand(const std::vector<std::string>& args);
int SlimCommand(const std::vector<std::string>& args);
int PpdCommand(const std::vector<std::string>& args);

// Starts this binary with `args` as a child process, its output to `log`
// (inherited when empty).
pid_t SpawnSelf(const std::vector<std::string>& args, const std::string& log = "");

// The architecture named by --shape or read from --arch (a .textproto
// ArchSpec); exactly one must be given.
absl::StatusOr<Arch> ArchFromFlags();

// The checkpoint storage type named by --dtype (f32 | f16 | bf16).
absl::StatusOr<StorageDtype> StorageDtypeFromFlags();

// at::set_num_threads(--threads) when --threads > 0.
void ApplyThreadsFlag();

// 394613632 -> "394,613,632".
std::string WithCommas(int64_t n);

// Prints the error to stderr and returns exit code 1.
int Fail(const absl::Status& status);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_H_
