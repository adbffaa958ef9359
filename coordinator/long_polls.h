// Parked long-poll calls of the benchmark service (LeaseJob and GetJob with
// wait_ms): one background thread finishes each when its answer exists or
// its deadline passes, so no gRPC thread ever blocks. The same thread
// expires overdue leases every tick.
#ifndef HILNAS_COORDINATOR_LONG_POLLS_H_
#define HILNAS_COORDINATOR_LONG_POLLS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <list>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/job_store.h"
#include "proto/service.pb.h"
#include "util/clock.h"

namespace hilnas {

// Thread-safe. `store` and `clock` are not owned and must outlive this.
class LongPolls {
 public:
  LongPolls(JobStore* store, const Clock* clock, int64_t tick_ms);
  ~LongPolls();  // Shutdown()
  LongPolls(const LongPolls&) = delete;
  LongPolls& operator=(const LongPolls&) = delete;

  // Answers `reactor` with a lease for `agent_id` as soon as one exists, or
  // with has_job false at `deadline_ms` (clock time), or CANCELLED when the
  // agent hung up. After Shutdown: at once, with no job.
  void ParkLease(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                 LeaseJobResponse* resp, std::string agent_id, int64_t deadline_ms);
  // Answers with the job once it is DONE or FAILED, or as it stands at
  // `deadline_ms` or when the caller hung up.
  void ParkJob(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
               GetJobResponse* resp, int64_t job_id, int64_t deadline_ms);
  // Something changed (a job queued or finished): look at parked calls now.
  void Poke();
  // Finishes every parked call (leases with no job, jobs with UNAVAILABLE)
  // and stops the thread. Idempotent.
  void Shutdown();

 private:
  struct LeaseWaiter {
    grpc::CallbackServerContext* ctx;
    grpc::ServerUnaryReactor* reactor;
    LeaseJobResponse* resp;
    std::string agent_id;
    int64_t deadline_ms;
  };
  struct JobWaiter {
    grpc::CallbackServerContext* ctx;
    grpc::ServerUnaryReactor* reactor;
    GetJobResponse* resp;
    int64_t job_id;
    int64_t deadline_ms;
  };

  void Loop();
  // True when the call was finished.
  bool ServeLease(LeaseWaiter& w, int64_t now, bool try_lease);
  bool ServeJob(JobWaiter& w, int64_t now);

  JobStore* const store_;     // not owned
  const Clock* const clock_;  // not owned
  const int64_t tick_ms_;
  int64_t last_touch_ms_ = 0;  // when parked agents were last marked alive (Loop's thread)
  absl::Mutex mu_;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::list<LeaseWaiter> leases_ ABSL_GUARDED_BY(mu_);
  std::list<JobWaiter> jobs_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after the members it reads
};

// The wire form of a lease and of a job, shared with the direct answers.
void FillLease(const Lease& lease, LeaseJobResponse* response);
void FillJob(const JobRecord& job, GetJobResponse* response);

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_LONG_POLLS_H_
