// Every `hilnas` command adds itself to a Cli (tools/cli.h) with one of
// these; tools/commands/all.cc lists them in `hilnas help` order.
#ifndef HILNAS_TOOLS_COMMANDS_COMMANDS_H_
#define HILNAS_TOOLS_COMMANDS_COMMANDS_H_

#include "tools/cli.h"

namespace hilnas::tools {

void AddShapesCommand(Cli& cli);
void AddSpaceCommand(Cli& cli);
void AddRunCommand(Cli& cli);
void AddCheckpointCommand(Cli& cli);
void AddCoordinatorCommand(Cli& cli);
void AddAgentCommand(Cli& cli);
void AddFleetCommand(Cli& cli);
void AddAgentsCommand(Cli& cli);
void AddBenchCommand(Cli& cli);
void AddLatencyCommand(Cli& cli);
void AddCorpusCommand(Cli& cli);
void AddTokenizeCommand(Cli& cli);
void AddTrainCommand(Cli& cli);
void AddEvalCommand(Cli& cli);
void AddGenerateCommand(Cli& cli);
void AddCalibrateCommand(Cli& cli);
void AddPruneCommand(Cli& cli);
void AddBackboneCommand(Cli& cli);
void AddCampaignCommand(Cli& cli);
void AddParetoCommand(Cli& cli);
void AddAuditCommand(Cli& cli);
void AddExportCommand(Cli& cli);
void AddSlimCommand(Cli& cli);
void AddPpdCommand(Cli& cli);
void AddDemoCommand(Cli& cli);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_COMMANDS_H_
