#include "coordinator/benchmark_service.h"

#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hilnas {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::StatusOr<ListAgentsResponse> ListAgentsOf(JobStore& store) {
  absl::StatusOr<std::vector<AgentRecord>> agents = store.ListAgents();
  if (!agents.ok()) return agents.status();
  ListAgentsResponse list;
  for (const AgentRecord& a : *agents) {
    AgentInfo* info = list.add_agents();
    info->set_agent_id(a.agent_id);
    *info->mutable_device() = a.device;
    info->set_state(std::string(AgentStateName(a.state)));
    info->set_last_heartbeat_unix_ms(a.last_heartbeat_ms);
    info->set_jobs_done(a.jobs_done);
  }
  return list;
}

namespace {

absl::StatusOr<int64_t> ParseJobId(const std::string& s) {
  int64_t id = 0;
  if (!absl::SimpleAtoi(s, &id) || id <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("job id \"", s, "\" is not a positive integer"));
  }
  return id;
}

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

bool Finished(JobState s) { return s == JOB_DONE || s == JOB_FAILED; }

}  // namespace

// Parked long-poll calls, finished by one thread when their answer exists or
// their deadline passes. The same thread expires leases every tick.
class LongPolls {
 public:
  LongPolls(JobStore* store, const Clock* clock, int64_t tick_ms)
      : store_(store), clock_(clock), tick_ms_(tick_ms), thread_([this] { Loop(); }) {}
  ~LongPolls() { Shutdown(); }

