#include "coordinator/benchmark_service.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/long_polls.h"
#include "proto/benchmark_request.h"
#include "search_space/arch.h"
#include "search_space/counts.h"
#include "util/grpc_security.h"
#include "util/secrets.h"

namespace hilnas {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::StatusOr<std::string> UserOf(const std::vector<UserToken>& tokens,
                                   const std::string& presented) {
  if (tokens.empty()) return std::string("anonymous");
  const UserToken* match = nullptr;
  for (const UserToken& t : tokens) {  // no early exit: the time says nothing
    if (SecretEquals(t.token, presented)) match = &t;
  }
  if (match == nullptr) {
    return absl::UnauthenticatedError(
        presented.empty() ? "no user token: pass --user-token or set $HILNAS_USER_TOKEN"
                          : "user token rejected");
  }
  return match->name;
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
    info->set_canaries(a.canaries);
    if (a.last_canary.has_value()) *info->mutable_last_canary() = *a.last_canary;
  }
  return list;
}

BenchmarkRequest DefaultCanary() {
  BenchmarkRequest r;
  ArchSpec& a = *r.mutable_arch();
  a.set_name("canary");
  a.set_num_layers(4);
  a.set_d_model(256);
  a.set_d_ffn(512);
  a.set_num_heads(8);
  a.set_num_kv_heads(2);
  a.set_head_dim(64);
  a.set_vocab_size(8192);
  a.set_tie_embeddings(true);
  a.set_rope_theta(10000);
  a.set_norm_eps(1e-5);
  a.set_qk_norm(true);
  for (int i = 0; i < 4; ++i) a.add_attention(FULL);
  r.add_prompt_lengths(1024);
  r.set_decode_tokens(32);
  r.set_warmup_runs(1);
  r.set_repeats(5);
  r.set_max_repeats(5);
  r.set_seed(1);
  return r;
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

  // Every agent call: the enrollment token.
  absl::Status CheckEnrollment(const grpc::CallbackServerContext* ctx) const {
    if (options.enrollment_token.empty()) return absl::OkStatus();
    const std::string presented = BearerTokenOf(ctx->client_metadata());
    if (SecretEquals(presented, options.enrollment_token)) return absl::OkStatus();
    return absl::UnauthenticatedError(presented.empty()
                                          ? "no enrollment token: pass --token or set $HILNAS_TOKEN"
                                          : "enrollment token rejected");
  }
  // Every agent call after Register: the enrollment token and the agent's
  // current session key.
  absl::Status CheckAgent(const grpc::CallbackServerContext* ctx,
                          const std::string& agent_id) const {
    if (absl::Status s = CheckEnrollment(ctx); !s.ok()) return s;
    return store->CheckSession(agent_id, MetadataValue(ctx->client_metadata(), kSessionKey));
  }
  // Every user call: the credential's name, for the audit log.
  absl::StatusOr<std::string> User(const grpc::CallbackServerContext* ctx) const {
    return UserOf(options.user_tokens, BearerTokenOf(ctx->client_metadata()));
  }
  void Audit(const std::string& who, const std::string& action, const std::string& target,
             const absl::Status& outcome) const {
    if (options.audit == nullptr) return;
    absl::Status s =
        options.audit->Record(who, action, target, outcome.ok() ? "ok" : outcome.ToString());
    if (!s.ok()) std::fprintf(stderr, "audit log: %s\n", s.ToString().c_str());
  }
  // What SubmitBenchmark checks beyond ValidateBenchmarkRequest: paths under
  // the data roots, the memory bound, and the queue limit.
  absl::Status CheckSubmission(const BenchmarkRequest& request) const;
};

absl::Status ServiceDeps::CheckSubmission(const BenchmarkRequest& request) const {
  if (absl::Status s = ValidateBenchmarkRequest(request); !s.ok()) return s;
  if (absl::Status s = options.data_roots.Check("checkpoint_dir", request.checkpoint_dir());
      !s.ok()) {
    return s;
  }
  if (request.has_arch()) {
    absl::StatusOr<Arch> arch = ArchFromProto(request.arch());
    if (!arch.ok()) return arch.status();
    const BenchmarkRequest full = WithDefaults(request);
    int64_t longest = 0;
    for (int p : full.prompt_lengths()) longest = std::max<int64_t>(longest, p);
    const int elem = full.precision() == FP32 ? 4 : full.precision() == INT8_DYNAMIC ? 1 : 2;
    const int64_t need = EstimateRunBytes(*arch, longest + full.decode_tokens(), elem);
    if (need > options.max_model_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("arch: needs about ", need >> 20, " MiB for weights and KV cache at ",
                       longest + full.decode_tokens(), " tokens; this coordinator accepts at most ",
                       options.max_model_bytes >> 20, " MiB (--max-model-mb)"));
    }
  }
  absl::StatusOr<int64_t> unfinished = store->UnfinishedJobs();
  if (!unfinished.ok()) return unfinished.status();
  if (*unfinished >= options.max_unfinished_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat(*unfinished,
                     " jobs are queued or running, the most this coordinator holds "
                     "(--max-queued-jobs); try again when some have finished"));
  }
  return absl::OkStatus();
}

