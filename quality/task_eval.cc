#include "quality/task_eval.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "model/generate.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

// One (context, continuation) pair, tokenized.
struct Request {
  size_t item = 0, choice = 0;
  std::vector<int64_t> input;  // what the model reads (context + continuation, minus the last id)
  int64_t continuation = 0;    // how many of the last positions score the continuation
  std::vector<int64_t> targets;
};

// Python's str.rstrip() count of trailing whitespace (ASCII).
size_t TrailingSpaces(const std::string& s) {
  size_t n = 0;
  while (n < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[s.size() - 1 - n]))) ++n;
  return n;
}

absl::StatusOr<std::vector<int64_t>> Encode(const tokenizer::Tokenizer& tok, const std::string& text,
                                            bool add_bos) {
  auto ids = tok.Encode(text, /*add_special_tokens=*/false);
  if (!ids.ok()) return ids.status();
  std::vector<int64_t> out;
  out.reserve(ids->size() + 1);
  if (add_bos && tok.bos_id()) out.push_back(*tok.bos_id());
  out.insert(out.end(), ids->begin(), ids->end());
  return out;
}

// The harness's HFLM._encode_pair plus the left truncation of
// _loglikelihood_tokens.
absl::StatusOr<Request> Tokenize(const tokenizer::Tokenizer& tok, std::string context,
                                 std::string continuation, const TaskEvalOptions& o) {
  const size_t n = TrailingSpaces(context);
  if (n > 0) {
    continuation = context.substr(context.size() - n) + continuation;
    context.resize(context.size() - n);
  }
  std::vector<int64_t> ctx, cont;
  if (context.empty() && !o.add_bos) {
    auto prefix = tok.bos_id() ? tok.bos_id() : tok.eos_id();
    if (!prefix) return absl::InvalidArgumentError("an empty context needs a BOS or EOS token to start from");
    ctx = {*prefix};
    HILNAS_ASSIGN_OR_RETURN(cont, Encode(tok, continuation, false));
  } else {
    HILNAS_ASSIGN_OR_RETURN(std::vector<int64_t> whole, Encode(tok, context + continuation, o.add_bos));
    HILNAS_ASSIGN_OR_RETURN(ctx, Encode(tok, context, o.add_bos));
    if (whole.size() < ctx.size()) whole.resize(ctx.size());
    cont.assign(whole.begin() + static_cast<std::ptrdiff_t>(ctx.size()), whole.end());
  }
  if (cont.empty()) return absl::InvalidArgumentError("the continuation encodes to no tokens");
  std::vector<int64_t> all = ctx;
  all.insert(all.end(), cont.begin(), cont.end());
  const int64_t keep = std::min<int64_t>(static_cast<int64_t>(all.size()), o.max_length + 1);
  all.erase(all.begin(), all.end() - keep);
  Request r;
  r.continuation = std::min<int64_t>(static_cast<int64_t>(cont.size()), keep - 1);
  r.targets.assign(all.end() - r.continuation, all.end());
  all.pop_back();
  r.input = std::move(all);
  return r;
}

torch::Tensor Logits(Decoder& model, const torch::Tensor& tokens) {
  if (std::strcmp(model.kv_dtype(), "f32") == 0) return model.Forward(tokens).to(torch::kFloat);
  // A reduced-precision KV cache: the prompt runs through one, as deployed.
  KvCache cache = model.NewCache(tokens.size(0), tokens.size(1));
  return model.ForwardCached(tokens, cache, /*last_only=*/false).to(torch::kFloat);
}

