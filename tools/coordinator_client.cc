// The user side of the coordinator's gRPC API: stubs, benchmark jobs,
// errors (coordinator_client.h).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/coordinator_client.h"

namespace hilnas::tools {

std::chrono::system_clock::time_point In(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

void AddMeasurementFlags(CLI::App* app, MeasurementFlags* flags) {
  app->add_option("--prompt-lengths", flags->prompt_lengths,
                  "prompt lengths in tokens, comma-separated (MobileLLM-Flash Sec. 4.2.2)");
  app->add_option("--decode-tokens", flags->decode_tokens, "tokens decoded after each prompt")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--repeats", flags->repeats, "minimum timed runs per prompt length")
      ->check(CLI::Range(1, 1000));
  app->add_option("--max-repeats", flags->max_repeats,
                  "cap on timed runs while the spread stays high")
      ->check(CLI::Range(1, 1000));
  app->add_option("--max-spread", flags->max_spread, "stop repeating once MAD/median is below this")
      ->check(CLI::Range(0.0, 10.0));
  app->add_option("--warmups", flags->warmups, "untimed warm-up runs per prompt length")
      ->check(CLI::Range(0, 100));
  app->add_option("--precision", flags->precision, "fp32 | bf16 | fp16 | int8 | q4_0 | q8_0");
  app->add_option("--kv-dtype", flags->kv_dtype,
                  "KV cache storage on the agent: f32 | f16 | q8_0 (docs/precision.md)");
  app->add_option("--prefill-chunk", flags->prefill_chunk,
                  "prefill chunk in tokens (MobileLLM-Flash Sec. 4.2.2)");
  app->add_option("--threads", flags->threads, "threads on the agent; 0 = the agent's own count")
      ->check(CLI::Range(0, 1024));
  app->add_option("--seed", flags->seed, "random seed of the weights and prompts");
  CLI::Option* device = app->add_option("--device", flags->device, "run on this agent only");
  app->add_option("--pool", flags->pool, "run on an agent of this pool")->excludes(device);
}

namespace {

absl::StatusOr<Precision> PrecisionFromFlag(const std::string& p) {
  if (p == "fp32" || p == "f32") return FP32;
  if (p == "bf16") return BF16;
  if (p == "fp16" || p == "f16") return FP16;
  if (p == "int8") return INT8_DYNAMIC;
  if (p == "q4_0") return Q4_0;
  if (p == "q8_0") return Q8_0;
  return absl::InvalidArgumentError(
      absl::StrCat("--precision ", p, " is not one of fp32, bf16, fp16, int8, q4_0, q8_0"));
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& s, const std::string& what, bool client_uses_tls) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(s.error_code()),
      absl::StrCat(what, ": ", s.error_message(), ConnectionHint(s, client_uses_tls)));
}

absl::Status CoordinatorError(const grpc::Status& s, const ClientFlags& cl) {
  return FromGrpc(s, absl::StrCat("coordinator ", CoordinatorAddress(cl)),
                  !ClientTlsOf(cl).ca_file.empty());
}

absl::StatusOr<std::unique_ptr<UserService::Stub>> UserStub(const ClientFlags& cl) {
  auto metadata = std::make_shared<CallMetadata>();
  if (const std::string token = UserTokenOf(cl.user_token); !token.empty()) {
    metadata->Set(kAuthorizationKey, kBearerPrefix + token);
  }
  // A client certificate, when given, is presented as agents present
  // theirs: a coordinator with mutual TLS asks every connection for one.
  const ClientTls tls = ClientTlsOf(cl);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(CoordinatorAddress(cl), tls, std::move(metadata));
  if (!channel.ok()) return channel.status();
  return UserService::NewStub(*channel);
}

absl::StatusOr<BenchmarkRequest> MeasurementOf(const MeasurementFlags& cl) {
  BenchmarkRequest r;
  for (absl::string_view p : absl::StrSplit(cl.prompt_lengths, ',', absl::SkipWhitespace())) {
    int v = 0;
    if (!absl::SimpleAtoi(p, &v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-lengths: \"", p, "\" is not a positive integer"));
    }
    r.add_prompt_lengths(v);
  }
  r.set_decode_tokens(cl.decode_tokens);
  r.set_prefill_chunk(static_cast<int>(cl.prefill_chunk));
  r.set_threads(cl.threads);
  r.set_warmup_runs(cl.warmups);
  r.set_repeats(cl.repeats);
  r.set_max_repeats(cl.max_repeats);
  r.set_max_rel_spread(cl.max_spread);
  r.set_seed(cl.seed);
  absl::StatusOr<Precision> p = PrecisionFromFlag(cl.precision);
  if (!p.ok()) return p.status();
  r.set_precision(*p);
  if (cl.kv_dtype != "f32") r.set_kv_dtype(cl.kv_dtype);  // checked with the rest of the request
  return r;
}

absl::StatusOr<std::string> SubmitBenchmark(const ClientFlags& client, const MeasurementFlags& cl,
                                            UserService::Stub& stub,
                                            const BenchmarkRequest& request) {
  SubmitBenchmarkRequest submit;
  *submit.mutable_request() = request;
  submit.set_device(cl.device);
  submit.set_pool(cl.pool);
  SubmitBenchmarkResponse submitted;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(10'000));
  grpc::Status s = stub.SubmitBenchmark(&ctx, submit, &submitted);
  if (!s.ok()) {
    return CoordinatorError(s, client);
  }
  return submitted.job_id();
}

absl::StatusOr<GetJobResponse> WaitForJob(UserService::Stub& stub, const std::string& job_id,
                                          int64_t timeout_s,
                                          const std::function<void(JobState)>& on_state) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  JobState last = JOB_STATE_UNSPECIFIED;
  while (timeout_s == 0 || std::chrono::steady_clock::now() < give_up) {
    GetJobRequest get;
    get.set_job_id(job_id);
    get.set_wait_ms(10'000);
    GetJobResponse job;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(20'000));
    grpc::Status s = stub.GetJob(&ctx, get, &job);
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        s.error_code() == grpc::StatusCode::NOT_FOUND ||
        s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return FromGrpc(s, absl::StrCat("job ", job_id));  // retrying cannot help
    }
    if (!s.ok()) {
      std::fprintf(stderr, "waiting for job %s: %s; retrying\n", job_id.c_str(),
                   s.error_message().c_str());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    if (job.state() != last) {
      if (on_state) on_state(job.state());
      last = job.state();
    }
    if (job.state() == JOB_DONE || job.state() == JOB_FAILED) return job;
  }
  return absl::DeadlineExceededError(
      absl::StrCat("job ", job_id, " not finished after ", timeout_s,
                   " s; it stays queued: ask again with the job id"));
}

}  // namespace hilnas::tools