  void ParkLease(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                 LeaseJobResponse* resp, std::string agent_id, int64_t deadline_ms) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return reactor->Finish(grpc::Status::OK);
    leases_.push_back({ctx, reactor, resp, std::move(agent_id), deadline_ms});
  }
  void ParkJob(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
               GetJobResponse* resp, int64_t job_id, int64_t deadline_ms) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return reactor->Finish(grpc::Status::OK);
    jobs_.push_back({ctx, reactor, resp, job_id, deadline_ms});
  }
  // Something changed (a job queued or finished): check parked calls now.
  void Poke() {
    std::lock_guard<std::mutex> lock(mu_);
    poked_ = true;
    cv_.notify_one();
  }
  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      cv_.notify_one();
    }
    thread_.join();
    for (auto& w : leases_) w.reactor->Finish(grpc::Status::OK);
    for (auto& w : jobs_)
      w.reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator shutting down"));
    leases_.clear();
    jobs_.clear();
  }

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

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      cv_.wait_for(lock, std::chrono::milliseconds(tick_ms_),
                   [this] { return poked_ || stopped_; });
      if (stopped_) break;
      poked_ = false;
      store_->ExpireLeases().IgnoreError();  // a failure here is retried next tick
      const int64_t now = clock_->NowMs();
      for (auto it = leases_.begin(); it != leases_.end();) {
        it = ServeLease(*it, now) ? leases_.erase(it) : std::next(it);
      }
      for (auto it = jobs_.begin(); it != jobs_.end();) {
        it = ServeJob(*it, now) ? jobs_.erase(it) : std::next(it);
      }
    }
  }

  // True when the call was finished.
  bool ServeLease(LeaseWaiter& w, int64_t now) {
    if (w.ctx->IsCancelled()) {  // the agent went away: do not lease to a ghost
      w.reactor->Finish(grpc::Status::CANCELLED);
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

  bool ServeJob(JobWaiter& w, int64_t now) {
    absl::StatusOr<JobRecord> job = store_->GetJob(w.job_id);
    if (!job.ok()) {
      w.reactor->Finish(ToGrpc(job.status()));
      return true;
    }
    if (Finished(job->state) || now >= w.deadline_ms || w.ctx->IsCancelled()) {
      FillJob(*job, w.resp);
      w.reactor->Finish(grpc::Status::OK);
      return true;
    }
    return false;
  }

  JobStore* store_;
  const Clock* clock_;
  const int64_t tick_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool poked_ = false;
  bool stopped_ = false;
  std::list<LeaseWaiter> leases_;
  std::list<JobWaiter> jobs_;
  std::thread thread_;  // last: starts after the members it reads
};

// What both services work with; owned by BenchmarkServices, which outlives them.
struct ServiceDeps {
  JobStore* store;
  const Clock* clock;
  LongPolls* polls;
  BenchmarkServiceOptions options;
  CampaignApi* campaigns;  // may be null

  // When a long-poll asking to wait `wait_ms` must be answered, capped by
  // max_wait_ms.
  int64_t LongPollDeadline(int64_t wait_ms) const {
    return clock->NowMs() + std::min(wait_ms, options.max_wait_ms);
  }
};

namespace {

class AgentServiceImpl : public AgentService::CallbackService {
 public:
  explicit AgentServiceImpl(const ServiceDeps* deps) : d_(*deps) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const RegisterRequest* req,
                                     RegisterResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (!d_.options.enrollment_token.empty() &&
        req->enrollment_token() != d_.options.enrollment_token) {
      reactor->Finish(grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          absl::StrCat("agent \"", req->device().name(), "\": enrollment token rejected")));
      return reactor;
    }
    absl::StatusOr<std::string> id = d_.store->RegisterAgent(req->device());
    if (id.ok()) {
      resp->set_agent_id(*id);
      resp->set_heartbeat_interval_ms(d_.options.heartbeat_interval_ms);
    }
    reactor->Finish(ToGrpc(id.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
                                      HeartbeatResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<bool> valid = d_.store->Heartbeat(req->agent_id(), req->lease_id());
    if (valid.ok()) resp->set_lease_valid(*valid);
    reactor->Finish(ToGrpc(valid.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* LeaseJob(grpc::CallbackServerContext* ctx, const LeaseJobRequest* req,
                                     LeaseJobResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<std::optional<Lease>> lease = d_.store->LeaseJob(req->agent_id());
    if (!lease.ok() || lease->has_value() || req->wait_ms() <= 0) {
      if (lease.ok() && lease->has_value()) FillLease(**lease, resp);
      reactor->Finish(ToGrpc(lease.status()));
      return reactor;
    }
    d_.polls->ParkLease(ctx, reactor, resp, req->agent_id(), d_.LongPollDeadline(req->wait_ms()));
    return reactor;
  }

  grpc::ServerUnaryReactor* ReportResult(grpc::CallbackServerContext* ctx,
                                         const ReportResultRequest* req,
                                         ReportResultResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<int64_t> job_id = ParseJobId(req->job_id());
    absl::StatusOr<ReportOutcome> outcome =
        job_id.ok()
            ? d_.store->ReportResult(req->agent_id(), *job_id, req->lease_id(), req->result())
            : job_id.status();
    if (outcome.ok()) {
      resp->set_accepted(true);
      d_.polls->Poke();
    }
    reactor->Finish(ToGrpc(outcome.status()));
    return reactor;
  }

 private:
  const ServiceDeps& d_;
};

class UserServiceImpl : public UserService::CallbackService {
 public:
  explicit UserServiceImpl(const ServiceDeps* deps) : d_(*deps) {}

  grpc::ServerUnaryReactor* ListAgents(grpc::CallbackServerContext* ctx, const ListAgentsRequest*,
                                       ListAgentsResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<ListAgentsResponse> agents = ListAgentsOf(*d_.store);
    if (agents.ok()) *resp = *std::move(agents);
    reactor->Finish(ToGrpc(agents.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* SubmitBenchmark(grpc::CallbackServerContext* ctx,
                                            const SubmitBenchmarkRequest* req,
                                            SubmitBenchmarkResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<int64_t> id = d_.store->SubmitJob(req->request(), req->device(), req->pool());
    if (id.ok()) {
      resp->set_job_id(absl::StrCat(*id));
      d_.polls->Poke();
    }
    reactor->Finish(ToGrpc(id.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const GetJobRequest* req,
                                   GetJobResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<int64_t> id = ParseJobId(req->job_id());
    absl::StatusOr<JobRecord> job = id.ok() ? d_.store->GetJob(*id) : id.status();
    if (!job.ok() || Finished(job->state) || req->wait_ms() <= 0) {
      if (job.ok()) FillJob(*job, resp);
      reactor->Finish(ToGrpc(job.status()));
      return reactor;
    }
    d_.polls->ParkJob(ctx, reactor, resp, *id, d_.LongPollDeadline(req->wait_ms()));
    return reactor;
  }

  grpc::ServerUnaryReactor* CreateCampaign(grpc::CallbackServerContext* ctx,
                                           const CreateCampaignRequest* req,
                                           CampaignStatus* resp) override {
    return Answer(ctx, resp, [&] { return d_.campaigns->Create(req->config()); });
  }
  grpc::ServerUnaryReactor* StartCampaign(grpc::CallbackServerContext* ctx,
                                          const CampaignRequest* req,
                                          CampaignStatus* resp) override {
    return Answer(ctx, resp, [&] { return d_.campaigns->Start(req->name()); });
  }
  grpc::ServerUnaryReactor* GetCampaign(grpc::CallbackServerContext* ctx,
                                        const CampaignRequest* req, CampaignStatus* resp) override {
    return Answer(ctx, resp, [&] { return d_.campaigns->Get(req->name()); });
  }
  grpc::ServerUnaryReactor* StopCampaign(grpc::CallbackServerContext* ctx,
                                         const CampaignRequest* req,
                                         CampaignStatus* resp) override {
    return Answer(ctx, resp, [&] { return d_.campaigns->Stop(req->name()); });
  }
  grpc::ServerUnaryReactor* ResumeCampaign(grpc::CallbackServerContext* ctx,
                                           const CampaignRequest* req,
                                           CampaignStatus* resp) override {
    return Answer(ctx, resp, [&] { return d_.campaigns->Resume(req->name()); });
  }
  grpc::ServerUnaryReactor* ListCampaigns(grpc::CallbackServerContext* ctx, const CampaignRequest*,
                                          ListCampaignsResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (d_.campaigns == nullptr) return Unimplemented(reactor);
    absl::StatusOr<std::vector<CampaignStatus>> all = d_.campaigns->List();
    if (all.ok()) {
      for (CampaignStatus& c : *all) *resp->add_campaigns() = std::move(c);
    }
    reactor->Finish(ToGrpc(all.status()));
    return reactor;
  }

 private:
  static grpc::ServerUnaryReactor* Unimplemented(grpc::ServerUnaryReactor* reactor) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this coordinator serves no campaigns"));
    return reactor;
  }
  template <typename F>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, CampaignStatus* resp, F call) {
    auto* reactor = ctx->DefaultReactor();
    if (d_.campaigns == nullptr) return Unimplemented(reactor);
    absl::StatusOr<CampaignStatus> status = call();
    if (status.ok()) *resp = *std::move(status);
    reactor->Finish(ToGrpc(status.status()));
    return reactor;
  }

  const ServiceDeps& d_;
};

}  // namespace

BenchmarkServices::BenchmarkServices(JobStore* store, const Clock* clock,
                                     const BenchmarkServiceOptions& options, CampaignApi* campaigns)
    : polls_(std::make_unique<LongPolls>(store, clock, options.tick_ms)),
      deps_(new ServiceDeps{store, clock, polls_.get(), options, campaigns}),
      agent_(std::make_unique<AgentServiceImpl>(deps_.get())),
      user_(std::make_unique<UserServiceImpl>(deps_.get())) {}

BenchmarkServices::~BenchmarkServices() { Shutdown(); }

grpc::Service* BenchmarkServices::agent_service() { return agent_.get(); }
grpc::Service* BenchmarkServices::user_service() { return user_.get(); }
void BenchmarkServices::Shutdown() { polls_->Shutdown(); }

}  // namespace hilnas