absl::Status ScoreChoices(Decoder& model, const tokenizer::Tokenizer& tok, const Task& task,
                          const TaskEvalOptions& o, TaskResult* result) {
  std::vector<Request> requests;
  for (size_t i = 0; i < task.items.size(); ++i) {
    const TaskItem& item = task.items[i];
    for (size_t j = 0; j < item.contexts.size(); ++j) {
      auto r = Tokenize(tok, item.contexts[j], item.continuations[j], o);
      if (!r.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(task.data_path, ":", item.line, ": choice ", j, ": ", r.status().message()));
      }
      r->item = i;
      r->choice = j;
      requests.push_back(*std::move(r));
    }
  }
  for (size_t i = 0; i < task.items.size(); ++i) {
    result->samples[i].loglikelihoods.assign(task.items[i].contexts.size(), 0.0);
  }
  // Longest first, so each padded batch wastes little.
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].input.size() > requests[b].input.size();
  });
  const int64_t vocab = model.arch().vocab_size;
  size_t done = 0;
  torch::NoGradGuard no_grad;
  model.module().eval();
  while (done < order.size()) {
    const int64_t len = static_cast<int64_t>(requests[order[done]].input.size());
    const int64_t per_row = std::max<int64_t>(1, len * vocab * 4);
    const size_t batch = static_cast<size_t>(std::clamp<int64_t>(o.max_batch_bytes / per_row, 1, 64));
    const size_t end = std::min(order.size(), done + batch);
    torch::Tensor tokens = torch::zeros({static_cast<int64_t>(end - done), len}, torch::kLong);
    auto acc = tokens.accessor<int64_t, 2>();
    for (size_t b = done; b < end; ++b) {
      const Request& r = requests[order[b]];
      for (size_t t = 0; t < r.input.size(); ++t) acc[b - done][t] = r.input[t];
    }
    // Right padding: causal attention keeps every real position's logits
    // as they would be alone.
    torch::Tensor logp = torch::log_softmax(Logits(model, tokens), -1);
    for (size_t b = done; b < end; ++b) {
      const Request& r = requests[order[b]];
      const int64_t n = static_cast<int64_t>(r.input.size());
      torch::Tensor rows = logp[static_cast<int64_t>(b - done)].narrow(0, n - r.continuation, r.continuation);
      torch::Tensor targets = torch::tensor(r.targets, torch::kLong).unsqueeze(1);
      const double ll = rows.gather(1, targets).to(torch::kDouble).sum().item<double>();
      result->samples[r.item].loglikelihoods[r.choice] = ll;
    }
    done = end;
    if (o.progress) o.progress(static_cast<int64_t>(done), static_cast<int64_t>(order.size()));
  }
  std::vector<double> acc_values, norm_values;
  for (size_t i = 0; i < task.items.size(); ++i) {
    TaskSample& s = result->samples[i];
    const TaskItem& item = task.items[i];
    int best = 0, best_norm = 0;
    double best_norm_value = 0;
    for (size_t j = 0; j < s.loglikelihoods.size(); ++j) {
      // The harness's len(choice): characters (UTF-8 lead bytes counted).
      int64_t chars = 0;
      for (unsigned char ch : item.choice_texts[j]) chars += (ch & 0xC0) != 0x80;
      const double norm = s.loglikelihoods[j] / static_cast<double>(std::max<int64_t>(chars, 1));
      if (s.loglikelihoods[j] > s.loglikelihoods[best]) best = static_cast<int>(j);
      if (j == 0 || norm > best_norm_value) {
        best_norm = static_cast<int>(j);
        best_norm_value = norm;
      }
    }
    s.gold = item.gold;
    s.pred = best;
    s.pred_norm = best_norm;
    s.correct = best == item.gold;
    acc_values.push_back(best == item.gold ? 1.0 : 0.0);
    norm_values.push_back(best_norm == item.gold ? 1.0 : 0.0);
  }
  auto mean = [](const std::vector<double>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(std::max<size_t>(v.size(), 1));
  };
  result->metrics.push_back({"acc", mean(acc_values), MeanStderr(acc_values)});
  result->metrics.push_back({"acc_norm", mean(norm_values), MeanStderr(norm_values)});
  return absl::OkStatus();
}

absl::Status Generate(Decoder& model, const tokenizer::Tokenizer& tok, const Task& task,
                      const TaskEvalOptions& o, TaskResult* result) {
  const TaskConfig& c = task.config;
  const int64_t max_new = c.max_gen_tokens() > 0 ? c.max_gen_tokens() : 256;
  std::vector<double> matches;
  for (size_t i = 0; i < task.items.size(); ++i) {
    const TaskItem& item = task.items[i];
    HILNAS_ASSIGN_OR_RETURN(std::vector<int64_t> prompt, Encode(tok, item.contexts[0], o.add_bos));
    const int64_t room = std::max<int64_t>(1, o.max_length - max_new);
    if (static_cast<int64_t>(prompt.size()) > room) prompt.erase(prompt.begin(), prompt.end() - room);
    if (prompt.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(task.data_path, ":", item.line, ": the prompt is empty"));
    }
    std::vector<int32_t> generated;
    std::string text;
    const std::optional<int32_t> eos = tok.eos_id();
    GenerateOptions g;
    g.max_new_tokens = max_new;
    g.on_token = [&](int64_t id) {
      if (eos && id == *eos) return false;
      generated.push_back(static_cast<int32_t>(id));
      auto decoded = tok.Decode(generated, /*skip_special_tokens=*/true);
      if (decoded.ok()) text = *std::move(decoded);
      for (const std::string& stop : c.until()) {
        if (!stop.empty() && text.find(stop) != std::string::npos) return false;
      }
      return true;
    };
    auto gen = GreedyGenerate(model, prompt, g);
    if (!gen.ok()) {
      return absl::Status(gen.status().code(),
                          absl::StrCat(task.data_path, ":", item.line, ": ", gen.status().message()));
    }
    TaskSample& s = result->samples[i];
    s.generation = CutAtStop(c, text);
    s.correct = ExactMatch(c, s.generation, item.answers);
    matches.push_back(s.correct ? 1.0 : 0.0);
    if (o.progress) o.progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(task.items.size()));
  }
  const double mean = std::accumulate(matches.begin(), matches.end(), 0.0) /
                      static_cast<double>(std::max<size_t>(matches.size(), 1));
  result->metrics.push_back({"exact_match", mean, MeanStderr(matches)});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TaskResult> EvaluateTask(Decoder& model, const tokenizer::Tokenizer& tok,
                                        const Task& task, const TaskEvalOptions& options) {
  if (options.max_length < 2) return absl::InvalidArgumentError("max_length must be at least 2");
  TaskResult result;
  result.task = task.config.name();
  result.n = static_cast<int64_t>(task.items.size());
  result.samples.resize(task.items.size());
  for (size_t i = 0; i < task.items.size(); ++i) result.samples[i].line = task.items[i].line;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (task.config.kind() == TaskConfig::GENERATE_UNTIL) {
      HILNAS_RETURN_IF_ERROR(Generate(model, tok, task, options, &result));
    } else {
      HILNAS_RETURN_IF_ERROR(ScoreChoices(model, tok, task, options, &result));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("task ", task.config.name(), ": ", e.what_without_backtrace()));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace hilnas
