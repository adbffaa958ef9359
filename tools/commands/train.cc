// `hilnas train`: continued pretraining (AdamW, warm-up + cosine, clipping,
// optional knowledge distillation), or training from scratch with --arch;
// KV-prediction checkpoints train their auxiliary model and predictor.
#include "tools/commands/train.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/checkpoint.h"
#include "model/kv_prediction.h"
#include "nlohmann/json.hpp"
#include "quality/kvp_trainer.h"
#include "search_space/counts.h"
#include "tools/commands/commands.h"
#include "tools/commands/corpus.h"
#include "tools/commands/eval.h"
#include "util/files.h"
#include "util/textproto.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

namespace fs = std::filesystem;

// The training the flags describe: the recipe fields through
// TrainOptionsFromRecipe, as a campaign's evaluator maps its recipe, then
// what only the command has (evaluation cadence, resume, distillation).
absl::StatusOr<TrainOptions> TrainOptionsOf(const TrainCommandOptions& cl) {
  const std::pair<const char*, int64_t> sizes[] = {{"--steps", cl.steps},
                                                   {"--batch-size", cl.batch_size},
                                                   {"--seq-len", cl.seq_len},
                                                   {"--warmup-steps", cl.warmup_steps}};
  for (const auto& [flag, v] : sizes) {
    if (v > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", v, " exceeds 2^31 - 1"));
    }
  }
  TrainRecipe recipe;
  recipe.set_steps(static_cast<int32_t>(cl.steps));
  recipe.set_batch_size(static_cast<int32_t>(cl.batch_size));
  recipe.set_seq_len(static_cast<int32_t>(cl.seq_len));
  recipe.set_lr(cl.lr);
  recipe.set_warmup_steps(static_cast<int32_t>(cl.warmup_steps));
  recipe.set_weight_decay(cl.weight_decay);
  recipe.set_grad_clip(cl.grad_clip);
  recipe.set_heldout_fraction(cl.heldout);
  TrainOptions o = TrainOptionsFromRecipe(recipe, cl.seed);
  o.eval_every = cl.eval_every;
  o.checkpoint_dir = cl.checkpoint_dir;
  o.checkpoint_every = cl.checkpoint_every;
  if (!cl.distill_from.empty()) o.distill_weight = cl.distill_weight;
  return o;
}

// Prints one line per step with tokens/s; held-out loss when evaluated.
void PrintProgress(const TrainProgress& p) {
  const bool eval = !std::isnan(p.eval_loss);
  if (!eval && p.step % 10 != 0 && p.step != 1) return;
  std::printf("step %5lld/%lld  loss %.4f  lr %.2e  %6.0f tok/s%s\n",
              static_cast<long long>(p.step), static_cast<long long>(p.steps), p.train_loss, p.lr,
              p.tokens_per_s, eval ? absl::StrFormat("  held-out %.4f", p.eval_loss).c_str() : "");
  std::fflush(stdout);
}

// Trains --ckpt (or a fresh --arch/--shape) on --tokens and saves to --out.
// A KV-prediction checkpoint trains its auxiliary model and predictor with
// the base frozen (quality/kvp_trainer.h) and is saved whole to `out`.
absl::StatusOr<TrainResult> RunTrainKvp(const TrainCommandOptions& cl, const std::string& ckpt,
                                        const std::string& out, const TrainOptions& o) {
  HILNAS_ASSIGN_OR_RETURN(KvPredictor kvp, LoadKvpCheckpoint(ckpt));
  KvpLossWeights weights;
  weights.consistency = cl.kvp_consistency_weight;
  weights.auxiliary = cl.kvp_aux_weight;
  HILNAS_ASSIGN_OR_RETURN(
      TokenSplit data, LoadSplit(cl.tokens, kvp.base().arch().vocab_size, o.seq_len, cl.heldout));
  std::printf("training the auxiliary model and KV predictor of %s (base frozen), %lld steps\n",
              ckpt.c_str(), static_cast<long long>(o.steps));
  HILNAS_ASSIGN_OR_RETURN(TrainResult r, TrainKvp(kvp, data, o, weights, PrintProgress));
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeOf(cl.dtype));
  HILNAS_RETURN_IF_ERROR(SaveKvpCheckpoint(kvp, out, storage));
  // The trained checkpoint reads text as its parent did.
  HILNAS_RETURN_IF_ERROR(CopyTokenizerFiles(ckpt, out));
  std::printf("held-out loss of the base over the predicted cache %.4f (from %.4f) -> %s\n",
              r.final_eval_loss, r.initial_eval_loss, out.c_str());
  return r;
}

}  // namespace

