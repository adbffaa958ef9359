#include "quality/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "model/blas_core.h"
#include "model/checkpoint.h"
#include "model/quant.h"
#include "nlohmann/json.hpp"
#include "quality/train_util.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;

torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// What must match for a checkpoint in checkpoint_dir to be resumed.
nlohmann::json RunIdentity(const TrainOptions& o, const Decoder& d) {
  return {{"arch", d.arch().name},
          {"steps", o.steps},
          {"batch_size", o.batch_size},
          {"seq_len", o.seq_len},
          {"lr", o.lr},
          {"seed", o.seed},
          {"distill_weight", o.distill_weight}};
}

absl::Status SaveResumable(Decoder& model, torch::optim::Optimizer& opt, const TrainOptions& o,
                           int64_t step, const TrainResult& r) {
  const fs::path root(o.checkpoint_dir);
  const fs::path tmp = root / "resume.tmp", cur = root / "resume", old = root / "resume.old";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(model, tmp.string(), StorageDtype::kF32));
  torch::save(opt, (tmp / "optimizer.pt").string());
  nlohmann::json state = {{"step", step}, {"run", RunIdentity(o, model)}};
  for (const auto& [s, loss] : r.eval_history) state["eval_history"].push_back({s, loss});
  HILNAS_RETURN_IF_ERROR(WriteFileAtomically((tmp / "state.json").string(), state.dump(2)));
  // Swap in with renames; a crash leaves either resume or resume.old whole.
  fs::remove_all(old, ec);
  if (fs::exists(cur)) fs::rename(cur, old);
  fs::rename(tmp, cur);
  fs::remove_all(old, ec);
  return absl::OkStatus();
}

// Restores model, optimizer and history from checkpoint_dir; returns the
// step reached, or 0 when there is nothing to resume.
absl::StatusOr<int64_t> Resume(Decoder& model, torch::optim::Optimizer& opt, const TrainOptions& o,
                               TrainResult* r) {
  const fs::path root(o.checkpoint_dir);
  fs::path dir = root / "resume";
  if (!fs::exists(dir / "state.json")) dir = root / "resume.old";
  if (!fs::exists(dir / "state.json")) return 0;
  std::string text;
  HILNAS_RETURN_IF_ERROR(ReadFileToString((dir / "state.json").string(), &text));
  const nlohmann::json state = nlohmann::json::parse(text, nullptr, false);
  if (!state.is_object() || !state.contains("step") || !state.contains("run")) {
    return absl::DataLossError(absl::StrCat((dir / "state.json").string(), " is corrupt"));
  }
  if (state["run"] != RunIdentity(o, model)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint dir ", o.checkpoint_dir, " holds a run with other options (",
                     state["run"].dump(), " vs ", RunIdentity(o, model).dump(),
                     "); use another --checkpoint-dir or remove it"));
  }
  HILNAS_ASSIGN_OR_RETURN(Decoder saved, LoadCheckpoint(dir.string()));
  auto theirs = saved.NamedTensors();
  auto ours = model.NamedTensors();
  if (theirs.size() != ours.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir.string(), " holds another architecture than the model being trained"));
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ours.size(); ++i) {
    if (ours[i].first != theirs[i].first ||
        !ours[i].second.sizes().equals(theirs[i].second.sizes())) {
      return absl::FailedPreconditionError(absl::StrCat(dir.string(), ": tensor ", theirs[i].first,
                                                        " does not match the model being trained"));
    }
    ours[i].second.copy_(theirs[i].second);
  }
  torch::load(opt, (dir / "optimizer.pt").string());
  for (const auto& e : state.value("eval_history", nlohmann::json::array())) {
    r->eval_history.push_back({e[0].get<int64_t>(), e[1].get<double>()});
  }
  return state["step"].get<int64_t>();
}

}  // namespace

// [count, len] windows of `tokens` starting at `offsets`.
torch::Tensor Windows(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets,
                      int64_t len) {
  auto out = torch::empty({static_cast<int64_t>(offsets.size()), len}, torch::kLong);
  auto a = out.accessor<int64_t, 2>();
  for (size_t i = 0; i < offsets.size(); ++i) {
    for (int64_t j = 0; j < len; ++j) a[i][j] = tokens[offsets[i] + j];
  }
  return out;
}

