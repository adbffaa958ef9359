#include "coordinator/job_store.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "proto/benchmark_request.h"
#include "util/secrets.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

// v2 added jobs.client_key (idempotent submission), v3 agents.session_hash
// (per-agent session keys), v4 jobs.drift_requeues and the canaries table
// (the drift check); older files are migrated in place when opened.
constexpr int kSchemaVersion = 4;

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS agents(
  agent_id TEXT PRIMARY KEY,
  name TEXT UNIQUE NOT NULL,
  device BLOB NOT NULL,            -- DeviceIdentity
  registered_ms INTEGER NOT NULL,
  last_heartbeat_ms INTEGER NOT NULL,
  jobs_done INTEGER NOT NULL DEFAULT 0,
  jobs_failed INTEGER NOT NULL DEFAULT 0,
  session_hash TEXT NOT NULL DEFAULT '');  -- SHA-256 of the live session key
CREATE TABLE IF NOT EXISTS jobs(
  job_id INTEGER PRIMARY KEY AUTOINCREMENT,
  request BLOB NOT NULL,           -- BenchmarkRequest
  device TEXT NOT NULL DEFAULT '',
  pool TEXT NOT NULL DEFAULT '',
  state INTEGER NOT NULL,          -- JobState
  attempts INTEGER NOT NULL DEFAULT 0,
  agent_id TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL DEFAULT 0,
  result BLOB,                     -- BenchmarkResult
  message TEXT NOT NULL DEFAULT '',
  client_key TEXT,                 -- the submitter's idempotency key, or NULL
  drift_requeues INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, job_id);
-- The jobs an agent may lease (QUEUED = 1, STALE = 5), oldest first without
-- a sort: LeaseJob's query names the same literal states so SQLite uses it.
CREATE INDEX IF NOT EXISTS jobs_leasable ON jobs(job_id) WHERE state IN (1, 5);
CREATE TABLE IF NOT EXISTS leases(
  lease_id TEXT PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs(job_id),
  agent_id TEXT NOT NULL,
  state TEXT NOT NULL,             -- active | reported | expired
  granted_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  reported_ms INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS leases_by_state ON leases(state, expires_ms);
-- Each agent's drift-check readings (CanaryReading), one row per reading.
CREATE TABLE IF NOT EXISTS canaries(
  agent_id TEXT NOT NULL,
  measured_ms INTEGER NOT NULL,
  request BLOB NOT NULL,           -- BenchmarkRequest timed: the baseline's key
  ttft_ms REAL NOT NULL,
  decode_ms REAL NOT NULL,
  reading BLOB NOT NULL,           -- CanaryReading with its ratios
  PRIMARY KEY(agent_id, measured_ms));
)sql";

// The text form SQLite keeps (coordinator/lifecycle.h).
std::string Text(LeaseState s) { return std::string(LeaseStateName(s)); }

std::string RandomId(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  static absl::Mutex mu;
  absl::MutexLock lock(&mu);
  return absl::StrFormat("%s%016x%08x", prefix, rng(), static_cast<uint32_t>(rng()));
}

bool ServesPool(const DeviceIdentity& d, const std::string& pool) {
  if (pool.empty()) return true;
  for (const std::string& p : d.pools()) {
    if (p == pool) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path,
                                                         const Clock* clock,
                                                         const JobStoreOptions& options) {
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  std::unique_ptr<JobStore> store(new JobStore(std::move(db), clock, options));
  HILNAS_RETURN_IF_ERROR(store->CreateSchema());
  return store;
}

absl::Status JobStore::CreateSchema() {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement v, db_->Prepare("PRAGMA user_version"));
  HILNAS_ASSIGN_OR_RETURN(bool row, v.Step());
  const int64_t version = row ? v.Int(0) : 0;
  if (version > kSchemaVersion) {
    return absl::InvalidArgumentError(absl::StrCat("database ", db_->path(), " has schema version ",
                                                   version, "; this hilnas reads up to ",
                                                   kSchemaVersion));
  }
  if (version == 1) {
    HILNAS_RETURN_IF_ERROR(db_->Exec("ALTER TABLE jobs ADD COLUMN client_key TEXT"));
  }
  if (version >= 1 && version <= 2) {
    // Agents registered before v3 hold no session key: they must register
    // again, which every agent does when its next call is refused.
    HILNAS_RETURN_IF_ERROR(
        db_->Exec("ALTER TABLE agents ADD COLUMN session_hash TEXT NOT NULL DEFAULT ''"));
  }
  if (version >= 1 && version <= 3) {
    HILNAS_RETURN_IF_ERROR(
        db_->Exec("ALTER TABLE jobs ADD COLUMN drift_requeues INTEGER NOT NULL DEFAULT 0"));
  }
  HILNAS_RETURN_IF_ERROR(db_->Exec(kSchema));
  HILNAS_RETURN_IF_ERROR(
      db_->Exec("CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_client_key ON jobs(client_key) "
                "WHERE client_key IS NOT NULL"));
  return db_->Exec(absl::StrCat("PRAGMA user_version = ", kSchemaVersion));
}

