// `hilnas audit`: who did what to this coordinator: create, start, stop,
// resume, submit (docs/security.md), read from its SQLite file.
#include <cstdio>

#include "absl/time/time.h"
#include "coordinator/audit_log.h"
#include "nlohmann/json.hpp"
#include "tools/commands/commands.h"
#include "util/clock.h"
#include "util/files.h"

namespace hilnas::tools {
namespace {

struct AuditOptions {
  std::string db = "hilnas.db";
  int32_t n = 50;
  bool json = false;
};

int RunAudit(const AuditOptions& cl) {
  if (absl::Status s = CheckRegularFile(cl.db); !s.ok()) return Fail(s);
  SystemClock clock;
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(cl.db, &clock);
  if (!log.ok()) return Fail(log.status());
  const int n = cl.n;
  absl::StatusOr<std::vector<AuditEntry>> entries = (*log)->Newest(n);
  if (!entries.ok()) return Fail(entries.status());
  if (cl.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const AuditEntry& e : *entries) {
      j.push_back({{"time_unix_ms", e.time_ms},
                   {"credential", e.credential},
                   {"action", e.action},
                   {"target", e.target},
                   {"outcome", e.outcome}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%-23s %-12s %-7s %-24s %s\n", "TIME (UTC)", "CREDENTIAL", "ACTION", "TARGET",
              "OUTCOME");
  for (const AuditEntry& e : *entries) {
    std::printf("%-23s %-12s %-7s %-24s %s\n",
                absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::FromUnixMillis(e.time_ms),
                                 absl::UTCTimeZone())
                    .c_str(),
                e.credential.c_str(), e.action.c_str(), e.target.c_str(), e.outcome.c_str());
  }
  std::printf("%zu entries\n", entries->size());
  return 0;
}

}  // namespace

void AddAuditCommand(Cli& cli) {
  auto [app, o] = cli.Add<AuditOptions>(
      "audit", "[--db FILE --n 50 --json]",
      "who did what to this coordinator: create, start, stop, resume, submit (docs/security.md)",
      RunAudit);
  app->add_option("--db", o->db, "the coordinator's SQLite file");
  app->add_option("--n", o->n, "the newest N entries")->check(CLI::Range(1, 100'000));
  app->add_flag("--json", o->json, "entries as a JSON array");
}

}  // namespace hilnas::tools
