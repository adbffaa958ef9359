#include "device_agent/agent.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "proto/service.grpc.pb.h"
#include "util/clock.h"
#include "util/grpc_security.h"

namespace hilnas {
namespace {

std::chrono::system_clock::time_point Deadline(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

bool Transient(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         s.error_code() == grpc::StatusCode::CANCELLED ||
         s.error_code() == grpc::StatusCode::INTERNAL;
}

}  // namespace

class Agent::Impl {
 public:
  Impl(AgentOptions o, std::unique_ptr<Runtime> runtime)
      : options_(std::move(o)), runtime_(std::move(runtime)), rng_(std::random_device{}()) {
    // The memory gate's baselines outlive a job: every job, canaries
    // included, is judged against this agent's history.
    if (options_.protocol.memory_history == nullptr) {
      options_.protocol.memory_history = &memory_history_;
    }
    grpc::ChannelArguments args;
    // Reconnect quickly once the coordinator is back; our own backoff
    // spaces the retries (gRPC's default can wait two minutes).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    if (options_.channel != nullptr) {
      channel_ = options_.channel;
    } else {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
          MakeChannel(options_.coordinator, options_.tls, nullptr, args);
      if (channel.ok()) {
        channel_ = *std::move(channel);
      } else {
        channel_error_ = channel.status();
      }
    }
    if (channel_ != nullptr) stub_ = AgentService::NewStub(channel_);
    options_.device.set_runtime(runtime_->name());
    options_.device.set_runtime_version(runtime_->version());
  }

