// hilnas-agent: the device agent alone, `hilnas agent` without the
// coordinator, search, training and SQLite code. It links only proto,
// search_space, model and device_agent (DESIGN.md keeps device_agent free of
// coordinator code for this), so it cross-builds for phones and boards:
// scripts/build-arm64 packs it with every library it loads
// (docs/agents.md, "Phones"). Flags are hilnas's own (`hilnas help`, agent).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "util/subprocess.h"

int main(int argc, char** argv) {
  using namespace hilnas::tools;
  absl::SetProgramUsageMessage(
      "hilnas-agent [--coordinator ADDR --name NAME --token T --threads N --cpu-set 0-1\n"
      "    --pools P --tls-ca F [--tls-cert F --tls-key F] --runtime libtorch|external ...]\n"
      "a device agent: lease benchmark jobs, measure, report (hilnas-agent --helpfull: every "
      "flag)");
  std::vector<std::string> normalised = NormaliseFlagNames(argc, argv);
  std::vector<char*> cargv;
  for (std::string& a : normalised) cargv.push_back(a.data());
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(cargv.size()), cargv.data());
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  const CommandLine cl = ParseCommandLine();
  hilnas::ReexecWithTimingThreads(argv, cl.threads);
  return AgentCommand(args, cl);
}
