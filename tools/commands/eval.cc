// `hilnas eval`: a checkpoint's loss, perplexity and speed on a token file
// (all of it by default, or its tail with --heldout) or on a text file read
// with the checkpoint's own tokenizer; or its accuracy on downstream tasks
// (--task CONFIG..., lm-evaluation-harness semantics, quality/task_eval.h).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "quality/task_eval.h"
#include "quality/tasks.h"
#include "quality/tokens.h"
#include "quality/train_util.h"
#include "tokenizer/tokenizer.h"
#include "model/checkpoint.h"
#include "quality/trainer.h"
#include "tools/commands/commands.h"
#include "tools/commands/eval.h"
#include "tools/commands/corpus.h"
#include "tools/common.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

struct EvalOptions {
  std::string ckpt;
  std::string tokens;
  std::string text;     // a UTF-8 file, encoded with the checkpoint's tokenizer
  int64_t seq_len = 128;
  int64_t windows = 0;  // 0: every window
  double heldout = 0;   // 0: the whole file; F: its last F (the trainer's split)
  int32_t threads = 0;
  std::string weight_dtype = "f32";
  std::string kv_dtype = "f32";
  // Tasks.
  std::vector<std::string> tasks;
  int64_t limit = 0;
  bool json = false;
  std::string samples_out;
  bool add_bos = false;
  int64_t max_length = 2048;
};

// hilnas eval --ckpt DIR --task CONFIG... : a table (task, metric, value,
// stderr, n) or --json; --samples-out writes every document's scores.
absl::Status RunTasks(const EvalOptions& cl) {
  TaskScoring ts;
  ts.ckpt = cl.ckpt;
  ts.limit = cl.limit;
  ts.add_bos = cl.add_bos;
  ts.max_length = cl.max_length;
  ts.weight_dtype = cl.weight_dtype;
  ts.kv_dtype = cl.kv_dtype;
  ts.threads = cl.threads;
  // Every config and its data are read before the first is scored, so a
  // typo in the last task fails in a second, not after an hour.
  HILNAS_ASSIGN_OR_RETURN(const std::vector<Task> tasks, LoadTasks(cl.tasks, cl.limit));
  nlohmann::json samples = nlohmann::json::object();
  HILNAS_ASSIGN_OR_RETURN(const nlohmann::json out,
                          ScoreTasks(ts, tasks, cl.samples_out.empty() ? nullptr : &samples));
  if (!cl.samples_out.empty()) {
    HILNAS_RETURN_IF_ERROR(WriteFileAtomically(cl.samples_out, samples.dump(1) + "\n"));
  }
  if (cl.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return absl::OkStatus();
  }
  std::printf("%s (%s weights, %s KV cache)\n%s", cl.ckpt.c_str(), cl.weight_dtype.c_str(),
              cl.kv_dtype.c_str(), TaskScoreTable(out).c_str());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Task>> LoadTasks(const std::vector<std::string>& paths, int64_t limit) {
  std::vector<Task> tasks;
  for (const std::string& path : paths) {
    HILNAS_ASSIGN_OR_RETURN(Task t, LoadTask(path, limit));
    tasks.push_back(std::move(t));
  }
  return tasks;
}

absl::StatusOr<nlohmann::json> ScoreTasks(const TaskScoring& ts, const std::vector<Task>& tasks,
                                          nlohmann::json* samples) {
  HILNAS_ASSIGN_OR_RETURN(Decoder model,
                          LoadForCommand(ts.ckpt, ts.threads, ts.max_length, ts.weight_dtype));
  HILNAS_RETURN_IF_ERROR(model.SetKvDtype(ts.kv_dtype));
  HILNAS_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromDir(ts.ckpt));
  if (tok.vocab_size() > model.arch().vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        ts.ckpt, ": its tokenizer has ", tok.vocab_size(), " ids but the model only ",
        model.arch().vocab_size));
  }
  TaskEvalOptions o;
  o.add_bos = ts.add_bos;
  o.max_length = ts.max_length;
  nlohmann::json out = nlohmann::json::array();
  for (const Task& t : tasks) {
    std::fprintf(stderr, "%s: %zu documents (%s, %d-shot)\n", t.config.name().c_str(), t.items.size(),
                 t.config.kind() == TaskConfig::GENERATE_UNTIL ? "generation" : "multiple choice",
                 t.config.num_fewshot());
    int last_percent = -1;
    o.progress = [&](int64_t done, int64_t total) {
      const int percent = static_cast<int>(100 * done / std::max<int64_t>(total, 1));
      if (percent / 10 != last_percent / 10 || done == total) {
        std::fprintf(stderr, "  %s %3d%% (%lld/%lld)\n", t.config.name().c_str(), percent,
                     static_cast<long long>(done), static_cast<long long>(total));
        last_percent = percent;
      }
    };
    HILNAS_ASSIGN_OR_RETURN(TaskResult r, EvaluateTask(model, tok, t, o));
    for (const TaskMetric& m : r.metrics) {
      out.push_back({{"task", r.task}, {"metric", m.name}, {"value", m.value}, {"stderr", m.stderr_},
                     {"n", r.n}, {"num_fewshot", t.config.num_fewshot()}, {"seconds", r.seconds}});
    }
    if (samples == nullptr) continue;
    nlohmann::json list = nlohmann::json::array();
    for (const TaskSample& s : r.samples) {
      nlohmann::json j = {{"line", s.line}, {"correct", s.correct}};
      if (t.config.kind() == TaskConfig::GENERATE_UNTIL) {
        j["generation"] = s.generation;
      } else {
        j["loglikelihoods"] = s.loglikelihoods;
        j["gold"] = s.gold;
        j["pred"] = s.pred;
        j["pred_norm"] = s.pred_norm;
      }
      list.push_back(std::move(j));
    }
    (*samples)[r.task] = std::move(list);
  }
  return out;
}

