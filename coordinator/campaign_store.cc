#include "coordinator/campaign_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "search_space/arch.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS campaigns(
  name TEXT PRIMARY KEY,
  config BLOB NOT NULL,            -- CampaignConfig
  state TEXT NOT NULL,
  stage INTEGER NOT NULL DEFAULT 0,
  message TEXT NOT NULL DEFAULT '',
  reference BLOB NOT NULL,         -- ReferencePoint in force
  cv_r2 REAL, cv_tau REAL,
  failures_count_after INTEGER NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS trials(
  campaign TEXT NOT NULL REFERENCES campaigns(name),
  seq INTEGER NOT NULL,
  stage INTEGER NOT NULL,
  arch_key BLOB NOT NULL,
  state INTEGER NOT NULL,          -- TrialState
  trial BLOB NOT NULL,             -- Trial
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY(campaign, seq),
  UNIQUE(campaign, stage, arch_key));
CREATE TABLE IF NOT EXISTS campaign_log(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  campaign TEXT NOT NULL,
  ms INTEGER NOT NULL,
  text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS campaign_log_by_name ON campaign_log(campaign, id);
-- A row while a runner step of the campaign is under way: one left behind
-- by a dead coordinator counts as a crash during that campaign's step.
CREATE TABLE IF NOT EXISTS campaign_steps(
  campaign TEXT PRIMARY KEY,
  started_ms INTEGER NOT NULL,
  crashes INTEGER NOT NULL DEFAULT 0);
)sql";

double NullableDouble(const SqliteStatement& q, int col) {
  return q.IsNull(col) ? NAN : q.Double(col);
}

void BindNullableDouble(SqliteStatement& q, int i, double v) {
  if (!std::isnan(v)) q.BindDouble(i, v);
}

}  // namespace

bool TrialFinished(TrialState s) { return s == DONE || s == FAILED || s == ABANDONED; }

absl::StatusOr<std::unique_ptr<CampaignStore>> CampaignStore::Open(const std::string& path,
                                                                   const Clock* clock) {
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  std::unique_ptr<CampaignStore> store(new CampaignStore(std::move(db), clock));
  HILNAS_RETURN_IF_ERROR(store->CreateSchema());
  return store;
}

absl::Status CampaignStore::CreateSchema() {
  absl::MutexLock lock(&mu_);
  return db_->Exec(kSchema);
}

absl::Status CampaignStore::Create(const CampaignConfig& config) {
  if (config.name().empty()) return absl::InvalidArgumentError("campaign config: name is empty");
  absl::MutexLock lock(&mu_);
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT 1 FROM campaigns WHERE name = ?"));
  q.Bind(1, config.name());
  HILNAS_ASSIGN_OR_RETURN(bool exists, q.Step());
  if (exists) {
    return absl::AlreadyExistsError(
        absl::StrCat("campaign \"", config.name(), "\" already exists; pick another name"));
  }
  const int64_t now = clock_->NowMs();
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ins,
      db_->Prepare("INSERT INTO campaigns(name, config, state, reference, created_ms, updated_ms) "
                   "VALUES(?, ?, ?, ?, ?, ?)"));
  HILNAS_RETURN_IF_ERROR(ins.Bind(1, config.name())
                             .BindBlob(2, config.SerializeAsString())
                             .Bind(3, std::string(CampaignStateName(CampaignState::kCreated)))
                             .BindBlob(4, config.reference().SerializeAsString())
                             .Bind(5, now)
                             .Bind(6, now)
                             .Run());
  return tx.Commit();
}

namespace {
constexpr char kSelectCampaign[] =
    "SELECT name, config, state, stage, message, reference, cv_r2, cv_tau, "
    "failures_count_after, created_ms, updated_ms FROM campaigns";

absl::StatusOr<CampaignRecord> RecordFrom(const SqliteStatement& q) {
  CampaignRecord r;
  const std::string name = q.Text(0);
  HILNAS_RETURN_IF_ERROR(
      q.ParseBlob(1, &r.config, absl::StrCat("campaign \"", name, "\"'s config")));
  absl::StatusOr<CampaignState> state = ParseCampaignState(q.Text(2));
  if (!state.ok()) {
    return absl::DataLossError(
        absl::StrCat("campaign \"", name, "\": stored state ", state.status().message()));
  }
  r.state = *state;
  r.stage = static_cast<int>(q.Int(3));
  r.message = q.Text(4);
  HILNAS_RETURN_IF_ERROR(
      q.ParseBlob(5, &r.reference, absl::StrCat("campaign \"", name, "\"'s reference point")));
  r.cv_r2 = NullableDouble(q, 6);
  r.cv_tau = NullableDouble(q, 7);
  r.failures_count_after = q.Int(8);
  r.created_ms = q.Int(9);
  r.updated_ms = q.Int(10);
  return r;
}
}  // namespace

