// The coordinator's gRPC face for benchmarking: the agent-facing service
// (register, heartbeat, lease, report) and the benchmark half of the
// user-facing service (list agents, submit, get job). Both only translate
// between protos and the JobStore; long-polls (LeaseJob, GetJob with
// wait_ms) are parked and finished by one background thread, never by a
// blocked gRPC thread.
#ifndef HILNAS_COORDINATOR_BENCHMARK_SERVICE_H_
#define HILNAS_COORDINATOR_BENCHMARK_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "coordinator/audit_log.h"
#include "coordinator/job_store.h"
#include "proto/service.grpc.pb.h"
#include "util/clock.h"
#include "util/data_roots.h"

namespace hilnas {

// A user credential: a secret token and the name the audit log records.
struct UserToken {
  std::string name;
  std::string token;
};

struct BenchmarkServiceOptions {
  // Every agent call must carry this as "authorization: Bearer TOKEN";
  // empty accepts any agent (a loopback-only coordinator). Register returns
  // a session key that every later agent call must carry as well.
  std::string enrollment_token;
  // Every user call must carry one of these; empty accepts any caller
  // (loopback only), recorded as "anonymous".
  std::vector<UserToken> user_tokens;
  // Not owned, may be null; records every create, start, stop, resume and
  // submission. Must outlive the services.
  AuditLog* audit = nullptr;
  // Paths a submitted request may name (checkpoint_dir).
  DataRoots data_roots;
  int64_t max_unfinished_jobs = 10'000;  // SubmitBenchmark: RESOURCE_EXHAUSTED past this
  // Architectures whose weights + KV cache (EstimateRunBytes at the longest
  // prompt plus the decoded tokens) exceed this are refused at submission.
  int64_t max_model_bytes = int64_t{64} << 30;
  int64_t heartbeat_interval_ms = 2'000;  // told to agents at Register
  // The drift check's reference benchmark, handed to agents at Register
  // (CanaryReading); no model set: agents run no canary. DefaultCanary()
  // is `hilnas coordinator`'s.
  BenchmarkRequest canary;
  int64_t max_wait_ms = 30'000;  // longest long-poll the server holds
  int64_t tick_ms = 50;          // how often parked calls and leases are checked
};

class LongPolls;
struct ServiceDeps;

// The campaign half of the user-facing service, implemented by the campaign
// layer (coordinator/campaign_service.h) so this library stays free of the
// search's dependencies. Thread-safe.
class CampaignApi {
 public:
  virtual ~CampaignApi() = default;
  virtual absl::StatusOr<CampaignStatus> Create(const CampaignConfig& config) = 0;
  virtual absl::StatusOr<CampaignStatus> Start(const std::string& name) = 0;
  virtual absl::StatusOr<CampaignStatus> Get(const std::string& name) = 0;
  virtual absl::StatusOr<std::vector<CampaignStatus>> List() = 0;
  virtual absl::StatusOr<CampaignStatus> Stop(const std::string& name) = 0;
  virtual absl::StatusOr<CampaignStatus> Resume(const std::string& name) = 0;
};

// Owns the background thread. `store` and `clock` are not owned and must
// outlive this object. Call Shutdown() before the gRPC server's Shutdown so
// parked calls finish.
class BenchmarkServices {
 public:
  // `campaigns` (not owned, may be null: campaign methods then answer
  // UNIMPLEMENTED) must outlive this object too.
  BenchmarkServices(JobStore* store, const Clock* clock, const BenchmarkServiceOptions& options,
                    CampaignApi* campaigns = nullptr);
  ~BenchmarkServices();

  grpc::Service* agent_service();
  // UserService: the benchmark methods, and the campaign methods through
  // the CampaignApi.
  grpc::Service* user_service();
  // Finishes every parked call and stops the background thread. Idempotent.
  void Shutdown();

 private:
  std::unique_ptr<LongPolls> polls_;
  std::unique_ptr<ServiceDeps> deps_;  // what both services use; before them
  std::unique_ptr<grpc::Service> agent_;
  std::unique_ptr<grpc::Service> user_;
};

// A small fixed benchmark for the drift check: 4 full-attention layers at
// d_model 256, a 1024-token prompt and 32 decode tokens, median of 5 (about
// half a second on a 2-core VM; a 256-token prompt's 12 ms TTFT on 2 threads
// read 11-14 ms when nothing changed).
BenchmarkRequest DefaultCanary();

// The registered agents as the user service and the web page report them.
absl::StatusOr<ListAgentsResponse> ListAgentsOf(JobStore& store);

// absl::Status -> grpc::Status with the same code and message.
grpc::Status ToGrpc(const absl::Status& s);

// The name of the user credential `ctx` carries: one of `tokens` (compared
// in constant time, every token tried), or "anonymous" when `tokens` is
// empty. UNAUTHENTICATED otherwise. The web page checks the same way.
absl::StatusOr<std::string> UserOf(const std::vector<UserToken>& tokens,
                                   const std::string& presented);

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_BENCHMARK_SERVICE_H_
