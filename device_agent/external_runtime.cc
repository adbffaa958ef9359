#include "device_agent/external_runtime.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/gguf_export.h"
#include "nlohmann/json.hpp"
#include "search_space/arch.h"
#include "util/status_macros.h"
#include "util/subprocess.h"

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
    case Q4_0:
      return "q4_0";
    case Q8_0:
      return "q8_0";
    default:
      return "fp32";
  }
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
                                               {"depth", std::to_string(prompt_tokens)},
                                               {"threads", std::to_string(threads_)}}));
    HILNAS_ASSIGN_OR_RETURN(CommandOutput out, RunCapturing(cmd, options_.timeout_s));
    absl::StatusOr<RunTiming> t = options_.format == ExternalFormat::kLlamaBench
                                      ? ParseLlamaBenchOutput(out.out, prompt_tokens, decode_tokens)
                                      : ParseExecuTorchOutput(out.out + "\n" + out.err);
    // The benchmark process's memory (wait4), not the agent's.
    if (t.ok()) t->process_peak_rss_bytes = out.peak_rss_bytes;
    return t;
  }

 private:
  ExternalRuntimeOptions options_;  // a copy: a model may outlive its runtime
  std::string model_;
  int threads_;
};

// Names, sizes and write times of a file, or of a folder's files (not
// recursive): what tells that an export's input or output changed.
// nullopt when the path cannot be read.
std::optional<std::string> Stamp(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto one = [&](const fs::path& p) -> std::optional<std::string> {
    const uintmax_t size = fs::file_size(p, ec);
    if (ec) return std::nullopt;
    const fs::file_time_type t = fs::last_write_time(p, ec);
    if (ec) return std::nullopt;
    return absl::StrCat(p.filename().string(), ":", size, ":", t.time_since_epoch().count());
  };
  if (!fs::is_directory(path, ec)) return one(path);
  std::vector<std::string> parts;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    std::optional<std::string> s = one(it->path());
    if (!s) return std::nullopt;
    parts.push_back(*std::move(s));
  }
  if (ec) return std::nullopt;
  std::sort(parts.begin(), parts.end());
  return absl::StrJoin(parts, ";");
}

class ExternalRuntime : public Runtime {
 private:
  // The last export: a request for the same model at another thread count
  // (the runtime comparison's scaling rounds prepare one model per count)
  // reuses its file, while neither the export's input nor its output has
  // changed since, instead of writing the same file again.
  struct LastExport {
    std::string model;
    std::string source_stamp;  // the checkpoint's files; "" for an architecture
    std::string model_stamp;   // the exported file, just after the export
  };

  absl::StatusOr<std::string> Export(const BenchmarkRequest& req, const std::string& config,
                                     const std::string& checkpoint, const std::string& tag) {
    const std::string model =
        absl::StrCat(options_.work_dir, "/", tag, "/model.", PrecisionName(req.precision()),
                     options_.export_command == kBuiltinGgufExport ? ".gguf" : "");
    std::optional<std::string> source =
        req.has_arch() ? std::optional<std::string>("") : Stamp(checkpoint);
    if (last_ && source && last_->model == model && last_->source_stamp == *source &&
        Stamp(model) == last_->model_stamp) {
      return model;
    }
    last_.reset();
    const std::string dir = std::filesystem::path(model).parent_path().string();
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
    if (options_.export_command == kBuiltinGgufExport) {
      HILNAS_RETURN_IF_ERROR(BuiltinGgufExport(req, checkpoint, model));
    } else {
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
    }
    if (std::optional<std::string> written = Stamp(model); written && source) {
      last_ = LastExport{model, *source, *written};
    }
    return model;
  }