absl::StatusOr<AgentRecord> JobStore::AgentLocked(const std::string& agent_id) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT device, registered_ms, last_heartbeat_ms, jobs_done, jobs_failed, "
                   "(SELECT COUNT(*) FROM leases WHERE agent_id = a.agent_id AND "
                   "state = ?) FROM agents a WHERE agent_id = ?"));
  q.Bind(1, Text(LeaseState::kActive)).Bind(2, agent_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("unknown agent \"", agent_id, "\"; register first"));
  }
  AgentRecord a;
  a.agent_id = agent_id;
  HILNAS_RETURN_IF_ERROR(q.ParseBlob(0, &a.device, absl::StrCat("agent ", agent_id, "'s device")));
  a.registered_ms = q.Int(1);
  a.last_heartbeat_ms = q.Int(2);
  a.jobs_done = q.Int(3);
  a.jobs_failed = q.Int(4);
  a.state = AgentStateOf(
      /*heartbeat_fresh=*/clock_->NowMs() - a.last_heartbeat_ms <= options_.offline_after_ms,
      /*holds_lease=*/q.Int(5) > 0);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement c,
      db_->Prepare("SELECT (SELECT COUNT(*) FROM canaries WHERE agent_id = ?1), (SELECT reading "
                   "FROM canaries WHERE agent_id = ?1 ORDER BY measured_ms DESC LIMIT 1)"));
  c.Bind(1, agent_id);
  HILNAS_ASSIGN_OR_RETURN(bool crow, c.Step());
  if (crow && c.Int(0) > 0) {
    a.canaries = static_cast<int>(c.Int(0));
    a.last_canary.emplace();
    HILNAS_RETURN_IF_ERROR(
        c.ParseBlob(1, &*a.last_canary, absl::StrCat("agent ", agent_id, "'s canary")));
  }
  return a;
}

absl::Status JobStore::TouchLocked(const std::string& agent_id, int64_t now) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement u,
      db_->Prepare("UPDATE agents SET last_heartbeat_ms = ? WHERE agent_id = ?"));
  HILNAS_RETURN_IF_ERROR(u.Bind(1, now).Bind(2, agent_id).Run());
  if (db_->Changes() == 0) {
    return absl::NotFoundError(absl::StrCat("unknown agent \"", agent_id, "\"; register first"));
  }
  return ExpireLocked(now).status();
}

