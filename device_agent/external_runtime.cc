#include "device_agent/external_runtime.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "search_space/arch.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

std::string Tail(const std::string& s, size_t n = 400) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case BF16:
      return "bf16";
    case FP16:
      return "fp16";
    case INT8_DYNAMIC:
      return "int8";
    default:
      return "fp32";
  }
}

struct CommandOutput {
  std::string out, err;
};

absl::StatusOr<CommandOutput> RunCapturing(const std::string& command, double timeout_s) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return absl::InternalError("pipe() failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork() failed");
  if (pid == 0) {
    setpgid(0, 0);  // own process group, so a timeout kills adb and its children too
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  CommandOutput result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  if (timed_out) kill(-pid, SIGKILL);
  for (pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("command timed out after ", timeout_s, " s: ", command));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return absl::InternalError(
        absl::StrCat("command exited with ", code, ": ", command, "\nstderr: ", Tail(result.err)));
  }
  return result;
}

class ExternalModel : public PreparedModel {
 public:
  ExternalModel(const ExternalRuntimeOptions& o, std::string model, int threads)
      : options_(o), model_(std::move(model)), threads_(threads) {}

  absl::StatusOr<RunTiming> Run(int prompt_tokens, int decode_tokens) override {
    HILNAS_ASSIGN_OR_RETURN(
        std::string cmd,
        ExpandCommand(options_.bench_command, {{"model", model_},
                                               {"prompt_tokens", std::to_string(prompt_tokens)},
                                               {"decode_tokens", std::to_string(decode_tokens)},
                                               {"threads", std::to_string(threads_)}}));
    HILNAS_ASSIGN_OR_RETURN(CommandOutput out, RunCapturing(cmd, options_.timeout_s));
    if (options_.format == ExternalFormat::kLlamaBench) {
      return ParseLlamaBenchOutput(out.out, prompt_tokens, decode_tokens);
    }
    return ParseExecuTorchOutput(out.out + "\n" + out.err);
  }

 private:
  ExternalRuntimeOptions options_;  // a copy: a model may outlive its runtime
  std::string model_;
  int threads_;
};

class ExternalRuntime : public Runtime {
 public:
  explicit ExternalRuntime(ExternalRuntimeOptions o) : options_(std::move(o)) {}
  std::string name() const override { return options_.name; }
  std::string version() const override { return options_.version; }

  absl::StatusOr<std::unique_ptr<PreparedModel>> Prepare(const BenchmarkRequest& req) override {
    if (options_.bench_command.empty()) {
      return absl::FailedPreconditionError("external runtime: no bench command configured");
    }
    std::string config, checkpoint = req.checkpoint_dir(), tag;
    if (req.has_arch()) {
      HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromProto(req.arch()));
      tag = absl::StrCat(std::hash<std::string>()(req.arch().SerializeAsString()));
      const std::string dir = absl::StrCat(options_.work_dir, "/", tag);
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
      config = dir + "/config.json";
      HILNAS_RETURN_IF_ERROR(WriteConfigJson(arch, config));
    } else {
      config = checkpoint + "/config.json";
      tag = absl::StrCat(std::hash<std::string>()(checkpoint));
    }
    std::string model = checkpoint;
    if (!options_.export_command.empty()) {
      model = absl::StrCat(options_.work_dir, "/", tag, "/model.", PrecisionName(req.precision()));
      HILNAS_ASSIGN_OR_RETURN(
          std::string cmd,
          ExpandCommand(options_.export_command, {{"config", config},
                                                  {"checkpoint", checkpoint},
                                                  {"model", model},
                                                  {"precision", PrecisionName(req.precision())}}));
      absl::StatusOr<CommandOutput> out = RunCapturing(cmd, options_.timeout_s);
      if (!out.ok()) {
        // An export that cannot lower the architecture is an unsupported arch.
        return absl::UnimplementedError(absl::StrCat("export failed: ", out.status().message()));
      }
    } else if (model.empty()) {
      return absl::UnimplementedError(
          "external runtime without an export command can only run checkpoint_dir requests");
    }
    return std::unique_ptr<PreparedModel>(
        new ExternalModel(options_, model, req.threads() > 0 ? req.threads() : 4));
  }

 private:
  ExternalRuntimeOptions options_;
};

double Number(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : -1.0;
}

}  // namespace

absl::StatusOr<ExternalFormat> ParseExternalFormat(const std::string& name) {
  if (name == "llama-bench") return ExternalFormat::kLlamaBench;
  if (name == "executorch") return ExternalFormat::kExecuTorch;
  return absl::InvalidArgumentError(
      absl::StrCat("output format \"", name, "\" is not llama-bench or executorch"));
}

