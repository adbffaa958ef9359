// `hilnas corpus | train | calibrate | prune | backbone`: the pruning half of
// MobileLLM-Flash's search (Sec. 3.3): token data, continued pretraining,
// activation metrics, Prune(metrics, s), and the demo backbone's recipe.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "model/checkpoint.h"
#include "model/kv_prediction.h"
#include "nlohmann/json.hpp"
#include "pruner/backbone.h"
#include "pruner/metrics.h"
#include "pruner/prune.h"
#include "quality/kvp_trainer.h"
#include "quality/tokens.h"
#include "quality/trainer.h"
#include "search_space/counts.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

namespace fs = std::filesystem;

// The training the flags describe: the recipe fields through
// TrainOptionsFromRecipe, as a campaign's evaluator maps its recipe, then
// what only the command has (evaluation cadence, resume, distillation).
absl::StatusOr<TrainOptions> TrainOptionsOf(const CommandLine& cl) {
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

absl::Status RunCorpus(const CommandLine& cl) {
  const std::string out = cl.out;
  if (out.empty()) return absl::InvalidArgumentError("corpus needs --out FILE");
  std::vector<std::string> sources = DefaultCorpusSources();
  if (const std::string s = cl.sources; !s.empty()) {
    sources = absl::StrSplit(s, ',', absl::SkipEmpty());
  }
  CorpusManifest manifest;
  HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, BuildByteCorpus(sources, &manifest));
  HILNAS_RETURN_IF_ERROR(WriteTokenFile(out, ids));
  HILNAS_RETURN_IF_ERROR(WriteFileAtomically(out + ".json", manifest.ToJson()));
  std::printf("%s: %s byte tokens from %zu files (manifest %s.json, fnv1a %llx)\n", out.c_str(),
              WithCommas(manifest.tokens).c_str(), manifest.files.size(), out.c_str(),
              static_cast<unsigned long long>(manifest.fnv1a));
  return absl::OkStatus();
}

// Trains --ckpt (or a fresh --arch/--shape) on --tokens and saves to --out.
// A KV-prediction checkpoint trains its auxiliary model and predictor with
// the base frozen (quality/kvp_trainer.h) and is saved whole to `out`.
absl::StatusOr<TrainResult> RunTrainKvp(const CommandLine& cl, const std::string& ckpt,
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
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeOf(cl));
  HILNAS_RETURN_IF_ERROR(SaveKvpCheckpoint(kvp, out, storage));
  std::printf("held-out loss of the base over the predicted cache %.4f (from %.4f) -> %s\n",
              r.final_eval_loss, r.initial_eval_loss, out.c_str());
  return r;
}

absl::StatusOr<TrainResult> RunTrain(const CommandLine& cl, const std::string& out) {
  HILNAS_RETURN_IF_ERROR(ApplyThreads(cl));
  HILNAS_ASSIGN_OR_RETURN(const TrainOptions o, TrainOptionsOf(cl));
  HILNAS_RETURN_IF_ERROR(o.Validate());
  if (const std::string ckpt = cl.ckpt; !ckpt.empty()) {
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ReadConfigJson(ckpt + "/config.json"));
    if (arch.kv_prediction.kind != KvPredictionSpec::Kind::kNone)
      return RunTrainKvp(cl, ckpt, out, o);
  }
  std::unique_ptr<Decoder> model;
  if (const std::string ckpt = cl.ckpt; !ckpt.empty()) {
    HILNAS_ASSIGN_OR_RETURN(Decoder d, LoadCheckpoint(ckpt));
    model = std::make_unique<Decoder>(std::move(d));
  } else {
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchOf(cl));
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
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeOf(cl));
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(*model, out, storage));
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