absl::StatusOr<AgentSession> JobStore::RegisterAgent(const DeviceIdentity& device,
                                                     const std::string& presented_session_key) {
  if (device.name().empty()) return absl::InvalidArgumentError("device name is empty");
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT agent_id, last_heartbeat_ms, session_hash FROM agents WHERE name = ?"));
  q.Bind(1, device.name());
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (row) {
    // One live session per name: two agents measuring under one name would
    // share leases and contaminate each other's timings. A name is free once
    // its agent has been silent for a lease's lifetime (its lease expired).
    const int64_t silent_ms = now - q.Int(1);
    const std::string live_hash = q.Text(2);
    // The agent that holds the session (presenting its key) may register
    // again at once: a restart that kept its key resumes its lease.
    const bool holder =
        !presented_session_key.empty() && SecretEquals(live_hash, Sha256Hex(presented_session_key));
    if (!holder && !live_hash.empty() && silent_ms < options_.lease_ttl_ms) {
      return absl::AlreadyExistsError(absl::StrCat(
          "agent name \"", device.name(), "\" has a live session (heard from ", silent_ms,
          " ms ago); another agent may take the name once it has been silent for ",
          options_.lease_ttl_ms, " ms. Give each device its own --name"));
    }
  }
  AgentSession session;
  // A new key on every registration: the previous session of this name
  // ends here (its next call is UNAUTHENTICATED).
  session.session_key = RandomHex(32);
  const std::string hash = Sha256Hex(session.session_key);
  if (row) {
    session.agent_id = q.Text(0);
    HILNAS_ASSIGN_OR_RETURN(SqliteStatement u,
                            db_->Prepare("UPDATE agents SET device = ?, last_heartbeat_ms = ?, "
                                         "session_hash = ? WHERE agent_id = ?"));
    HILNAS_RETURN_IF_ERROR(u.BindBlob(1, device.SerializeAsString())
                               .Bind(2, now)
                               .Bind(3, hash)
                               .Bind(4, session.agent_id)
                               .Run());
  } else {
    session.agent_id = RandomId("agent-");
    HILNAS_ASSIGN_OR_RETURN(
        SqliteStatement ins,
        db_->Prepare("INSERT INTO agents(agent_id, name, device, registered_ms, "
                     "last_heartbeat_ms, session_hash) VALUES(?, ?, ?, ?, ?, ?)"));
    HILNAS_RETURN_IF_ERROR(ins.Bind(1, session.agent_id)
                               .Bind(2, device.name())
                               .BindBlob(3, device.SerializeAsString())
                               .Bind(4, now)
                               .Bind(5, now)
                               .Bind(6, hash)
                               .Run());
  }
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return session;
}

absl::Status JobStore::CheckSession(const std::string& agent_id, const std::string& session_key) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT session_hash FROM agents WHERE agent_id = ?"));
  q.Bind(1, agent_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  // Hashes of equal length, compared in constant time; an unknown agent is
  // compared against a dummy so the answer's timing says nothing either.
  const std::string stored = row ? q.Text(0) : std::string(64, '0');
  const bool match = SecretEquals(stored, Sha256Hex(session_key)) && row && !stored.empty() &&
                     !session_key.empty();
  if (!match) {
    return absl::UnauthenticatedError(absl::StrCat(
        "agent \"", agent_id, "\": session key missing or not current; register again"));
  }
  return absl::OkStatus();
}

absl::Status JobStore::TouchAgents(const std::vector<std::string>& agent_ids) {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  for (const std::string& id : agent_ids) {
    HILNAS_ASSIGN_OR_RETURN(
        SqliteStatement u,
        db_->Prepare("UPDATE agents SET last_heartbeat_ms = ? WHERE agent_id = ?"));
    HILNAS_RETURN_IF_ERROR(u.Bind(1, now).Bind(2, id).Run());
  }
  return tx.Commit();
}

absl::StatusOr<bool> JobStore::HasLeasableJobs() {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare(
          "SELECT EXISTS(SELECT 1 FROM jobs INDEXED BY jobs_leasable WHERE state IN (1, 5))"));
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  return row && q.Int(0) != 0;
}

absl::StatusOr<int64_t> JobStore::UnfinishedJobs() {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT COUNT(*) FROM jobs WHERE state IN (?, ?, ?)"));
  q.Bind(1, static_cast<int64_t>(QUEUED))
      .Bind(2, static_cast<int64_t>(LEASED))
      .Bind(3, static_cast<int64_t>(STALE));
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.Int(0) : 0;
}

absl::StatusOr<bool> JobStore::Heartbeat(const std::string& agent_id, const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_RETURN_IF_ERROR(TouchLocked(agent_id, now));
  bool valid = false;
  if (!lease_id.empty()) {
    HILNAS_ASSIGN_OR_RETURN(SqliteStatement u,
                            db_->Prepare("UPDATE leases SET expires_ms = ? WHERE lease_id = ? "
                                         "AND agent_id = ? AND state = ?"));
    HILNAS_RETURN_IF_ERROR(u.Bind(1, now + options_.lease_ttl_ms)
                               .Bind(2, lease_id)
                               .Bind(3, agent_id)
                               .Bind(4, Text(LeaseState::kActive))
                               .Run());
    valid = db_->Changes() > 0;
  }
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return valid;
}