// The batch of step `step` (1-based): a pure function of (seed, step).
torch::Tensor TrainBatch(const std::vector<int32_t>& train, const TrainOptions& o, int64_t step) {
  std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step));
  std::uniform_int_distribution<int64_t> pick(0,
                                              static_cast<int64_t>(train.size()) - o.seq_len - 1);
  std::vector<int64_t> offsets(o.batch_size);
  for (int64_t& off : offsets) off = pick(rng);
  return Windows(train, offsets, o.seq_len + 1);
}

// Linear warm-up to lr, then cosine to lr * min_lr_ratio at the last step.
double LearningRate(const TrainOptions& o, int64_t step) {
  if (step <= o.warmup_steps) return o.lr * step / std::max<int64_t>(1, o.warmup_steps);
  const double progress =
      static_cast<double>(step - o.warmup_steps) / std::max<int64_t>(1, o.steps - o.warmup_steps);
  const double floor = o.lr * o.min_lr_ratio;
  return floor + (o.lr - floor) * 0.5 * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

torch::optim::AdamW MakeAdamW(const std::vector<torch::Tensor>& params, const TrainOptions& o) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const torch::Tensor& t : params) {
    t.set_requires_grad(true);
    (t.dim() >= 2 ? decay : no_decay).push_back(t);
  }
  auto opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(wd));
  };
  return torch::optim::AdamW({torch::optim::OptimizerParamGroup(decay, opts(o.weight_decay)),
                              torch::optim::OptimizerParamGroup(no_decay, opts(0.0))},
                             torch::optim::AdamWOptions(o.lr));
}

void SetLearningRate(torch::optim::AdamW& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
}

bool EvaluatesAt(const TrainOptions& o, int64_t step) {
  return (o.eval_every > 0 && step % o.eval_every == 0) || step == o.steps;
}

namespace {

// The progress record of step `step`, begun at `started`.
TrainProgress StepProgress(const TrainOptions& o, int64_t step, double loss, double lr,
                           std::chrono::steady_clock::time_point started) {
  TrainProgress p;
  p.step = step;
  p.steps = o.steps;
  p.train_loss = loss;
  p.lr = lr;
  p.tokens_per_s =
      o.batch_size * o.seq_len /
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return p;
}

// INTERNAL "training diverged" naming the step unless `loss` is finite.
absl::Status CheckFinite(double loss, int64_t step) {
  if (std::isfinite(loss)) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("training diverged: loss ", loss, " at step ", step,
                                          " (lower the learning rate)"));
}

}  // namespace

absl::StatusOr<TrainProgress> ApplyStep(torch::Tensor& loss,
                                        const std::vector<torch::Tensor>& params,
                                        torch::optim::Optimizer& opt, const TrainOptions& o,
                                        int64_t step, double lr,
                                        std::chrono::steady_clock::time_point started,
                                        TrainResult& r) {
  loss.backward();
  if (o.grad_clip > 0) torch::nn::utils::clip_grad_norm_(params, o.grad_clip);
  opt.step();
  r.final_train_loss = loss.item<double>();
  HILNAS_RETURN_IF_ERROR(CheckFinite(r.final_train_loss, step));
  r.tokens += o.batch_size * o.seq_len;
  return StepProgress(o, step, r.final_train_loss, lr, started);
}

std::vector<int64_t> HeldOutOffsets(int64_t tokens, int64_t seq_len, int64_t windows) {
  const int64_t fit = (tokens - 1) / seq_len;
  windows = std::min(windows, fit);
  std::vector<int64_t> offsets;
  for (int64_t i = 0; i < windows; ++i) offsets.push_back(i * (fit / windows) * seq_len);
  return offsets;
}

TrainOptions TrainOptionsFromRecipe(const TrainRecipe& r, uint64_t seed) {
  TrainOptions o;
  o.steps = r.steps();
  o.batch_size = r.batch_size();
  o.seq_len = r.seq_len();
  o.lr = r.lr();
  o.warmup_steps = std::min<int64_t>(r.warmup_steps(), o.steps / 2);
  if (r.has_weight_decay()) o.weight_decay = r.weight_decay();
  if (r.has_grad_clip()) o.grad_clip = r.grad_clip();
  if (r.eval_windows() > 0) o.eval_windows = r.eval_windows();
  o.eval_weight_dtype = r.eval_weight_dtype();
  o.eval_kv_dtype = r.eval_kv_dtype();
  o.seed = seed;
  return o;
}