absl::Status RunCalibrate(const CommandLine& cl, const std::string& ckpt,
                          const std::string& tokens_path, std::string out) {
  HILNAS_RETURN_IF_ERROR(ApplyThreads(cl));
  if (ckpt.empty()) return absl::InvalidArgumentError("calibrate needs --ckpt DIR");
  if (out.empty()) out = (fs::path(ckpt) / "metrics.json").string();
  HILNAS_ASSIGN_OR_RETURN(Decoder model, LoadCheckpoint(ckpt));
  HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                          ReadTokenFile(tokens_path, model.arch().vocab_size));
  CalibrationOptions o;
  o.seq_len = cl.seq_len;
  o.batch_size = cl.batch_size;
  o.max_tokens = cl.calib_tokens;
  int last_pct = -1;
  HILNAS_ASSIGN_OR_RETURN(ActivationMetrics m,
                          Calibrate(model, ids, o, [&](int64_t done, int64_t total) {
                            const int pct = static_cast<int>(100 * done / total);
                            if (pct / 10 != last_pct / 10 || done == total) {
                              std::printf("calibrating: %s / %s positions (%d%%)\n",
                                          WithCommas(done).c_str(), WithCommas(total).c_str(), pct);
                              std::fflush(stdout);
                              last_pct = pct;
                            }
                          }));
  HILNAS_ASSIGN_OR_RETURN(m.backbone_fingerprint, CheckpointFingerprint(ckpt));
  HILNAS_RETURN_IF_ERROR(SaveMetrics(m, out));
  std::printf("LayerMetric (1 - mean cos(in, out)) by layer:");
  for (double v : m.layer) std::printf(" %.3f", v);
  std::printf("\nmetrics of %s on %s positions -> %s\n", ckpt.c_str(), WithCommas(m.tokens).c_str(),
              out.c_str());
  return absl::OkStatus();
}

absl::Status RunPrune(const CommandLine& cl) {
  const std::string base = cl.base, final_out = cl.out;
  if (base.empty() || final_out.empty()) {
    return absl::InvalidArgumentError("prune needs --base DIR and --out DIR");
  }
  HILNAS_ASSIGN_OR_RETURN(OutputFolder dest,
                          OutputFolder::Prepare(final_out, cl.overwrite, {base, cl.metrics}));
  const std::string& out = dest.staging();
  HILNAS_ASSIGN_OR_RETURN(Backbone b, LoadBackbone(base, cl.metrics));
  Decoder& backbone = *b.model;
  Arch target;
  if (!cl.shape.empty() || !cl.arch.empty()) {
    HILNAS_ASSIGN_OR_RETURN(target, ArchOf(cl));
  } else {
    HILNAS_ASSIGN_OR_RETURN(target, OverrideShape(backbone.arch(), cl.layers, cl.d_model, cl.d_ffn,
                                                  cl.pattern, cl.window));
  }
  PruneOptions po;
  po.block_size = cl.block_size;
  if (target.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    // A KV-prediction candidate: base, auxiliary/ and kv_predictor.safetensors.
    HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeOf(cl));
    HILNAS_RETURN_IF_ERROR(PruneToCheckpoint(b, target, po, out, storage));
    HILNAS_RETURN_IF_ERROR(dest.Commit());
    const ParameterCount c = CountParameters(target);
    std::printf(
        "%s: KV-prediction candidate, base %d layers, d_model %d, d_ffn %d, pattern %s "
        "(%s parameters); auxiliary and predictor %s parameters\n",
        final_out.c_str(), target.num_layers, target.d_model, target.d_ffn,
        PatternString(target.attention).c_str(), WithCommas(c.model()).c_str(),
        WithCommas(c.auxiliary + c.predictor).c_str());
    return absl::OkStatus();
  }
  HILNAS_ASSIGN_OR_RETURN(PrunePlan plan, PlanPrune(b.metrics, backbone.arch(), target, po));
  HILNAS_ASSIGN_OR_RETURN(Decoder pruned, ApplyPrune(backbone, plan, target));
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeOf(cl));
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(pruned, out, storage));
  HILNAS_RETURN_IF_ERROR(dest.Commit());
  std::string kept;
  for (int l : plan.layers) absl::StrAppend(&kept, kept.empty() ? "" : ",", l);
  std::printf(
      "%s: %d layers (backbone layers %s kept), d_model %d of %d, d_ffn %d of %d, "
      "pattern %s, %s parameters (backbone %s)\n",
      final_out.c_str(), target.num_layers, kept.c_str(), target.d_model, backbone.arch().d_model,
      target.d_ffn, backbone.arch().d_ffn, PatternString(target.attention).c_str(),
      WithCommas(CountParameters(target).model()).c_str(),
      WithCommas(CountParameters(backbone.arch()).model()).c_str());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenSplit> LoadSplit(const std::string& path, int64_t vocab, int64_t seq_len,
                                     double heldout) {
  if (path.empty()) return absl::InvalidArgumentError("give --tokens FILE (see `hilnas corpus`)");
  HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ReadTokenFile(path, vocab));
  auto split = SplitTokens(std::move(ids), heldout, seq_len + 1);
  if (!split.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", split.status().message()));
  return split;
}

