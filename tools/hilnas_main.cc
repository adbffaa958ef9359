// hilnas: one binary, subcommands (DESIGN.md, "The command"). Each command
// is a file under tools/commands/ with its own options (tools/cli.h).
#include "tools/cli.h"

int main(int argc, char** argv) {
  hilnas::tools::Cli cli("hilnas", "hilnas: hardware-in-the-loop architecture search for on-device LLMs");
  hilnas::tools::AddAllCommands(cli);
  return cli.Main(argc, argv);
}