  // hilnas's own GGUF export (model/gguf_export.h): random weights for an
  // architecture (timing does not depend on their values), or the request's
  // checkpoint, written as llama.cpp's f32 or f16 GGUF.
  absl::Status BuiltinGgufExport(const BenchmarkRequest& req, const std::string& checkpoint,
                                 const std::string& model) {
    GgufExportOptions o;
    if (req.precision() == FP16) {
      o.dtype = GgmlType::kF16;
    } else if (req.precision() == Q4_0) {
      o.dtype = GgmlType::kQ4_0;
    } else if (req.precision() == Q8_0) {
      o.dtype = GgmlType::kQ8_0;
    } else if (req.precision() != FP32 && req.precision() != PRECISION_UNSPECIFIED) {
      return absl::UnimplementedError(
          absl::StrCat("built-in GGUF export writes fp32, fp16, q4_0 or q8_0, not ",
                       PrecisionName(req.precision())));
    }
    try {
      absl::Status s;
      if (req.has_arch()) {
        HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromProto(req.arch()));
        // Refused before any weights are made: what llama.cpp cannot run.
        if (absl::StatusOr<std::string> layout = GgufLayoutFor(arch); !layout.ok()) {
          return absl::UnimplementedError(absl::StrCat("llama.cpp: ", layout.status().message()));
        }
        // Written straight from the model in memory, no checkpoint round trip.
        HILNAS_ASSIGN_OR_RETURN(Decoder d, Decoder::Create(arch, /*seed=*/0));
        s = ExportGguf(d, model, o);
      } else {
        s = ExportGguf(checkpoint, model, o);
      }
      if (absl::IsInvalidArgument(s)) return absl::UnimplementedError(s.message());
      return s;
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("built-in GGUF export: ", e.what()));
    }
  }

 public:
  explicit ExternalRuntime(ExternalRuntimeOptions o) : options_(std::move(o)) {}
  std::string name() const override { return options_.name; }
  std::string version() const override { return options_.version; }
  bool runs_in_process() const override { return false; }

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
      config = ConfigFileName(dir);
      HILNAS_RETURN_IF_ERROR(WriteConfigJson(arch, config));
    } else {
      config = ConfigFileName(checkpoint);
      tag = absl::StrCat(std::hash<std::string>()(checkpoint));
    }
    std::string model = checkpoint;
    if (!options_.export_command.empty()) {
      HILNAS_ASSIGN_OR_RETURN(model, Export(req, config, checkpoint, tag));
    } else if (model.empty()) {
      return absl::UnimplementedError(
          "external runtime without an export command can only run checkpoint_dir requests");
    }
    return std::unique_ptr<PreparedModel>(
        new ExternalModel(options_, model, req.threads() > 0 ? req.threads() : 4));
  }

 private:
  ExternalRuntimeOptions options_;
  std::optional<LastExport> last_;
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
  // Depths exist when any test reports one; decode is then wanted at the prompt's.
  bool has_depth = false;
  for (const nlohmann::json& t : tests) has_depth = has_depth || t.contains("n_depth");
  const double want_depth = has_depth ? prompt_tokens : 0;
  double pp_ns = -1, tg_ns = -1;
  std::vector<double> gen_depths;
  std::string version;
  for (const nlohmann::json& t : tests) {
    const double n_prompt = Number(t, "n_prompt"), n_gen = Number(t, "n_gen");
    const double avg_ns = Number(t, "avg_ns");
    const double depth = t.contains("n_depth") ? Number(t, "n_depth") : 0;
    if (n_prompt < 0 || n_gen < 0 || avg_ns < 0 || depth < 0) {
      return absl::InvalidArgumentError(
          "llama-bench output: a test lacks n_prompt, n_gen or avg_ns");
    }
    if (version.empty() && t.contains("build_number") && t["build_number"].is_number()) {
      version = absl::StrCat("b", t["build_number"].get<int64_t>());
      if (t.contains("build_commit") && t["build_commit"].is_string()) {
        absl::StrAppend(&version, " (", t["build_commit"].get<std::string>(), ")");
      }
    }
    if (n_prompt > 0 && n_gen == 0) {
      if (n_prompt != prompt_tokens) {
        return absl::InvalidArgumentError(absl::StrCat("llama-bench output: n_prompt ", n_prompt,
                                                       " but ", prompt_tokens, " were asked for"));
      }
      if (depth == 0) pp_ns = avg_ns;  // TTFT: the prompt on an empty cache
    } else if (n_gen > 0 && n_prompt == 0) {
      if (n_gen != decode_tokens) {
        return absl::InvalidArgumentError(absl::StrCat("llama-bench output: n_gen ", n_gen, " but ",
                                                       decode_tokens, " were asked for"));
      }
      gen_depths.push_back(depth);
      if (depth == want_depth) tg_ns = avg_ns / n_gen;
    }
  }
  if (pp_ns < 0) {
    return absl::InvalidArgumentError(
        "llama-bench output has no prompt-processing (pp) test at depth 0");
  }
  if (decode_tokens > 0 && tg_ns < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama-bench output has no generation (tg) test at depth ", want_depth,
        gen_depths.empty() ? std::string()
                           : absl::StrCat(" (only at depth ", absl::StrJoin(gen_depths, ","), ")"),
        ": run it with -d 0,{depth}"));
  }
  RunTiming r;
  r.ttft_ms = pp_ns / 1e6;
  r.decode_ms_per_token = decode_tokens > 0 ? tg_ns / 1e6 : 0.0;
  r.decode_tokens = decode_tokens;
  r.reported_version = version;
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
