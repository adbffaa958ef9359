// The tables of the coordinator's benchmarking state (agents, jobs, leases,
// canary readings) in one SQLite file, and their migration from older
// versions. Each part of that state (agent_registry.h, job_queue.h,
// lease_table.h, drift_policy.h) reads and writes its own tables; JobStore
// (job_store.h) composes them under one lock and one transaction per call.
#ifndef HILNAS_COORDINATOR_JOB_SCHEMA_H_
#define HILNAS_COORDINATOR_JOB_SCHEMA_H_

#include <string>

#include "absl/status/status.h"
#include "coordinator/lifecycle.h"
#include "coordinator/sqlite.h"

namespace hilnas {

// Creates the tables, or migrates an older file in place (v1 -> v4).
// INVALID_ARGUMENT for a file written by a newer schema.
absl::Status CreateJobSchema(SqliteDb& db);

// The text form SQLite keeps of a lease state (coordinator/lifecycle.h).
inline std::string LeaseStateText(LeaseState s) { return std::string(LeaseStateName(s)); }

// "agent-" or "lease-" and 96 random bits in hex.
std::string RandomId(const char* prefix);

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_JOB_SCHEMA_H_