  absl::Status Run(const std::atomic<bool>& stop, int* jobs_done) {
    if (!channel_error_.ok()) return channel_error_;
    while (!stop.load() && (options_.max_jobs == 0 || *jobs_done < options_.max_jobs)) {
      if (agent_id_.empty()) {
        grpc::Status s = Register();
        if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
          return absl::UnauthenticatedError(s.error_message());
        }
        if (!s.ok()) {
          Backoff(stop, absl::StrCat("register: ", s.error_message()));
          continue;
        }
      }
      LeaseJobRequest req;
      req.set_agent_id(agent_id_);
      req.set_wait_ms(options_.lease_wait_ms);
      LeaseJobResponse lease;
      grpc::ClientContext ctx;
      Authorize(ctx);
      ctx.set_deadline(Deadline(options_.lease_wait_ms + options_.rpc_deadline_ms));
      grpc::Status s = stub_->LeaseJob(&ctx, req, &lease);
      // The coordinator lost us, or another registration took our name's
      // session: register again.
      if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
          s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
        Log(absl::StrCat("lease: ", s.error_message(), "; registering again"));
        agent_id_.clear();  // the session key is kept: presented at Register, it proves the holder
        Backoff(stop, "re-registration");
        continue;
      }
      if (!s.ok()) {
        Backoff(stop, absl::StrCat("lease: ", s.error_message()));
        continue;
      }
      backoff_ms_ = 0;
      if (!lease.has_job()) continue;
      RunJob(lease, stop);
      ++*jobs_done;
    }
    return absl::OkStatus();
  }

 private:
  grpc::Status Register() {
    RegisterRequest req;
    *req.mutable_device() = options_.device;
    RegisterResponse resp;
    grpc::ClientContext ctx;
    Authorize(ctx);
    ctx.set_deadline(Deadline(options_.rpc_deadline_ms));
    grpc::Status s = stub_->Register(&ctx, req, &resp);
    if (s.ok()) {
      agent_id_ = resp.agent_id();
      session_key_ = resp.session_key();
      heartbeat_ms_ = resp.heartbeat_interval_ms() > 0 ? resp.heartbeat_interval_ms() : 2000;
      const bool canary_on = resp.canary().model_case() != BenchmarkRequest::MODEL_NOT_SET &&
                             (options_.canary_every_jobs > 0 || options_.canary_every_ms > 0);
      if (!canary_on) {
        canary_.reset();
        last_canary_.reset();
      } else if (!canary_.has_value() ||
                 canary_->SerializeAsString() != resp.canary().SerializeAsString()) {
        canary_ = resp.canary();
        last_canary_.reset();  // a different reference: time it before the next job
      }
      backoff_ms_ = 0;
      Log(absl::StrCat("registered with ", options_.coordinator, " as ", agent_id_));
    }
    return s;
  }

  // The enrollment token and, once registered, the session key, as call
  // metadata (never in a message body).
  void Authorize(grpc::ClientContext& ctx) const {
    if (!options_.enrollment_token.empty()) {
      ctx.AddMetadata(kAuthorizationKey, kBearerPrefix + options_.enrollment_token);
    }
    if (!session_key_.empty()) ctx.AddMetadata(kSessionKey, session_key_);
  }

  // Exponential backoff with jitter, interruptible by `stop`.
  void Backoff(const std::atomic<bool>& stop, const std::string& why) {
    backoff_ms_ = backoff_ms_ == 0 ? options_.backoff_initial_ms
                                   : std::min(backoff_ms_ * 2, options_.backoff_max_ms);
    const int64_t wait = std::uniform_int_distribution<int64_t>(backoff_ms_ / 2, backoff_ms_)(rng_);
    Log(absl::StrCat(why, "; retrying in ", wait, " ms"));
    Rest(stop, wait);
  }

  // Sleeps `ms`, interruptible by `stop`.
  static void Rest(const std::atomic<bool>& stop, int64_t ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!stop.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Set by the measuring thread when the measurement is over.
  struct MeasurementDone {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
  };

  // Renews the lease every heartbeat interval until `finished.done`; sets
  // `lost` when the coordinator says the lease is no longer ours.
  void HeartbeatLoop(const std::string& lease_id, MeasurementDone& finished,
                     std::atomic<bool>& lost) {
    absl::MutexLock lock(&finished.mu);
    auto done = [&finished]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(finished.mu) { return finished.done; };
    while (
        !finished.mu.AwaitWithTimeout(absl::Condition(&done), absl::Milliseconds(heartbeat_ms_))) {
      finished.mu.Unlock();
      HeartbeatRequest req;
      req.set_agent_id(agent_id_);
      req.set_lease_id(lease_id);
      HeartbeatResponse resp;
      grpc::ClientContext ctx;
      Authorize(ctx);
      ctx.set_deadline(Deadline(options_.rpc_deadline_ms));
      grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
      if (s.ok() && !resp.lease_valid()) {
        Log(absl::StrCat("lease ", lease_id, " is no longer ours; stopping the measurement"));
        lost = true;
      }
      finished.mu.Lock();
    }
  }

  // Paths in a job are the coordinator's word only; the agent checks them
  // against its own roots before it reads anything.
  absl::Status AdmitPaths(const BenchmarkRequest& r) const {
    if (r.checkpoint_dir().empty()) return absl::OkStatus();
    if (options_.data_roots.unrestricted()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint_dir: ", r.checkpoint_dir(),
          ": this agent runs no checkpoint jobs; it was started without --data-root (hilnas "
          "agent --data-root DIR names the folders it may read)"));
    }
    return options_.data_roots.Check("checkpoint_dir", r.checkpoint_dir());
  }

  void RunJob(const LeaseJobResponse& lease, const std::atomic<bool>& stop) {
    Log(absl::StrCat("job ", lease.job_id(), ": leased (", lease.lease_id(), ")"));
    MeasurementDone finished;
    std::atomic<bool> lost{false};
    std::thread heartbeat([&] { HeartbeatLoop(lease.lease_id(), finished, lost); });
    ProtocolOptions protocol = options_.protocol;
    protocol.cancel = &lost;
    protocol.admit = [this](const BenchmarkRequest& r) { return AdmitPaths(r); };
    auto user_progress = protocol.progress;
    protocol.progress = [&](const std::string& line) {
      if (user_progress) user_progress(line);
      Log(absl::StrCat("job ", lease.job_id(), ": ", line));
    };
    if (CanaryDue()) TimeCanary(protocol);
    BenchmarkRequest request = lease.request();
    // A job that leaves threads unset runs with the agent's stated count.
    if (request.threads() <= 0) request.set_threads(options_.device.threads());
    BenchmarkResult result = MeasureBenchmark(*runtime_, request, options_.device, protocol);
    if (last_canary_.has_value()) {
      *result.mutable_canary() = *last_canary_;
      result.mutable_canary()->set_jobs_since(jobs_since_canary_);
    }
    ++jobs_since_canary_;
    {
      absl::MutexLock lock(&finished.mu);
      finished.done = true;
    }
    heartbeat.join();
    if (lost.load()) return;  // another agent has the job now; a report would be rejected
    Report(lease, result, stop);
  }

  bool CanaryDue() const {
    if (!canary_.has_value()) return false;
    if (!last_canary_.has_value() || retime_canary_) return true;
    if (options_.canary_every_jobs > 0 && jobs_since_canary_ >= options_.canary_every_jobs) {
      return true;
    }
    return options_.canary_every_ms > 0 &&
           SystemClock().NowMs() - last_canary_->measured_unix_ms() >= options_.canary_every_ms;
  }

  // Times the canary under the job's protocol (gate included) and keeps
  // the reading; a failed canary leaves no reading, so the next job tries
  // again and nothing stale is attached.
  void TimeCanary(const ProtocolOptions& protocol) {
    BenchmarkRequest request = *canary_;
    if (request.threads() <= 0) request.set_threads(options_.device.threads());
    ProtocolOptions quiet = protocol;
    quiet.progress = nullptr;
    BenchmarkResult r = MeasureBenchmark(*runtime_, request, options_.device, quiet);
    last_canary_.reset();
    if (r.failure() != FAILURE_NONE || r.summaries_size() == 0) {
      Log(absl::StrCat("canary failed: ", r.failure_message()));
      return;
    }
    CanaryReading reading;
    *reading.mutable_request() = request;
    reading.set_measured_unix_ms(SystemClock().NowMs());
    reading.set_ttft_ms(r.summaries(0).ttft_median_ms());
    reading.set_decode_ms_per_token(r.summaries(0).decode_median_ms_per_token());
    Log(absl::StrFormat("canary: TTFT %.2f ms, decode %.3f ms/token", reading.ttft_ms(),
                        reading.decode_ms_per_token()));
    last_canary_ = std::move(reading);
    jobs_since_canary_ = 0;
    retime_canary_ = false;
  }

  // Retries transient failures (a restarting coordinator) until the report
  // is accepted, rejected, or the agent is stopped.
  void Report(const LeaseJobResponse& lease, const BenchmarkResult& result,
              const std::atomic<bool>& stop) {
    ReportResultRequest req;
    req.set_job_id(lease.job_id());
    req.set_lease_id(lease.lease_id());
    *req.mutable_result() = result;
    while (!stop.load()) {
      req.set_agent_id(agent_id_);
      ReportResultResponse resp;
      grpc::ClientContext ctx;
      Authorize(ctx);
      ctx.set_deadline(Deadline(options_.rpc_deadline_ms));
      grpc::Status s = stub_->ReportResult(&ctx, req, &resp);
      if (s.ok() && resp.requeued_for_drift()) {
        backoff_ms_ = 0;
        Log(
            absl::StrFormat("job %s: canary at %.2fx TTFT, %.2fx decode of baseline: the job went "
                            "back to the queue; resting %d ms, then re-timing the canary",
                            lease.job_id(), resp.canary().ttft_ratio(),
                            resp.canary().decode_ratio(), options_.drift_cooldown_ms));
        retime_canary_ = true;
        Rest(stop, options_.drift_cooldown_ms);
        return;
      }
      if (s.ok()) {
        backoff_ms_ = 0;
        Log(absl::StrCat("job ", lease.job_id(), ": reported",
                         result.failure() == FAILURE_NONE
                             ? ""
                             : absl::StrCat(" failure ", FailureKind_Name(result.failure()), ": ",
                                            result.failure_message())));
        return;
      }
      if (!Transient(s)) {
        Log(absl::StrCat("job ", lease.job_id(), ": report rejected: ", s.error_message()));
        return;
      }
      Backoff(stop, absl::StrCat("report: ", s.error_message()));
    }
  }

  void Log(const std::string& line) {
    if (options_.log) options_.log(absl::StrCat(options_.device.name(), ": ", line));
  }

  AgentOptions options_;
  std::unique_ptr<Runtime> runtime_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<AgentService::Stub> stub_;
  absl::Status channel_error_;  // bad TLS files: Run returns it
  std::string agent_id_;
  std::string session_key_;  // secret; from Register
  int64_t heartbeat_ms_ = 2000;
  int64_t backoff_ms_ = 0;
  std::mt19937_64 rng_;
  std::optional<BenchmarkRequest> canary_;  // from Register; none: no drift check
  std::optional<CanaryReading> last_canary_;
  int jobs_since_canary_ = 0;
  bool retime_canary_ = false;  // a job was re-queued for drift
  MemoryProbeHistory memory_history_;
};

Agent::Agent(AgentOptions options, std::unique_ptr<Runtime> runtime)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(runtime))) {}
Agent::~Agent() = default;

absl::Status Agent::Run(const std::atomic<bool>& stop) { return impl_->Run(stop, &jobs_done_); }

}  // namespace hilnas