absl::StatusOr<CampaignRecord> CampaignStore::Get(const std::string& name) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare(absl::StrCat(kSelectCampaign, " WHERE name = ?")));
  q.Bind(1, name);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("no campaign \"", name, "\" in ", db_->path(),
                                            " (`hilnas campaign list` shows them)"));
  }
  return RecordFrom(q);
}

absl::StatusOr<std::vector<CampaignRecord>> CampaignStore::List() {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare(absl::StrCat(kSelectCampaign, " ORDER BY created_ms")));
  std::vector<CampaignRecord> out;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    HILNAS_ASSIGN_OR_RETURN(CampaignRecord r, RecordFrom(q));
    out.push_back(std::move(r));
  }
  return out;
}

absl::Status CampaignStore::Update(const CampaignRecord& r) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("UPDATE campaigns SET stage = ?, message = ?, reference = ?, cv_r2 = ?, "
                   "cv_tau = ?, failures_count_after = ?, updated_ms = ? WHERE name = ?"));
  q.Bind(1, static_cast<int64_t>(r.stage))
      .Bind(2, r.message)
      .BindBlob(3, r.reference.SerializeAsString());
  BindNullableDouble(q, 4, r.cv_r2);
  BindNullableDouble(q, 5, r.cv_tau);
  q.Bind(6, r.failures_count_after).Bind(7, clock_->NowMs()).Bind(8, r.config.name());
  HILNAS_RETURN_IF_ERROR(q.Run());
  if (db_->Changes() == 0) {
    return absl::NotFoundError(absl::StrCat("no campaign \"", r.config.name(), "\""));
  }
  return absl::OkStatus();
}

absl::Status CampaignStore::SetStateLocked(const std::string& name, CampaignEvent event,
                                           const std::string& message) {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT state FROM campaigns WHERE name = ?"));
  q.Bind(1, name);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no campaign \"", name, "\""));
  absl::StatusOr<CampaignState> from = ParseCampaignState(q.Text(0));
  if (!from.ok()) {
    return absl::DataLossError(
        absl::StrCat("campaign \"", name, "\": stored state ", from.status().message()));
  }
  absl::StatusOr<CampaignState> to = NextCampaignState(*from, event);
  if (!to.ok()) {
    return absl::Status(to.status().code(),
                        absl::StrCat("campaign \"", name, "\": ", to.status().message()));
  }
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement u,
      db_->Prepare("UPDATE campaigns SET state = ?, message = ?, updated_ms = ? WHERE name = ?"));
  return u.Bind(1, std::string(CampaignStateName(*to)))
      .Bind(2, message)
      .Bind(3, clock_->NowMs())
      .Bind(4, name)
      .Run();
}

absl::Status CampaignStore::SetState(const std::string& name, CampaignEvent event,
                                     const std::string& message) {
  absl::MutexLock lock(&mu_);
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  if (event == CampaignEvent::kComplete || event == CampaignEvent::kFail) {
    return absl::InvalidArgumentError("complete and fail end a campaign through Finish");
  }
  HILNAS_RETURN_IF_ERROR(SetStateLocked(name, event, message));
  return tx.Commit();
}

absl::StatusOr<std::vector<Trial>> CampaignStore::AddTrials(const std::string& campaign,
                                                            std::vector<Trial> trials) {
  absl::MutexLock lock(&mu_);
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement next,
      db_->Prepare("SELECT COALESCE(MAX(seq), 0) FROM trials WHERE campaign = ?"));
  next.Bind(1, campaign);
  HILNAS_RETURN_IF_ERROR(next.Step().status());
  int64_t seq = next.Int(0);
  const int64_t now = clock_->NowMs();
  for (Trial& t : trials) {
    t.set_id(++seq);
    t.set_campaign(campaign);
    if (t.created_ms() == 0) t.set_created_ms(now);
    const std::string key = ArchKey(t.arch());
    HILNAS_ASSIGN_OR_RETURN(
        SqliteStatement dup,
        db_->Prepare("SELECT seq FROM trials WHERE campaign = ? AND stage = ? AND arch_key = ?"));
    dup.Bind(1, campaign).Bind(2, static_cast<int64_t>(t.stage())).BindBlob(3, key);
    HILNAS_ASSIGN_OR_RETURN(bool exists, dup.Step());
    if (exists) {
      return absl::AlreadyExistsError(absl::StrCat("campaign \"", campaign, "\": the architecture ",
                                                   t.arch().ShortDebugString(),
                                                   " is already trial ", dup.Int(0)));
    }
    HILNAS_ASSIGN_OR_RETURN(
        SqliteStatement ins,
        db_->Prepare("INSERT INTO trials(campaign, seq, stage, arch_key, state, trial, updated_ms) "
                     "VALUES(?, ?, ?, ?, ?, ?, ?)"));
    HILNAS_RETURN_IF_ERROR(ins.Bind(1, campaign)
                               .Bind(2, t.id())
                               .Bind(3, static_cast<int64_t>(t.stage()))
                               .BindBlob(4, key)
                               .Bind(5, static_cast<int64_t>(t.state()))
                               .BindBlob(6, t.SerializeAsString())
                               .Bind(7, now)
                               .Run());
  }
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return trials;
}

