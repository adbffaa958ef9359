#include "coordinator/job_schema.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
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

}  // namespace

std::string RandomId(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  static absl::Mutex mu;
  absl::MutexLock lock(&mu);
  return absl::StrFormat("%s%016x%08x", prefix, rng(), static_cast<uint32_t>(rng()));
}

absl::Status CreateJobSchema(SqliteDb& db) {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement v, db.Prepare("PRAGMA user_version"));
  HILNAS_ASSIGN_OR_RETURN(bool row, v.Step());
  const int64_t version = row ? v.Int(0) : 0;
  if (version > kSchemaVersion) {
    return absl::InvalidArgumentError(absl::StrCat("database ", db.path(), " has schema version ",
                                                   version, "; this hilnas reads up to ",
                                                   kSchemaVersion));
  }
  if (version == 1) {
    HILNAS_RETURN_IF_ERROR(db.Exec("ALTER TABLE jobs ADD COLUMN client_key TEXT"));
  }
  if (version >= 1 && version <= 2) {
    // Agents registered before v3 hold no session key: they must register
    // again, which every agent does when its next call is refused.
    HILNAS_RETURN_IF_ERROR(
        db.Exec("ALTER TABLE agents ADD COLUMN session_hash TEXT NOT NULL DEFAULT ''"));
  }
  if (version >= 1 && version <= 3) {
    HILNAS_RETURN_IF_ERROR(
        db.Exec("ALTER TABLE jobs ADD COLUMN drift_requeues INTEGER NOT NULL DEFAULT 0"));
  }
  HILNAS_RETURN_IF_ERROR(db.Exec(kSchema));
  HILNAS_RETURN_IF_ERROR(
      db.Exec("CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_client_key ON jobs(client_key) "
              "WHERE client_key IS NOT NULL"));
  return db.Exec(absl::StrCat("PRAGMA user_version = ", kSchemaVersion));
}

}  // namespace hilnas
