#include "coordinator/benchmark_service.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/long_polls.h"

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

}  // namespace

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
    if (!job.ok() || JobFinished(job->state) || req->wait_ms() <= 0) {
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