std::string TaskScoreTable(const nlohmann::json& rows) {
  std::string s = absl::StrFormat("| %-16s | %-11s | %7s | %7s | %6s |\n", "task", "metric", "value",
                                  "stderr", "n");
  s += "|------------------|-------------|---------|---------|--------|\n";
  for (const auto& row : rows) {
    absl::StrAppend(&s, absl::StrFormat("| %-16s | %-11s | %7.4f | %7.4f | %6d |\n",
                                        row["task"].get<std::string>(),
                                        row["metric"].get<std::string>(), row["value"].get<double>(),
                                        row["stderr"].get<double>(), row["n"].get<int64_t>()));
  }
  return s;
}

namespace {

absl::Status RunEval(const EvalOptions& cl) {
  if (!cl.tasks.empty()) return RunTasks(cl);
  // The loss the deployed model has: its matrices stored as they ship.
  HILNAS_ASSIGN_OR_RETURN(Decoder model,
                          LoadForCommand(cl.ckpt, cl.threads, cl.seq_len, cl.weight_dtype));
  HILNAS_RETURN_IF_ERROR(model.SetKvDtype(cl.kv_dtype));
  const Arch& arch = model.arch();
  if (cl.seq_len < 2 || cl.windows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seq-len ", cl.seq_len, " and --windows ", cl.windows, " must be >= 2, 0"));
  }
  HILNAS_RETURN_IF_ERROR(CheckTokenizerMatches(cl.ckpt, cl.tokens));
  // What is scored: the whole token file, its tail (--heldout, the trainer's
  // split), or a text file through the checkpoint's tokenizer.
  std::vector<int32_t> ids;
  std::string source = cl.tokens;
  if (!cl.text.empty()) {
    HILNAS_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromDir(cl.ckpt));
    std::string text;
    HILNAS_RETURN_IF_ERROR(ReadFileToString(cl.text, &text));
    auto encoded = tok.Encode(text, /*add_special_tokens=*/true);
    if (!encoded.ok()) return absl::InvalidArgumentError(absl::StrCat(cl.text, ": ", encoded.status().message()));
    ids = *std::move(encoded);
    source = cl.text;
  } else {
    HILNAS_RETURN_IF_ERROR(CheckTokenizerMatches(cl.ckpt, cl.tokens));
    HILNAS_ASSIGN_OR_RETURN(ids, ReadTokenFile(cl.tokens, arch.vocab_size));
  }
  if (cl.heldout > 0 && cl.heldout < 1) {
    const size_t tail = static_cast<size_t>(cl.heldout * static_cast<double>(ids.size()));
    ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(tail));
  }
  if (static_cast<int64_t>(ids.size()) < cl.seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", ids.size(), " tokens", cl.heldout > 0 && cl.heldout < 1 ? " in the held-out tail" : "",
        " do not fill one window of --seq-len ", cl.seq_len, " + 1"));
  }
  const int64_t windows = static_cast<int64_t>(
      HeldOutOffsets(static_cast<int64_t>(ids.size()), cl.seq_len,
                     cl.windows > 0 ? cl.windows : std::numeric_limits<int64_t>::max())
          .size());
  std::fprintf(stderr, "scoring %lld windows of %lld tokens from %s\n",
               static_cast<long long>(windows), static_cast<long long>(cl.seq_len), source.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  HILNAS_ASSIGN_OR_RETURN(double loss, HeldOutLoss(model, ids, cl.seq_len, windows));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens = static_cast<double>(windows * cl.seq_len);
  const std::string part = cl.heldout > 0 && cl.heldout < 1
                               ? absl::StrFormat("the last %.0f%%", 100 * cl.heldout)
                               : std::string("the whole file");
  std::printf(
      "%s (%s weights, %s KV cache) on %s: held-out loss %.6f nats/token, perplexity %.3f (%lld "
      "windows of %lld tokens from %s; %.0f tokens/s)\n",
      cl.ckpt.c_str(), cl.weight_dtype.c_str(), cl.kv_dtype.c_str(), source.c_str(), loss,
      std::exp(loss), static_cast<long long>(windows), static_cast<long long>(cl.seq_len),
      part.c_str(), tokens / std::max(s, 1e-9));
  return absl::OkStatus();
}

}  // namespace