int CorpusCommand(const std::vector<std::string>&, const CommandLine& cl) {
  absl::Status s = RunCorpus(cl);
  return s.ok() ? 0 : Fail(s);
}

int TrainCommand(const std::vector<std::string>&, const CommandLine& cl) {
  const std::string out = cl.out;
  if (out.empty()) return Fail(absl::InvalidArgumentError("train needs --out DIR"));
  absl::StatusOr<OutputFolder> dest =
      OutputFolder::Prepare(out, cl.overwrite, {cl.ckpt, cl.distill_from, cl.checkpoint_dir});
  if (!dest.ok()) return Fail(dest.status());
  auto r = RunTrain(cl, dest->staging());
  if (!r.ok()) return Fail(r.status());
  if (absl::Status s = dest->Commit(); !s.ok()) return Fail(s);
  std::printf("saved to %s\n", out.c_str());
  if (!cl.result_json.empty()) {
    // quality/trial_evaluator.h's ReadQualityJson reads this.
    const nlohmann::json j = {{"loss", r->final_eval_loss},
                              {"initial_loss", r->initial_eval_loss},
                              {"tokens", r->tokens},
                              {"seconds", r->seconds}};
    if (absl::Status s = WriteFileAtomically(cl.result_json, j.dump() + "\n"); !s.ok()) {
      return Fail(s);
    }
  }
  return 0;
}

int CalibrateCommand(const std::vector<std::string>&, const CommandLine& cl) {
  absl::Status s = RunCalibrate(cl, cl.ckpt, cl.tokens, cl.out.empty() ? cl.metrics : cl.out);
  return s.ok() ? 0 : Fail(s);
}

// The demo backbone's recipe, recorded in DIR/train.json and
// DIR/corpus.bin.json: the byte corpus
// of Debian English text, configs/demo-backbone.textproto trained from
// seed 0 with the options below, then calibrated on the training tokens.
int BackboneCommand(const std::vector<std::string>&, const CommandLine& cl) {
  const std::string out = cl.out;
  if (out.empty()) return Fail(absl::InvalidArgumentError("backbone needs --out DIR"));
  const std::string corpus = (fs::path(out) / "corpus.bin").string();
  std::error_code ec;
  // The recipe writes several files into DIR in turn; it refuses a folder
  // that holds something else unless --overwrite (the same rule as prune).
  if (fs::exists(out, ec) && !fs::is_empty(out, ec) && !cl.overwrite) {
    return Fail(absl::AlreadyExistsError(absl::StrCat(
        "--out ", out, " exists and is not empty; choose a new folder or pass --overwrite")));
  }
  fs::create_directories(out, ec);
  // The recipe: each step gets a copy of the command line with its own
  // settings, so nothing set here leaks into another step.
  CommandLine corpus_cl = cl;
  corpus_cl.out = corpus;
  if (absl::Status s = RunCorpus(corpus_cl); !s.ok()) return Fail(s);
  CommandLine train = cl;
  if (train.arch.empty() && train.shape.empty()) {
    train.arch = std::string(HILNAS_SOURCE_DIR) + "/configs/demo-backbone.textproto";
  }
  train.tokens = corpus;
  train.ckpt = "";
  train.steps = cl.backbone_steps;
  train.batch_size = 16;
  train.seq_len = 128;
  train.lr = 3e-3;
  train.warmup_steps = 30;
  train.eval_every = 100;
  train.checkpoint_dir = (fs::path(out) / "training").string();
  auto r = RunTrain(train, out);
  if (!r.ok()) return Fail(r.status());
  absl::Status s = RunCalibrate(cl, out, corpus, (fs::path(out) / "metrics.json").string());
  if (!s.ok()) return Fail(s);
  fs::remove_all(fs::path(out) / "training", ec);
  return 0;
}

int PruneCommand(const std::vector<std::string>&, const CommandLine& cl) {
  absl::Status s = RunPrune(cl);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace hilnas::tools