absl::StatusOr<TrainResult> TrainInto(const TrainCommandOptions& cl, const std::string& out) {
  HILNAS_RETURN_IF_ERROR(ApplyThreads(cl.threads));
  HILNAS_ASSIGN_OR_RETURN(const TrainOptions o, TrainOptionsOf(cl));
  HILNAS_RETURN_IF_ERROR(o.Validate());
  std::unique_ptr<Decoder> model;
  if (const std::string ckpt = cl.ckpt; !ckpt.empty()) {
    HILNAS_RETURN_IF_ERROR(CheckTokenizerMatches(ckpt, cl.tokens));
    HILNAS_ASSIGN_OR_RETURN(auto checkpoint, CheckpointReader::Open(ckpt));
    if (checkpoint->arch().kv_prediction.kind != KvPredictionSpec::Kind::kNone)
      return RunTrainKvp(cl, ckpt, out, o);
    HILNAS_ASSIGN_OR_RETURN(Decoder d, checkpoint->Load());
    model = std::make_unique<Decoder>(std::move(d));
  } else {
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchOf(cl.model));
    HILNAS_ASSIGN_OR_RETURN(Decoder d, Decoder::Create(arch, cl.seed));
    model = std::make_unique<Decoder>(std::move(d));
  }
  std::unique_ptr<Decoder> teacher;
  if (const std::string t = cl.distill_from; !t.empty()) {
    HILNAS_ASSIGN_OR_RETURN(Decoder d, LoadCheckpoint(t));
    teacher = std::make_unique<Decoder>(std::move(d));
  }
  const Arch& arch = model->arch();
  HILNAS_ASSIGN_OR_RETURN(TokenSplit data,
                          LoadSplit(cl.tokens, arch.vocab_size, o.seq_len, cl.heldout));
  std::printf(
      "training %s (%s parameters) on %s tokens (%s held out), %lld steps x %lld x %lld "
      "tokens, %d threads%s\n",
      arch.name.c_str(), WithCommas(CountParameters(arch).model()).c_str(),
      WithCommas(data.train.size()).c_str(), WithCommas(data.heldout.size()).c_str(),
      static_cast<long long>(o.steps), static_cast<long long>(o.batch_size),
      static_cast<long long>(o.seq_len), at::get_num_threads(),
      teacher ? absl::StrFormat(", KD weight %.2f", o.distill_weight).c_str() : "");
  HILNAS_ASSIGN_OR_RETURN(TrainResult r, Train(*model, teacher.get(), data, o, PrintProgress));
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeOf(cl.dtype));
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(*model, out, storage));
  // The trained checkpoint reads text as its parent did.
  if (!cl.ckpt.empty()) HILNAS_RETURN_IF_ERROR(CopyTokenizerFiles(cl.ckpt, out));
  const double chance = std::log(static_cast<double>(arch.vocab_size));
  nlohmann::json summary = {{"arch", arch.name},
                            {"tokens_file", cl.tokens},
                            {"steps", o.steps},
                            {"batch_size", o.batch_size},
                            {"seq_len", o.seq_len},
                            {"lr", o.lr},
                            {"warmup_steps", o.warmup_steps},
                            {"weight_decay", o.weight_decay},
                            {"seed", o.seed},
                            {"distill_from", cl.distill_from},
                            {"initial_heldout_loss", r.initial_eval_loss},
                            {"final_heldout_loss", r.final_eval_loss},
                            {"chance_loss_ln_vocab", chance},
                            {"trained_tokens", r.tokens},
                            {"seconds", r.seconds}};
  for (const auto& [s, l] : r.eval_history) summary["eval_history"].push_back({s, l});
  HILNAS_RETURN_IF_ERROR(
      WriteFileAtomically((fs::path(out) / "train.json").string(), summary.dump(2) + "\n"));
  std::printf(
      "held-out loss %.4f nats/token (chance ln(%d) = %.4f; %.1f%% of chance), "
      "%s tokens in %.0f s -> %s\n",
      r.final_eval_loss, arch.vocab_size, chance, 100 * r.final_eval_loss / chance,
      WithCommas(r.tokens).c_str(), r.seconds, out.c_str());
  return r;
}