void AddEvalCommand(Cli& cli) {
  auto [app, o] = cli.Add<EvalOptions>(
      "eval",
      "--ckpt DIR --tokens FILE|--text FILE|--task CONFIG... [--seq-len 128 --windows 0 --heldout 0\n"
      "    --threads T --weight-dtype f32|bf16|f16|q4_0|q8_0 --kv-dtype f32|f16|q8_0\n"
      "    --limit N --json --samples-out FILE --add-bos --max-length 2048]",
      "loss (nats/token), perplexity and tokens/s on a token file or text, with the trainer's "
      "windows; or task accuracy (configs/tasks/, lm-evaluation-harness semantics)",
      [](const EvalOptions& o) { return ExitCode(RunEval(o)); });
  app->add_option("--ckpt", o->ckpt, "the checkpoint")->required();
  auto* input = app->add_option_group("input");
  input->add_option("--tokens", o->tokens, "token file (uint16 ids; *.u32 for uint32; .npy)");
  input->add_option("--text", o->text, "a UTF-8 text file, read with the checkpoint's tokenizer");
  input->add_option("--task", o->tasks,
                    "task configs (textproto over a local JSONL; configs/tasks/ has the paper's nine)");
  input->require_option(1);
  app->add_option("--limit", o->limit, "tasks: score only the first N documents of each")
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--json", o->json, "tasks: the table as JSON");
  app->add_option("--samples-out", o->samples_out,
                  "tasks: write every document's log-likelihoods, prediction and gold (JSON)");
  app->add_flag("--add-bos", o->add_bos,
                "tasks: start every context with BOS (the harness's default is off; Gemma needs it)");
  app->add_option("--max-length", o->max_length,
                  "tasks: the longest context + continuation, truncated from the left")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app->add_option("--seq-len", o->seq_len, "tokens per window");
  app->add_option("--windows", o->windows,
                  "evenly spaced windows to score (0: every window; the trainer uses its eval_windows)");
  app->add_option("--heldout", o->heldout,
                  "score only this tail fraction (the trainer's held-out split); 0 or 1: the whole file")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--weight-dtype", o->weight_dtype,
                  "evaluate with the matrices stored as f32, bf16, f16, q4_0 or q8_0 (the loss "
                  "after quantization)");
  app->add_option("--kv-dtype", o->kv_dtype,
                  "evaluate with the KV cache stored as f32, f16 or q8_0 (every window runs "
                  "through a cache)");
  AddThreadsFlag(app, &o->threads);
  cli.StableTiming(app, &o->threads);
}

}  // namespace hilnas::tools
