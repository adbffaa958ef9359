// hilnas-agent: the device agent alone, `hilnas agent` without the
// coordinator, search, training and SQLite code. It links only proto,
// search_space, model and device_agent (DESIGN.md keeps device_agent free of
// coordinator code for this), so it cross-builds for phones and boards:
// scripts/build-arm64 packs it with every library it loads
// (docs/agents.md, "Phones"). Its flags are `hilnas agent`'s
// (hilnas-agent --help).
#include "tools/cli.h"
#include "tools/commands/commands.h"

int main(int argc, char** argv) {
  hilnas::tools::Cli cli("hilnas-agent", "hilnas-agent: a device agent: lease benchmark jobs, measure, report");
  hilnas::tools::AddAgentCommand(cli);
  return cli.Main(argc, argv, /*implied_command=*/"agent");
}