absl::StatusOr<int64_t> JobStore::SubmitJob(const BenchmarkRequest& request,
                                            const std::string& device, const std::string& pool,
                                            const std::string& client_key) {
  HILNAS_RETURN_IF_ERROR(ValidateBenchmarkRequest(request));
  absl::MutexLock lock(&mu_);
  if (!client_key.empty()) {
    HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                            db_->Prepare("SELECT job_id FROM jobs WHERE client_key = ?"));
    q.Bind(1, client_key);
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) return q.Int(0);
  }
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ins,
      db_->Prepare("INSERT INTO jobs(request, device, pool, state, created_ms, client_key) "
                   "VALUES(?, ?, ?, ?, ?, ?)"));
  ins.BindBlob(1, request.SerializeAsString())
      .Bind(2, device)
      .Bind(3, pool)
      .Bind(4, static_cast<int64_t>(QUEUED))
      .Bind(5, clock_->NowMs());
  if (!client_key.empty()) ins.Bind(6, client_key);  // else NULL: no key
  HILNAS_RETURN_IF_ERROR(ins.Run());
  return db_->LastInsertRowId();
}

absl::StatusOr<int> JobStore::ExpireLocked(int64_t now) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT l.lease_id, l.job_id, j.attempts - j.drift_requeues FROM leases l "
                   "JOIN jobs j "
                   "ON l.job_id = j.job_id WHERE l.state = ? AND l.expires_ms < ?"));
  q.Bind(1, Text(LeaseState::kActive)).Bind(2, now);
  struct Expired {
    std::string lease_id;
    int64_t job_id;
    int64_t attempts;  // leases that did not end in a drift re-queue
  };
  std::vector<Expired> expired;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    expired.push_back({q.Text(0), q.Int(1), q.Int(2)});
  }
  for (const Expired& e : expired) {
    HILNAS_RETURN_IF_ERROR(CheckLeaseTransition(LeaseState::kActive, LeaseState::kExpired));
    HILNAS_ASSIGN_OR_RETURN(SqliteStatement ul,
                            db_->Prepare("UPDATE leases SET state = ? WHERE lease_id = ?"));
    HILNAS_RETURN_IF_ERROR(ul.Bind(1, Text(LeaseState::kExpired)).Bind(2, e.lease_id).Run());
    // A lease expires only when its agent stopped renewing it: the agent
    // died (or lost its network) during the job. Say so, and name every
    // agent this job took down, so a job that crashes runtimes is not
    // handed to agent after agent in silence.
    HILNAS_ASSIGN_OR_RETURN(
        SqliteStatement who,
        db_->Prepare("SELECT a.name FROM leases l JOIN agents a ON l.agent_id = a.agent_id "
                     "WHERE l.job_id = ? AND l.state = ? ORDER BY l.granted_ms"));
    who.Bind(1, e.job_id).Bind(2, Text(LeaseState::kExpired));
    std::vector<std::string> died;
    while (true) {
      HILNAS_ASSIGN_OR_RETURN(bool row, who.Step());
      if (!row) break;
      died.push_back(who.Text(0));
    }
    const std::string names = absl::StrJoin(died, ", ");
    const bool give_up = e.attempts >= options_.max_attempts;
    HILNAS_ASSIGN_OR_RETURN(
        SqliteStatement uj,
        db_->Prepare("UPDATE jobs SET state = ?, message = ?, finished_ms = ? WHERE job_id = ?"));
    HILNAS_RETURN_IF_ERROR(
        uj.Bind(1, static_cast<int64_t>(give_up ? JOB_FAILED : STALE))
            .Bind(2, give_up
                         ? absl::StrCat("agent died during the job ", e.attempts, " times (", names,
                                        ": no heartbeat until the lease expired); the job may "
                                        "crash the runtime; giving up")
                         : absl::StrCat("agent died during the job (",
                                        died.empty() ? "?" : died.back(),
                                        ": no heartbeat until lease ", e.lease_id,
                                        " expired); back in the queue"))
            .Bind(3, give_up ? now : 0)
            .Bind(4, e.job_id)
            .Run());
  }
  return static_cast<int>(expired.size());
}

absl::StatusOr<int> JobStore::ExpireLeases() {
  absl::MutexLock lock(&mu_);
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_ASSIGN_OR_RETURN(int n, ExpireLocked(clock_->NowMs()));
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return n;
}