absl::Status TrainOptions::Validate() const {
  auto bad = [](const std::string& field, double v, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat("train option ", field, " = ", v, ": ", want));
  };
  if (steps < 1) return bad("steps", steps, "must be >= 1");
  if (!eval_weight_dtype.empty() && eval_weight_dtype != "f32" && eval_weight_dtype != "f16" &&
      eval_weight_dtype != "bf16" && !ParseQuantType(eval_weight_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("train option eval_weight_dtype \"",
                                                   eval_weight_dtype,
                                                   "\" is not one of f32, bf16, f16, q4_0, q8_0"));
  }
  if (!eval_kv_dtype.empty() && eval_kv_dtype != "f32" && eval_kv_dtype != "f16" &&
      eval_kv_dtype != "q8_0") {
    return absl::InvalidArgumentError(absl::StrCat("train option eval_kv_dtype \"", eval_kv_dtype,
                                                   "\" is not one of f32, f16, q8_0"));
  }
  if (batch_size < 1) return bad("batch_size", batch_size, "must be >= 1");
  if (seq_len < 2) return bad("seq_len", seq_len, "must be >= 2");
  if (!(lr > 0)) return bad("lr", lr, "must be > 0");
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1))
    return bad("min_lr_ratio", min_lr_ratio, "in [0, 1]");
  if (warmup_steps < 0) return bad("warmup_steps", warmup_steps, "must be >= 0");
  if (!(weight_decay >= 0)) return bad("weight_decay", weight_decay, "must be >= 0");
  if (!(grad_clip >= 0)) return bad("grad_clip", grad_clip, "must be >= 0");
  if (!(distill_weight >= 0 && distill_weight <= 1)) {
    return bad("distill_weight", distill_weight, "in [0, 1]");
  }
  if (!(distill_temperature > 0)) return bad("distill_temperature", distill_temperature, "> 0");
  if (eval_windows < 1) return bad("eval_windows", eval_windows, "must be >= 1");
  // Upper bounds, checked before a batch tensor is sized from them (a batch
  // of 1e9 sequences asked libtorch for a terabyte).
  if (steps > 10'000'000) return bad("steps", steps, "must be <= 10000000");
  if (batch_size > 4096) return bad("batch_size", batch_size, "must be <= 4096");
  if (seq_len > 65536) return bad("seq_len", seq_len, "must be <= 65536");
  if (batch_size * seq_len > (int64_t{1} << 22)) {
    return bad("batch_size * seq_len", static_cast<double>(batch_size * seq_len),
               "must be <= 4194304 tokens a step");
  }
  if (eval_windows > 1'000'000) return bad("eval_windows", eval_windows, "must be <= 1000000");
  if (warmup_steps > 10'000'000) return bad("warmup_steps", warmup_steps, "must be <= 10000000");
  return absl::OkStatus();
}

