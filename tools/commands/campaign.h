// What `hilnas demo` uses of `hilnas campaign`.
#ifndef HILNAS_TOOLS_COMMANDS_CAMPAIGN_H_
#define HILNAS_TOOLS_COMMANDS_CAMPAIGN_H_

#include <string>

#include "tools/coordinator_client.h"

namespace hilnas::tools {

// Prints the campaign's new log lines until it is done, failed or stopped;
// exit code 0 only for "done".
int FollowCampaign(const ClientFlags& client, const std::string& name);

// Starts the stored campaign `name`, prints its status, and with `wait`
// follows it (FollowCampaign's exit code).
int StartCampaign(const ClientFlags& client, const std::string& name, bool wait);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_CAMPAIGN_H_