absl::StatusOr<std::optional<Lease>> JobStore::LeaseJob(const std::string& agent_id) {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_RETURN_IF_ERROR(TouchLocked(agent_id, now));
  HILNAS_ASSIGN_OR_RETURN(AgentRecord agent, AgentLocked(agent_id));
  Lease lease;
  lease.expires_ms = now + options_.lease_ttl_ms;
  // A restarted agent first gets back the lease it held (OSS Vizier does the
  // same for a client id), so its half-done job is not left to expire.
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement own,
      db_->Prepare("SELECT l.lease_id, l.job_id, j.request FROM leases l JOIN jobs j ON "
                   "l.job_id = j.job_id WHERE l.agent_id = ? AND l.state = ? LIMIT 1"));
  own.Bind(1, agent_id).Bind(2, Text(LeaseState::kActive));
  HILNAS_ASSIGN_OR_RETURN(bool has_own, own.Step());
  if (has_own) {
    lease.lease_id = own.Text(0);
    lease.job_id = own.Int(1);
    HILNAS_RETURN_IF_ERROR(
        own.ParseBlob(2, &lease.request, absl::StrCat("job ", lease.job_id, "'s request")));
    HILNAS_ASSIGN_OR_RETURN(SqliteStatement u,
                            db_->Prepare("UPDATE leases SET expires_ms = ? WHERE lease_id = ?"));
    HILNAS_RETURN_IF_ERROR(u.Bind(1, lease.expires_ms).Bind(2, lease.lease_id).Run());
    HILNAS_RETURN_IF_ERROR(tx.Commit());
    return std::optional<Lease>(lease);
  }
  static_assert(QUEUED == 1 && STALE == 5, "jobs_leasable and this query name the states");
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT job_id, request, pool FROM jobs INDEXED BY jobs_leasable WHERE state IN "
                   "(1, 5) AND (device = '' OR device = ?) ORDER BY job_id"));
  q.Bind(1, agent.device.name());
  bool found = false;
  while (!found) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    if (!ServesPool(agent.device, q.Text(2))) continue;
    lease.job_id = q.Int(0);
    HILNAS_RETURN_IF_ERROR(
        q.ParseBlob(1, &lease.request, absl::StrCat("job ", lease.job_id, "'s request")));
    found = true;
  }
  if (!found) {
    HILNAS_RETURN_IF_ERROR(tx.Commit());  // keeps the heartbeat and expiries
    return std::optional<Lease>();
  }
  lease.lease_id = RandomId("lease-");
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ins,
      db_->Prepare("INSERT INTO leases(lease_id, job_id, agent_id, state, granted_ms, expires_ms) "
                   "VALUES(?, ?, ?, ?, ?, ?)"));
  HILNAS_RETURN_IF_ERROR(ins.Bind(1, lease.lease_id)
                             .Bind(2, lease.job_id)
                             .Bind(3, agent_id)
                             .Bind(4, Text(LeaseState::kActive))
                             .Bind(5, now)
                             .Bind(6, lease.expires_ms)
                             .Run());
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement uj,
                          db_->Prepare("UPDATE jobs SET state = ?, attempts = attempts + 1, "
                                       "agent_id = ? WHERE job_id = ?"));
  HILNAS_RETURN_IF_ERROR(
      uj.Bind(1, static_cast<int64_t>(LEASED)).Bind(2, agent_id).Bind(3, lease.job_id).Run());
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return std::optional<Lease>(lease);
}

