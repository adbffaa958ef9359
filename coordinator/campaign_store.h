// The durable state of search campaigns, in the coordinator's SQLite file
// beside the JobStore's tables: each campaign's configuration and progress,
// every trial it proposed (architecture, state, results, provenance), and
// its progress log. Every change is one transaction, so a coordinator
// killed at any moment finds on restart exactly what it had committed.
//
// Trials are numbered 1, 2, 3, ... per campaign, a proposal batch inserted
// whole with consecutive numbers; a unique index refuses the same
// architecture twice within a stage.
//
// Thread-safe: one mutex serialises all access.
#ifndef HILNAS_COORDINATOR_CAMPAIGN_STORE_H_
#define HILNAS_COORDINATOR_CAMPAIGN_STORE_H_

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/lifecycle.h"
#include "coordinator/sqlite.h"
#include "proto/campaign.pb.h"
#include "util/clock.h"

namespace hilnas {

// A campaign's lifecycle is coordinator/lifecycle.h's table.
struct CampaignRecord {
  CampaignConfig config;
  CampaignState state = CampaignState::kCreated;
  int stage = 0;  // 0 before start, then 1 (latency) and 2 (quality and latency)
  std::string message;
  ReferencePoint reference;          // the effective point (automatic parts filled in stage 1)
  double cv_r2 = NAN, cv_tau = NAN;  // the latency model's last diagnostics
  // The failure limit counts only trials numbered above this: those before
  // the last resume were seen by the user who resumed.
  int64_t failures_count_after = 0;
  int64_t created_ms = 0, updated_ms = 0;
};

struct LogLine {
  int64_t ms = 0;
  std::string text;
};

// Whether a trial is finished (DONE, FAILED, ABANDONED).
bool TrialFinished(TrialState s);

class CampaignStore {
 public:
  // `clock` is not owned and must outlive the store.
  static absl::StatusOr<std::unique_ptr<CampaignStore>> Open(const std::string& path,
                                                             const Clock* clock);

  // ALREADY_EXISTS for a name in use; INVALID_ARGUMENT for an empty name.
  absl::Status Create(const CampaignConfig& config);
  // NOT_FOUND names the campaign.
  absl::StatusOr<CampaignRecord> Get(const std::string& name);
  absl::StatusOr<std::vector<CampaignRecord>> List();
  // Writes stage, message, reference, diagnostics and failures_count_after; never
  // the config or the state, which change only through SetState and Finish
  // (so the runner cannot undo a user's stop it has not seen yet).
  absl::Status Update(const CampaignRecord& record);
  // Applies `event` (with `message`) by the lifecycle table: start, stop,
  // resume. FAILED_PRECONDITION naming the state when the table has no such
  // edge from it. Complete and fail go through Finish.
  absl::Status SetState(const std::string& name, CampaignEvent event, const std::string& message);

  // Inserts `trials` (ids ignored) with the campaign's next sequence numbers,
  // all or none. ALREADY_EXISTS naming the architecture when one is already
  // a trial of the same stage (or repeats within the batch).
  absl::StatusOr<std::vector<Trial>> AddTrials(const std::string& campaign,
                                               std::vector<Trial> trials);
  // Rewrites one trial (found by campaign and id). NOT_FOUND if absent.
  absl::Status UpdateTrial(const Trial& trial);
  // Every trial of the campaign in sequence order.
  absl::StatusOr<std::vector<Trial>> Trials(const std::string& campaign);
  // A running campaign ends: `event` (complete -> done, fail -> failed) with
  // `message`, and every unfinished trial ABANDONED with it, in one
  // transaction. FAILED_PRECONDITION when it is not running.
  absl::Status Finish(const std::string& name, CampaignEvent event, const std::string& message);

  // Brackets one runner step of `name` in the file, so a step that kills
  // the process is known after a restart. BeginStep returns how many steps
  // in a row died unfinished before this one (0 normally); EndStep clears it.
  absl::StatusOr<int> BeginStep(const std::string& name);
  absl::Status EndStep(const std::string& name);

  absl::Status Log(const std::string& campaign, const std::string& text);
  // The newest `limit` lines, oldest first.
  absl::StatusOr<std::vector<LogLine>> LogLines(const std::string& campaign, int limit);

 private:
  CampaignStore(std::unique_ptr<SqliteDb> db, const Clock* clock)
      : db_(std::move(db)), clock_(clock) {}
  absl::Status CreateSchema();
  absl::Status WriteTrialLocked(const Trial& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SetStateLocked(const std::string& name, CampaignEvent event,
                              const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<SqliteDb> db_ ABSL_GUARDED_BY(mu_);
  const Clock* clock_;  // not owned
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_CAMPAIGN_STORE_H_