absl::Status CampaignStore::WriteTrialLocked(const Trial& t) {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("UPDATE trials SET state = ?, trial = ?, updated_ms = ? "
                                       "WHERE campaign = ? AND seq = ?"));
  return q.Bind(1, static_cast<int64_t>(t.state()))
      .BindBlob(2, t.SerializeAsString())
      .Bind(3, clock_->NowMs())
      .Bind(4, t.campaign())
      .Bind(5, t.id())
      .Run();
}

absl::Status CampaignStore::UpdateTrial(const Trial& t) {
  absl::MutexLock lock(&mu_);
  HILNAS_RETURN_IF_ERROR(WriteTrialLocked(t));
  if (db_->Changes() == 0) {
    return absl::NotFoundError(
        absl::StrCat("campaign \"", t.campaign(), "\" has no trial ", t.id()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Trial>> CampaignStore::Trials(const std::string& campaign) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT trial FROM trials WHERE campaign = ? ORDER BY seq"));
  q.Bind(1, campaign);
  std::vector<Trial> out;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    if (!out.emplace_back().ParseFromString(q.Blob(0))) {
      return absl::DataLossError(
          absl::StrCat(db_->path(), ": campaign \"", campaign, "\": a trial row is corrupt"));
    }
  }
  return out;
}

absl::Status CampaignStore::Finish(const std::string& name, CampaignEvent event,
                                   const std::string& why) {
  if (event != CampaignEvent::kComplete && event != CampaignEvent::kFail) {
    return absl::InvalidArgumentError(
        absl::StrCat("Finish takes complete or fail, not ", CampaignEventName(event)));
  }
  absl::MutexLock lock(&mu_);
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_RETURN_IF_ERROR(SetStateLocked(name, event, why));
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT trial FROM trials WHERE campaign = ? AND state NOT IN (?, ?, ?)"));
  q.Bind(1, name)
      .Bind(2, static_cast<int64_t>(DONE))
      .Bind(3, static_cast<int64_t>(FAILED))
      .Bind(4, static_cast<int64_t>(ABANDONED));
  std::vector<Trial> open;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    HILNAS_RETURN_IF_ERROR(
        q.ParseBlob(0, &open.emplace_back(), absl::StrCat("a trial of campaign \"", name, "\"")));
  }
  const int64_t now = clock_->NowMs();
  for (Trial& t : open) {
    t.set_state(ABANDONED);
    t.set_message(why);
    t.set_finished_ms(now);
    HILNAS_RETURN_IF_ERROR(WriteTrialLocked(t));
  }
  return tx.Commit();
}

absl::Status CampaignStore::Log(const std::string& campaign, const std::string& text) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("INSERT INTO campaign_log(campaign, ms, text) VALUES(?, ?, ?)"));
  return q.Bind(1, campaign).Bind(2, clock_->NowMs()).Bind(3, text).Run();
}

absl::StatusOr<std::vector<LogLine>> CampaignStore::LogLines(const std::string& campaign,
                                                             int limit) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT ms, text FROM (SELECT id, ms, text FROM campaign_log WHERE campaign = ? "
                   "ORDER BY id DESC LIMIT ?) ORDER BY id"));
  q.Bind(1, campaign).Bind(2, static_cast<int64_t>(limit));
  std::vector<LogLine> out;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back({q.Int(0), q.Text(1)});
  }
  return out;
}

absl::StatusOr<int> CampaignStore::BeginStep(const std::string& name) {
  absl::MutexLock lock(&mu_);
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT crashes FROM campaign_steps WHERE campaign = ?"));
  q.Bind(1, name);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  // A row still here means the last step never ended: the process died in it.
  const int crashes = row ? static_cast<int>(q.Int(0)) + 1 : 0;
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement u,
      db_->Prepare("INSERT OR REPLACE INTO campaign_steps(campaign, started_ms, crashes) "
                   "VALUES(?, ?, ?)"));
  HILNAS_RETURN_IF_ERROR(
      u.Bind(1, name).Bind(2, clock_->NowMs()).Bind(3, static_cast<int64_t>(crashes)).Run());
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return crashes;
}

absl::Status CampaignStore::EndStep(const std::string& name) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement d,
                          db_->Prepare("DELETE FROM campaign_steps WHERE campaign = ?"));
  return d.Bind(1, name).Run();
}

}  // namespace hilnas
