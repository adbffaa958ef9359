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

#include "coordinator/job_store.h"
#include "proto/service.grpc.pb.h"
#include "util/clock.h"

namespace hilnas {

struct BenchmarkServiceOptions {
  // Agents must present this at Register; empty accepts any agent (loopback use).
  std::string enrollment_token;
  int64_t heartbeat_interval_ms = 2'000;  // told to agents at Register
  int64_t max_wait_ms = 30'000;           // longest long-poll the server holds
  int64_t tick_ms = 50;                   // how often parked calls and leases are checked
};

class LongPolls;
struct ServiceDeps;

// Owns the background thread. `store` and `clock` are not owned and must
// outlive this object. Call Shutdown() before the gRPC server's Shutdown so
// parked calls finish.
class BenchmarkServices {
 public:
  BenchmarkServices(JobStore* store, const Clock* clock, const BenchmarkServiceOptions& options);
  ~BenchmarkServices();

  grpc::Service* agent_service();
  // UserService with the benchmark methods; campaign methods are added by
  // deriving from UserServiceBase (issue 6) or answer UNIMPLEMENTED.
  grpc::Service* user_service();
  // Finishes every parked call and stops the background thread. Idempotent.
  void Shutdown();

 private:
  std::unique_ptr<LongPolls> polls_;
  std::unique_ptr<ServiceDeps> deps_;  // what both services use; before them
  std::unique_ptr<grpc::Service> agent_;
  std::unique_ptr<grpc::Service> user_;
};

// absl::Status -> grpc::Status with the same code and message.
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_BENCHMARK_SERVICE_H_