namespace {

class AgentServiceImpl : public AgentService::CallbackService {
 public:
  explicit AgentServiceImpl(const ServiceDeps* deps) : d_(*deps) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const RegisterRequest* req,
                                     RegisterResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (absl::Status s = d_.CheckEnrollment(ctx); !s.ok()) {
      reactor->Finish(ToGrpc(absl::UnauthenticatedError(
          absl::StrCat("agent \"", req->device().name(), "\": ", s.message()))));
      return reactor;
    }
    absl::StatusOr<AgentSession> session =
        d_.store->RegisterAgent(req->device(), MetadataValue(ctx->client_metadata(), kSessionKey));
    if (session.ok()) {
      resp->set_agent_id(session->agent_id);
      resp->set_session_key(session->session_key);
      resp->set_heartbeat_interval_ms(d_.options.heartbeat_interval_ms);
      if (d_.options.canary.model_case() != BenchmarkRequest::MODEL_NOT_SET) {
        *resp->mutable_canary() = d_.options.canary;
      }
    }
    reactor->Finish(ToGrpc(session.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
                                      HeartbeatResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (absl::Status s = d_.CheckAgent(ctx, req->agent_id()); !s.ok()) {
      reactor->Finish(ToGrpc(s));
      return reactor;
    }
    absl::StatusOr<bool> valid = d_.store->Heartbeat(req->agent_id(), req->lease_id());
    if (valid.ok()) resp->set_lease_valid(*valid);
    reactor->Finish(ToGrpc(valid.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* LeaseJob(grpc::CallbackServerContext* ctx, const LeaseJobRequest* req,
                                     LeaseJobResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (absl::Status s = d_.CheckAgent(ctx, req->agent_id()); !s.ok()) {
      reactor->Finish(ToGrpc(s));
      return reactor;
    }
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
    if (absl::Status s = d_.CheckAgent(ctx, req->agent_id()); !s.ok()) {
      reactor->Finish(ToGrpc(s));
      return reactor;
    }
    absl::StatusOr<int64_t> job_id = ParseJobId(req->job_id());
    CanaryReading canary;
    absl::StatusOr<ReportOutcome> outcome =
        job_id.ok() ? d_.store->ReportResult(req->agent_id(), *job_id, req->lease_id(),
                                             req->result(), &canary)
                    : job_id.status();
    if (outcome.ok()) {
      resp->set_accepted(true);
      resp->set_requeued_for_drift(*outcome == ReportOutcome::kRequeuedForDrift);
      if (req->result().has_canary()) *resp->mutable_canary() = canary;
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
    if (absl::StatusOr<std::string> who = d_.User(ctx); !who.ok()) {
      reactor->Finish(ToGrpc(who.status()));
      return reactor;
    }
    absl::StatusOr<ListAgentsResponse> agents = ListAgentsOf(*d_.store);
    if (agents.ok()) *resp = *std::move(agents);
    reactor->Finish(ToGrpc(agents.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* SubmitBenchmark(grpc::CallbackServerContext* ctx,
                                            const SubmitBenchmarkRequest* req,
                                            SubmitBenchmarkResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<std::string> who = d_.User(ctx);
    if (!who.ok()) {
      reactor->Finish(ToGrpc(who.status()));
      return reactor;
    }
    absl::Status allowed = d_.CheckSubmission(req->request());
    absl::StatusOr<int64_t> id =
        allowed.ok() ? d_.store->SubmitJob(req->request(), req->device(), req->pool()) : allowed;
    if (id.ok()) {
      resp->set_job_id(absl::StrCat(*id));
      d_.polls->Poke();
    }
    d_.Audit(*who, "submit", id.ok() ? absl::StrCat("job ", *id) : "job", id.status());
    reactor->Finish(ToGrpc(id.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const GetJobRequest* req,
                                   GetJobResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (absl::StatusOr<std::string> who = d_.User(ctx); !who.ok()) {
      reactor->Finish(ToGrpc(who.status()));
      return reactor;
    }
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
    return Answer(ctx, resp, "create", req->config().name(),
                  [&] { return d_.campaigns->Create(req->config()); });
  }
  grpc::ServerUnaryReactor* StartCampaign(grpc::CallbackServerContext* ctx,
                                          const CampaignRequest* req,
                                          CampaignStatus* resp) override {
    return Answer(ctx, resp, "start", req->name(),
                  [&] { return d_.campaigns->Start(req->name()); });
  }
  grpc::ServerUnaryReactor* GetCampaign(grpc::CallbackServerContext* ctx,
                                        const CampaignRequest* req, CampaignStatus* resp) override {
    return Answer(ctx, resp, "", req->name(), [&] { return d_.campaigns->Get(req->name()); });
  }
  grpc::ServerUnaryReactor* StopCampaign(grpc::CallbackServerContext* ctx,
                                         const CampaignRequest* req,
                                         CampaignStatus* resp) override {
    return Answer(ctx, resp, "stop", req->name(), [&] { return d_.campaigns->Stop(req->name()); });
  }
  grpc::ServerUnaryReactor* ResumeCampaign(grpc::CallbackServerContext* ctx,
                                           const CampaignRequest* req,
                                           CampaignStatus* resp) override {
    return Answer(ctx, resp, "resume", req->name(),
                  [&] { return d_.campaigns->Resume(req->name()); });
  }
  grpc::ServerUnaryReactor* ListCampaigns(grpc::CallbackServerContext* ctx, const CampaignRequest*,
                                          ListCampaignsResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (absl::StatusOr<std::string> who = d_.User(ctx); !who.ok()) {
      reactor->Finish(ToGrpc(who.status()));
      return reactor;
    }
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
  // Authenticates, runs `call`, and records `action` (empty: a read, not
  // recorded) on campaign `target` in the audit log.
  template <typename F>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, CampaignStatus* resp,
                                   const std::string& action, const std::string& target, F call) {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<std::string> who = d_.User(ctx);
    if (!who.ok()) {
      reactor->Finish(ToGrpc(who.status()));
      return reactor;
    }
    if (d_.campaigns == nullptr) return Unimplemented(reactor);
    absl::StatusOr<CampaignStatus> status = call();
    if (!action.empty()) d_.Audit(*who, action, absl::StrCat("campaign ", target), status.status());
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