std::unique_ptr<Runtime> NewExternalRuntime(const ExternalRuntimeOptions& options) {
  return std::make_unique<ExternalRuntime>(options);
}

absl::StatusOr<std::string> ExpandCommand(const std::string& tmpl,
                                          const std::map<std::string, std::string>& values) {
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl[i] != '{') {
      out += tmpl[i++];
      continue;
    }
    const size_t close = tmpl.find('}', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("command \"", tmpl, "\": unclosed {"));
    }
    const std::string key = tmpl.substr(i + 1, close - i - 1);
    auto it = values.find(key);
    if (it == values.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("command \"", tmpl, "\": unknown placeholder {", key, "}"));
    }
    out += it->second;
    i = close + 1;
  }
  return out;
}

absl::StatusOr<std::string> RunShellCommand(const std::string& command, double timeout_s) {
  HILNAS_ASSIGN_OR_RETURN(CommandOutput out, RunCapturing(command, timeout_s));
  return out.out;
}

absl::StatusOr<RunTiming> ParseLlamaBenchOutput(const std::string& output, int prompt_tokens,
                                                int decode_tokens) {
  std::vector<nlohmann::json> tests;
  const nlohmann::json whole = nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
  if (whole.is_array()) {
    tests.assign(whole.begin(), whole.end());
  } else {  // jsonl: one object per line
    for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipWhitespace())) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object()) tests.push_back(std::move(j));
    }
  }
  if (tests.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama-bench output is neither a JSON array nor JSON lines: ", Tail(output)));
  }
  double pp_ns = -1, tg_ns = -1;
  for (const nlohmann::json& t : tests) {
    const double n_prompt = Number(t, "n_prompt"), n_gen = Number(t, "n_gen");
    const double avg_ns = Number(t, "avg_ns");
    if (n_prompt < 0 || n_gen < 0 || avg_ns < 0) {
      return absl::InvalidArgumentError(
          "llama-bench output: a test lacks n_prompt, n_gen or avg_ns");
    }
    if (n_prompt > 0 && n_gen == 0) {
      if (n_prompt != prompt_tokens) {
        return absl::InvalidArgumentError(absl::StrCat("llama-bench output: n_prompt ", n_prompt,
                                                       " but ", prompt_tokens, " were asked for"));
      }
      pp_ns = avg_ns;
    } else if (n_gen > 0 && n_prompt == 0) {
      if (n_gen != decode_tokens) {
        return absl::InvalidArgumentError(absl::StrCat("llama-bench output: n_gen ", n_gen, " but ",
                                                       decode_tokens, " were asked for"));
      }
      tg_ns = avg_ns / n_gen;
    }
  }
  if (pp_ns < 0) {
    return absl::InvalidArgumentError("llama-bench output has no prompt-processing (pp) test");
  }
  if (decode_tokens > 0 && tg_ns < 0) {
    return absl::InvalidArgumentError("llama-bench output has no generation (tg) test");
  }
  RunTiming r;
  r.ttft_ms = pp_ns / 1e6;
  r.decode_ms_per_token = decode_tokens > 0 ? tg_ns / 1e6 : 0.0;
  r.decode_tokens = decode_tokens;
  return r;
}

absl::StatusOr<RunTiming> ParseExecuTorchOutput(const std::string& output) {
  const std::string kTag = "PyTorchObserver ";
  const size_t at = output.rfind(kTag);
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExecuTorch output has no \"PyTorchObserver\" stats line: ", Tail(output)));
  }
  const size_t end = output.find('\n', at);
  const std::string json = output.substr(
      at + kTag.size(), end == std::string::npos ? std::string::npos : end - at - kTag.size());
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("ExecuTorch stats line is not JSON: ", json));
  }
  const double start = Number(j, "inference_start_ms"), first = Number(j, "first_token_ms"),
               end_ms = Number(j, "inference_end_ms"), generated = Number(j, "generated_tokens");
  double scale = Number(j, "SCALING_FACTOR_UNITS_PER_SECOND");
  if (scale <= 0) scale = 1000;
  if (start < 0 || first < start || end_ms < first || generated < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ExecuTorch stats line lacks consistent inference_start_ms <= first_token_ms <= "
        "inference_end_ms and generated_tokens >= 1: ",
        json));
  }
  const double to_ms = 1000.0 / scale;
  RunTiming r;
  r.ttft_ms = (first - start) * to_ms;
  r.decode_tokens = static_cast<int>(generated) - 1;
  r.decode_ms_per_token = r.decode_tokens > 0 ? (end_ms - first) * to_ms / r.decode_tokens : 0.0;
  return r;
}

}  // namespace hilnas
