#include "coordinator/long_polls.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/benchmark_service.h"

namespace hilnas {
void FillLease(const Lease& l, LeaseJobResponse* r) {
  r->set_has_job(true);
  r->set_job_id(absl::StrCat(l.job_id));
  r->set_lease_id(l.lease_id);
  r->set_lease_expires_unix_ms(l.expires_ms);
  *r->mutable_request() = l.request;
}

void FillJob(const JobRecord& j, GetJobResponse* r) {
  r->set_job_id(absl::StrCat(j.job_id));
  r->set_state(j.state);
  if (j.result.has_value()) {
    *r->mutable_result() = *j.result;
  } else if (j.state == JOB_FAILED) {
    r->mutable_result()->set_failure(RUNTIME_ERROR);
    r->mutable_result()->set_failure_message(j.message);
  }
}

LongPolls::LongPolls(JobStore* store, const Clock* clock, int64_t tick_ms)
    : store_(store), clock_(clock), tick_ms_(tick_ms), thread_([this] { Loop(); }) {}

LongPolls::~LongPolls() { Shutdown(); }

void LongPolls::ParkLease(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                          LeaseJobResponse* resp, std::string agent_id, int64_t deadline_ms) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return reactor->Finish(grpc::Status::OK);
  leases_.push_back({ctx, reactor, resp, std::move(agent_id), deadline_ms});
}

void LongPolls::ParkJob(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                        GetJobResponse* resp, int64_t job_id, int64_t deadline_ms) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return reactor->Finish(grpc::Status::OK);
  jobs_.push_back({ctx, reactor, resp, job_id, deadline_ms});
}

void LongPolls::Poke() {
  absl::MutexLock lock(&mu_);
  poked_ = true;
}

void LongPolls::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  for (auto& w : leases_) w.reactor->Finish(grpc::Status::OK);
  for (auto& w : jobs_) {
    w.reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down"));
  }
  leases_.clear();
  jobs_.clear();
}

void LongPolls::Loop() {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return poked_ || stopped_; };
  while (!stopped_) {
    mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Milliseconds(tick_ms_));
    if (stopped_) break;
    poked_ = false;
    store_->ExpireLeases().IgnoreError();  // a failure here is retried next tick
    const int64_t now = clock_->NowMs();
    // Leasing is a write transaction per agent; once nothing is leasable the
    // remaining waiters only need their deadlines checked (200 parked agents
    // and a stream of submissions made every pass 200 transactions, most of
    // them empty: bench/coordinator_load, 45 jobs/s before this).
    // A parked agent is alive: mark it so (one transaction for all of them,
    // a few times per lease lifetime), or a second agent could take its name
    // while it waits (JobStore::RegisterAgent, one live session per name).
    if (!leases_.empty() &&
        now - last_touch_ms_ >= std::min<int64_t>(1000, store_->options().lease_ttl_ms / 3)) {
      std::vector<std::string> parked;
      for (const LeaseWaiter& w : leases_) parked.push_back(w.agent_id);
      store_->TouchAgents(parked).IgnoreError();  // retried next time
      last_touch_ms_ = now;
    }
    // Asked again only after a waiter found nothing for it: a pass that
    // leases keeps leasing, a pass over an empty queue costs one read.
    bool leasable = store_->HasLeasableJobs().value_or(true);
    for (auto it = leases_.begin(); it != leases_.end();) {
      const bool tried = leasable;
      if (ServeLease(*it, now, tried)) {
        it = leases_.erase(it);
        continue;
      }
      if (tried) leasable = store_->HasLeasableJobs().value_or(true);
      ++it;
    }
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      it = ServeJob(*it, now) ? jobs_.erase(it) : std::next(it);
    }
  }
}

bool LongPolls::ServeLease(LeaseWaiter& w, int64_t now, bool try_lease) {
  if (w.ctx->IsCancelled()) {  // the agent went away: do not lease to a ghost
    w.reactor->Finish(grpc::Status::CANCELLED);
    return true;
  }
  if (!try_lease) {
    if (now < w.deadline_ms) return false;
    w.resp->set_has_job(false);
    w.reactor->Finish(grpc::Status::OK);
    return true;
  }
  absl::StatusOr<std::optional<Lease>> lease = store_->LeaseJob(w.agent_id);
  if (!lease.ok()) {
    w.reactor->Finish(ToGrpc(lease.status()));
    return true;
  }
  if (lease->has_value()) {
    FillLease(**lease, w.resp);
    w.reactor->Finish(grpc::Status::OK);
    return true;
  }
  if (now >= w.deadline_ms) {
    w.resp->set_has_job(false);
    w.reactor->Finish(grpc::Status::OK);
    return true;
  }
  return false;
}

bool LongPolls::ServeJob(JobWaiter& w, int64_t now) {
  absl::StatusOr<JobRecord> job = store_->GetJob(w.job_id);
  if (!job.ok()) {
    w.reactor->Finish(ToGrpc(job.status()));
    return true;
  }
  if (JobFinished(job->state) || now >= w.deadline_ms || w.ctx->IsCancelled()) {
    FillJob(*job, w.resp);
    w.reactor->Finish(grpc::Status::OK);
    return true;
  }
  return false;
}

}  // namespace hilnas
