#include "tools/commands/commands.h"

namespace hilnas::tools {

void AddAllCommands(Cli& cli) {
  for (void (*add)(Cli&) :
       {AddShapesCommand, AddSpaceCommand, AddRunCommand, AddCheckpointCommand,
        AddCoordinatorCommand, AddAgentCommand, AddFleetCommand, AddAgentsCommand,
        AddBenchCommand, AddLatencyCommand, AddCorpusCommand, AddTokenizeCommand, AddTrainCommand, AddEvalCommand,
        AddGenerateCommand, AddCalibrateCommand, AddPruneCommand, AddBackboneCommand,
        AddCampaignCommand, AddParetoCommand, AddAuditCommand, AddExportCommand, AddSlimCommand,
        AddPpdCommand, AddDemoCommand}) {
    add(cli);
  }
}

}  // namespace hilnas::tools