namespace {

int RunTrainCommand(const TrainCommandOptions& cl) {
  const std::string out = cl.out;
  // Tasks are read before training, so a bad config fails in a second.
  absl::StatusOr<std::vector<Task>> tasks = LoadTasks(cl.tasks, cl.task_limit);
  if (!tasks.ok()) return Fail(tasks.status());
  absl::StatusOr<OutputFolder> dest =
      OutputFolder::Prepare(out, cl.overwrite, {cl.ckpt, cl.distill_from, cl.checkpoint_dir});
  if (!dest.ok()) return Fail(dest.status());
  auto r = TrainInto(cl, dest->staging());
  if (!r.ok()) return Fail(r.status());
  if (absl::Status s = dest->Commit(); !s.ok()) return Fail(s);
  std::printf("saved to %s\n", out.c_str());
  nlohmann::json scores = nlohmann::json::array();
  if (!tasks->empty()) {
    TaskScoring ts;
    ts.ckpt = out;
    ts.weight_dtype = cl.task_weight_dtype;
    ts.kv_dtype = cl.task_kv_dtype;
    absl::StatusOr<nlohmann::json> rows = ScoreTasks(ts, *tasks);
    if (!rows.ok()) return Fail(rows.status());
    scores = *std::move(rows);
    std::printf("tasks (%s weights, %s KV cache):\n%s", cl.task_weight_dtype.c_str(),
                cl.task_kv_dtype.c_str(), TaskScoreTable(scores).c_str());
  }
  if (!cl.result_json.empty()) {
    // quality/trial_evaluator.h's ReadQualityJson reads this.
    nlohmann::json j = {{"loss", r->final_eval_loss},
                        {"initial_loss", r->initial_eval_loss},
                        {"tokens", r->tokens},
                        {"seconds", r->seconds}};
    if (!scores.empty()) j["tasks"] = scores;
    if (absl::Status s = WriteFileAtomically(cl.result_json, j.dump() + "\n"); !s.ok()) {
      return Fail(s);
    }
  }
  return 0;
}

void AddTrainingFlags(CLI::App* app, TrainCommandOptions* o) {
  app->add_option("--steps", o->steps, "optimiser steps")->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  // The trainer's own limits (TrainOptions::Validate in quality/trainer.cc), named
  // here so that the flag is refused before any work.
  app->add_option("--batch-size", o->batch_size, "sequences per batch")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app->add_option("--seq-len", o->seq_len, "tokens per sequence")
      ->check(CLI::Range(int64_t{2}, int64_t{65536}));
  app->add_option("--lr", o->lr, "peak learning rate (AdamW)");
  app->add_option("--warmup-steps", o->warmup_steps, "linear warm-up steps before cosine decay");
  app->add_option("--weight-decay", o->weight_decay, "AdamW decoupled weight decay (not on norms)");
  app->add_option("--grad-clip", o->grad_clip, "global gradient-norm clip; 0 = off");
  app->add_option("--heldout", o->heldout, "fraction of the token file's tail held out for eval")
      ->check(CLI::Range(0.0, 0.9));
  app->add_option("--eval-every", o->eval_every, "steps between held-out evaluations");
  app->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "resumable checkpoints here (an existing one is resumed)");
  app->add_option("--checkpoint-every", o->checkpoint_every, "steps between resumable checkpoints");
}

}  // namespace

void AddTrainCommand(Cli& cli) {
  auto [app, o] = cli.Add<TrainCommandOptions>(
      "train",
      "--tokens FILE --ckpt DIR|--arch FILE --out DIR [--steps 200 --batch-size 16\n"
      "    --seq-len 128 --lr 3e-3 --warmup-steps 20 --distill-from DIR --distill-weight 0.5\n"
      "    --eval-every 50 --checkpoint-dir DIR --heldout 0.05]",
      "continued pretraining (AdamW, cosine, clip, optional KD)", RunTrainCommand);
  app->add_option("--tokens", o->tokens, "token file (uint16 ids; *.u32 for uint32)")->required();
  auto [shape, arch] = AddArchFlags(app, &o->model);
  app->add_option("--ckpt", o->ckpt, "checkpoint to continue from")->excludes(shape)->excludes(arch);
  app->add_option("--out", o->out, "the trained checkpoint's folder")->required();
  app->add_flag("--overwrite", o->overwrite,
                "replace an existing non-empty --out (written beside it, renamed into place)");
  AddTrainingFlags(app, o);
  app->add_option("--distill-from", o->distill_from, "teacher checkpoint for knowledge distillation");
  app->add_option("--distill-weight", o->distill_weight, "KD weight when --distill-from is given")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--result-json", o->result_json,
                  "also write {\"loss\": ...} here (what an external or Slurm evaluator reads)");
  app->add_option("--task", o->tasks,
                  "score the trained checkpoint on these task configs (hilnas eval --task) and add "
                  "them to --result-json");
  app->add_option("--task-limit", o->task_limit, "tasks: only the first N documents of each")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--task-weight-dtype", o->task_weight_dtype,
                  "tasks: score with the matrices stored as f32, bf16, f16, q4_0 or q8_0");
  app->add_option("--task-kv-dtype", o->task_kv_dtype,
                  "tasks: score with the KV cache stored as f32, f16 or q8_0");
  app->add_option("--kvp-consistency-weight", o->kvp_consistency_weight,
                  "KV prediction: weight of the L1 consistency loss; < 0 takes 1 / n_B (Tab. 2)");
  app->add_option("--kvp-aux-weight", o->kvp_aux_weight,
                  "KV prediction: weight of the auxiliary model's CE");
  app->add_option("--dtype", o->dtype, "storage dtype of the saved checkpoint: f32 | f16 | bf16");
  AddThreadsFlag(app, &o->threads);
  app->add_option("--seed", o->seed, "random seed (weights from scratch, batches)");
  cli.StableTiming(app, &o->threads);
}

}  // namespace hilnas::tools