absl::StatusOr<ReportOutcome> JobStore::ReportResult(const std::string& agent_id, int64_t job_id,
                                                     const std::string& lease_id,
                                                     const BenchmarkResult& result,
                                                     CanaryReading* canary) {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_RETURN_IF_ERROR(TouchLocked(agent_id, now));
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT job_id, agent_id, state, expires_ms FROM leases WHERE lease_id = ?"));
  q.Bind(1, lease_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("unknown lease \"", lease_id, "\""));
  if (q.Int(0) != job_id || q.Text(1) != agent_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease_id, " is not agent ", agent_id, "'s lease for job ", job_id));
  }
  absl::StatusOr<LeaseState> state = ParseLeaseState(q.Text(2));
  if (!state.ok()) {
    return absl::DataLossError(absl::StrCat(db_->path(), ": lease ", lease_id, ": stored state ",
                                            state.status().message()));
  }
  if (*state == LeaseState::kReported) return ReportOutcome::kDuplicate;
  if (*state == LeaseState::kExpired) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease_id, " for job ", job_id, " expired at ", q.Int(3), " ms (now ",
                     now, "); the job went back to the queue; result rejected"));
  }
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ul,
      db_->Prepare("UPDATE leases SET state = ?, reported_ms = ? WHERE lease_id = ?"));
  HILNAS_RETURN_IF_ERROR(CheckLeaseTransition(*state, LeaseState::kReported));
  HILNAS_RETURN_IF_ERROR(
      ul.Bind(1, Text(LeaseState::kReported)).Bind(2, now).Bind(3, lease_id).Run());
  const bool ok = result.failure() == FAILURE_NONE;
  BenchmarkResult judged;
  const BenchmarkResult* stored = &result;
  if (ok && result.has_canary()) {
    judged = result;
    stored = &judged;
    CanaryReading& reading = *judged.mutable_canary();
    HILNAS_RETURN_IF_ERROR(JudgeCanaryLocked(agent_id, reading));
    HILNAS_ASSIGN_OR_RETURN(SqliteStatement r,
                            db_->Prepare("SELECT drift_requeues FROM jobs WHERE job_id = ?"));
    r.Bind(1, job_id);
    HILNAS_ASSIGN_OR_RETURN(bool has_job, r.Step());
    const int requeues = has_job ? static_cast<int>(r.Int(0)) : 0;
    reading.set_requeues(requeues);
    if (canary != nullptr) *canary = reading;
    if (reading.drifted() && requeues < options_.max_drift_requeues) {
      // The measurement is not trusted: the job goes back to the queue
      // (the agent re-times its canary before its next job). Nothing is
      // stored but the reason.
      HILNAS_ASSIGN_OR_RETURN(
          SqliteStatement uq,
          db_->Prepare("UPDATE jobs SET state = ?, drift_requeues = drift_requeues + 1, "
                       "message = ? WHERE job_id = ?"));
      HILNAS_RETURN_IF_ERROR(
          uq.Bind(1, static_cast<int64_t>(QUEUED))
              .Bind(2, absl::StrFormat("canary at %.2fx TTFT, %.2fx decode of the agent's "
                                       "baseline (tolerance %.2f); re-queued (%d of %d)",
                                       reading.ttft_ratio(), reading.decode_ratio(),
                                       options_.canary_tolerance, requeues + 1,
                                       options_.max_drift_requeues))
              .Bind(3, job_id)
              .Run());
      HILNAS_RETURN_IF_ERROR(tx.Commit());
      return ReportOutcome::kRequeuedForDrift;
    }
  }
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement uj,
                          db_->Prepare("UPDATE jobs SET state = ?, result = ?, finished_ms = ?, "
                                       "message = ? WHERE job_id = ?"));
  HILNAS_RETURN_IF_ERROR(uj.Bind(1, static_cast<int64_t>(ok ? JOB_DONE : JOB_FAILED))
                             .BindBlob(2, stored->SerializeAsString())
                             .Bind(3, now)
                             .Bind(4, ok ? std::string() : result.failure_message())
                             .Bind(5, job_id)
                             .Run());
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ua,
      db_->Prepare(ok ? "UPDATE agents SET jobs_done = jobs_done + 1 WHERE agent_id = ?"
                      : "UPDATE agents SET jobs_failed = jobs_failed + 1 WHERE agent_id = ?"));
  HILNAS_RETURN_IF_ERROR(ua.Bind(1, agent_id).Run());
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return ReportOutcome::kAccepted;
}