absl::StatusOr<double> HeldOutLoss(Decoder& model, const std::vector<int32_t>& tokens,
                                   int64_t seq_len, int64_t windows) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t fit = (n - 1) / seq_len;
  if (fit < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(n, " held-out tokens do not fill one window of ", seq_len + 1));
  }
  const std::vector<int64_t> offsets = HeldOutOffsets(n, seq_len, windows);
  try {
    torch::NoGradGuard no_grad;
    const bool was_training = model.module().is_training();
    model.module().eval();
    double sum = 0;
    const int64_t chunk = 16;
    for (size_t i = 0; i < offsets.size(); i += chunk) {
      std::vector<int64_t> part(offsets.begin() + i,
                                offsets.begin() + std::min(offsets.size(), i + chunk));
      auto w = Windows(tokens, part, seq_len + 1);
      torch::Tensor logits;
      if (std::string(model.kv_dtype()) == "f32") {
        logits = model.Forward(w.narrow(1, 0, seq_len)).to(torch::kFloat);
      } else {
        // A reduced-precision cache (--kv-dtype f16|q8_0): the window runs
        // through one, so every query attends to keys and values as the
        // cache holds them (llama-perplexity with -ctk/-ctv does the same).
        KvCache cache = model.NewCache(w.size(0), seq_len);
        logits = model.ForwardCached(w.narrow(1, 0, seq_len), cache, /*last_only=*/false)
                     .to(torch::kFloat);
      }
      sum += CrossEntropy(logits, w.narrow(1, 1, seq_len)).item<double>() * part.size();
    }
    if (was_training) model.module().train();
    return sum / offsets.size();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("held-out loss: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<TrainResult> Train(Decoder& student, Decoder* teacher, const TokenSplit& data,
                                  const TrainOptions& o,
                                  const std::function<void(const TrainProgress&)>& progress) {
  HILNAS_RETURN_IF_ERROR(o.Validate());
  if (static_cast<int64_t>(data.train.size()) < o.seq_len + 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        data.train.size(), " training tokens are fewer than one window of ", o.seq_len + 1));
  }
  if (o.distill_weight > 0 &&
      (teacher == nullptr || teacher->arch().vocab_size != student.arch().vocab_size)) {
    return absl::InvalidArgumentError(
        "distillation needs a teacher with the student's vocabulary (distill_weight > 0)");
  }
  TrainResult r;
  // Training multiplies through autograd and OpenBLAS's own threads, before
  // and after each step's evaluations: no switching to the pooled products.
  const OpenBlasThreadsScope blas_threads;
  try {
    std::vector<torch::Tensor> params;
    for (auto& [name, t] : student.NamedTensors()) params.push_back(t);
    torch::optim::AdamW opt = MakeAdamW(params, o);
    int64_t start = 0;
    if (!o.checkpoint_dir.empty()) {
      HILNAS_ASSIGN_OR_RETURN(start, Resume(student, opt, o, &r));
      r.resumed_from_step = start;
    }
    HILNAS_ASSIGN_OR_RETURN(r.initial_eval_loss,
                            HeldOutLoss(student, data.heldout, o.seq_len, o.eval_windows));
    if (teacher != nullptr) teacher->module().eval();
    student.module().train();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = start + 1; step <= o.steps; ++step) {
      const auto s0 = std::chrono::steady_clock::now();
      const double lr = LearningRate(o, step);
      SetLearningRate(opt, lr);
      auto batch = TrainBatch(data.train, o, step);
      auto inputs = batch.narrow(1, 0, o.seq_len), targets = batch.narrow(1, 1, o.seq_len);
      opt.zero_grad();
      auto logits = student.Forward(inputs);
      auto loss = CrossEntropy(logits, targets);
      if (o.distill_weight > 0) {
        torch::Tensor teacher_logits;
        {
          torch::NoGradGuard no_grad;
          teacher_logits = teacher->Forward(inputs).to(logits.dtype());
        }
        const double t = o.distill_temperature;
        auto kl = F::kl_div(F::log_softmax(logits / t, -1).reshape({-1, logits.size(-1)}),
                            F::log_softmax(teacher_logits / t, -1).reshape({-1, logits.size(-1)}),
                            F::KLDivFuncOptions().reduction(torch::kBatchMean).log_target(true));
        loss = (1 - o.distill_weight) * loss + o.distill_weight * t * t * kl;
      }
      HILNAS_ASSIGN_OR_RETURN(TrainProgress p,
                              ApplyStep(loss, student.Parameters(), opt, o, step, lr, s0, r));
      if (EvaluatesAt(o, step)) {
        HILNAS_ASSIGN_OR_RETURN(p.eval_loss,
                                HeldOutLoss(student, data.heldout, o.seq_len, o.eval_windows));
        r.eval_history.push_back({step, p.eval_loss});
      }
      if (!o.checkpoint_dir.empty() &&
          ((o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || step == o.steps)) {
        HILNAS_RETURN_IF_ERROR(SaveResumable(student, opt, o, step, r));
      }
      if (progress) progress(p);
    }
    if (r.eval_history.empty() || r.eval_history.back().first != o.steps) {
      HILNAS_ASSIGN_OR_RETURN(double l,
                              HeldOutLoss(student, data.heldout, o.seq_len, o.eval_windows));
      r.eval_history.push_back({o.steps, l});
    }
    r.final_eval_loss = r.eval_history.back().second;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    student.module().eval();
    for (auto& [name, t] : student.NamedTensors()) t.set_requires_grad(false);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("training ", student.arch().name, ": ", e.what_without_backtrace()));
  } catch (const std::filesystem::filesystem_error& e) {
    return absl::InternalError(absl::StrCat("training checkpoint: ", e.what()));
  }
  return r;
}

}  // namespace hilnas