absl::Status JobStore::JudgeCanaryLocked(const std::string& agent_id, CanaryReading& reading) {
  const double ttft = reading.ttft_ms();
  const double decode = reading.decode_ms_per_token();
  if (!(std::isfinite(ttft) && ttft > 0) || !(std::isfinite(decode) && decode >= 0) ||
      reading.measured_unix_ms() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("agent %s: canary reading with TTFT %g ms, decode %g ms/token at %d ms "
                        "is not a measurement",
                        agent_id, ttft, decode, reading.measured_unix_ms()));
  }
  const std::string key = reading.request().SerializeAsString();
  // The baseline: the 10th percentile of this reading and the agent's 500
  // newest of the same benchmark (the fastest while there are at most 10).
  // Interference only adds time, and a low percentile rather than the
  // minimum keeps a lucky reading from setting it as readings accumulate.
  // Whatever ratios the agent sent are overwritten.
  std::vector<double> ttfts = {ttft}, decodes;
  if (decode > 0) decodes.push_back(decode);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT ttft_ms, decode_ms FROM canaries WHERE agent_id = ? AND request = ? "
                   "AND measured_ms <> ? ORDER BY measured_ms DESC LIMIT 500"));
  q.Bind(1, agent_id).BindBlob(2, key).Bind(3, reading.measured_unix_ms());
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    ttfts.push_back(q.Double(0));
    if (q.Double(1) > 0) decodes.push_back(q.Double(1));
  }
  auto low_percentile = [](std::vector<double>& v) {
    if (v.empty()) return 0.0;
    const size_t k = (v.size() - 1) / 10;
    std::nth_element(v.begin(), v.begin() + k, v.end());
    return v[k];
  };
  const double base_ttft = low_percentile(ttfts);
  const double base_decode = low_percentile(decodes);
  reading.set_baseline_ttft_ms(base_ttft);
  reading.set_baseline_decode_ms_per_token(base_decode);
  reading.set_ttft_ratio(ttft / base_ttft);  // > 0: base_ttft is one of the positive readings
  reading.set_decode_ratio(decode > 0 && base_decode > 0 ? decode / base_decode : 1.0);
  reading.set_drifted(reading.ttft_ratio() > 1 + options_.canary_tolerance ||
                      reading.decode_ratio() > 1 + options_.canary_tolerance);
  reading.set_requeues(0);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ins,
      db_->Prepare("INSERT OR IGNORE INTO canaries(agent_id, measured_ms, request, ttft_ms, "
                   "decode_ms, reading) VALUES(?, ?, ?, ?, ?, ?)"));
  return ins.Bind(1, agent_id)
      .Bind(2, reading.measured_unix_ms())
      .BindBlob(3, key)
      .BindDouble(4, ttft)
      .BindDouble(5, decode)
      .BindBlob(6, reading.SerializeAsString())
      .Run();
}

absl::StatusOr<JobRecord> JobStore::GetJob(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT request, device, pool, state, attempts, agent_id, created_ms, "
                   "finished_ms, result, message, drift_requeues FROM jobs WHERE job_id = ?"));
  q.Bind(1, job_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  JobRecord j;
  j.job_id = job_id;
  HILNAS_RETURN_IF_ERROR(q.ParseBlob(0, &j.request, absl::StrCat("job ", job_id, "'s request")));
  j.device = q.Text(1);
  j.pool = q.Text(2);
  j.state = static_cast<JobState>(q.Int(3));
  j.attempts = static_cast<int>(q.Int(4));
  j.agent_id = q.Text(5);
  j.created_ms = q.Int(6);
  j.finished_ms = q.Int(7);
  if (!q.IsNull(8)) {
    j.result.emplace();
    if (!j.result->ParseFromString(q.Blob(8))) {
      return absl::DataLossError(absl::StrCat("job ", job_id, ": stored result does not parse"));
    }
  }
  j.message = q.Text(9);
  j.drift_requeues = static_cast<int>(q.Int(10));
  return j;
}

absl::StatusOr<std::vector<AgentRecord>> JobStore::ListAgents() {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT agent_id FROM agents ORDER BY name"));
  std::vector<std::string> ids;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    ids.push_back(q.Text(0));
  }
  std::vector<AgentRecord> out;
  for (const std::string& id : ids) {
    HILNAS_ASSIGN_OR_RETURN(AgentRecord a, AgentLocked(id));
    out.push_back(std::move(a));
  }
  return out;
}

absl::StatusOr<int> JobStore::AcceptedReports(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT COUNT(*) FROM leases WHERE job_id = ? AND state = ?"));
  q.Bind(1, job_id).Bind(2, Text(LeaseState::kReported));
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? static_cast<int>(q.Int(0)) : 0;
}

}  // namespace hilnas
