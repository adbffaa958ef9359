// `hilnas corpus | train | calibrate | prune | backbone`: the pruning half of
// MobileLLM-Flash's search (Sec. 3.3): token data, continued pretraining,
// activation metrics, Prune(metrics, s), and the demo backbone's recipe.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "absl/flags/flag.h"
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

ABSL_FLAG(std::string, tokens, "", "token file (uint16 ids; *.u32 for uint32)");
ABSL_FLAG(std::string, sources, "",
          "corpus: comma-separated text files or folders; default the Debian fortunes and "
          "common licences");
ABSL_FLAG(double, heldout, 0.05, "train: fraction of the token file's tail held out for eval");
ABSL_FLAG(int64_t, steps, 200, "train: optimiser steps");
ABSL_FLAG(int64_t, batch_size, 16, "train/calibrate: sequences per batch");
ABSL_FLAG(int64_t, seq_len, 128, "train/calibrate: tokens per sequence");
ABSL_FLAG(double, lr, 3e-3, "train: peak learning rate (AdamW)");
ABSL_FLAG(int64_t, warmup_steps, 20, "train: linear warm-up steps before cosine decay");
ABSL_FLAG(double, weight_decay, 0.1, "train: AdamW decoupled weight decay (not on norms)");
ABSL_FLAG(double, grad_clip, 1.0, "train: global gradient-norm clip; 0 = off");
ABSL_FLAG(std::string, distill_from, "", "train: teacher checkpoint for knowledge distillation");
ABSL_FLAG(double, distill_weight, 0.5, "train: KD weight when --distill-from is given");
ABSL_FLAG(int64_t, eval_every, 50, "train: steps between held-out evaluations");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "train: resumable checkpoints here (an existing one is resumed)");
ABSL_FLAG(int64_t, checkpoint_every, 100, "train: steps between resumable checkpoints");
ABSL_FLAG(int64_t, calib_tokens, 1 << 17, "calibrate: calibration positions used");
ABSL_FLAG(std::string, base, "", "prune: backbone checkpoint folder");
ABSL_FLAG(std::string, metrics, "", "prune/calibrate: metrics file; default BASE/metrics.json");
ABSL_FLAG(int32_t, layers, 0, "prune: target depth (0 = the backbone's)");
ABSL_FLAG(int32_t, d_model, 0, "prune: target residual width (0 = the backbone's)");
ABSL_FLAG(int32_t, d_ffn, 0, "prune: target FFN width (0 = the backbone's)");
ABSL_FLAG(std::string, pattern, "", "prune: attention per target layer, F full W window S skip");
ABSL_FLAG(int32_t, window, 0, "prune: sliding window for W layers");
ABSL_FLAG(int64_t, backbone_steps, 600, "backbone: training steps of the demo backbone recipe");
ABSL_FLAG(double, kvp_consistency_weight, -1,
          "train (KV prediction): weight of the L1 consistency loss; < 0 takes 1 / n_B (Tab. 2)");
ABSL_FLAG(double, kvp_aux_weight, 1, "train (KV prediction): weight of the auxiliary model's CE");
ABSL_FLAG(int32_t, block_size, 128, "prune: width block (MobileLLM-Flash Sec. 3.3 uses 128)");

namespace hilnas::tools {
namespace {

namespace fs = std::filesystem;

TrainOptions TrainOptionsFromFlags() {
  TrainOptions o;
  o.steps = absl::GetFlag(FLAGS_steps);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.warmup_steps = std::min(absl::GetFlag(FLAGS_warmup_steps), o.steps / 2);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.grad_clip = absl::GetFlag(FLAGS_grad_clip);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.seed = absl::GetFlag(FLAGS_seed);
  if (!absl::GetFlag(FLAGS_distill_from).empty())
    o.distill_weight = absl::GetFlag(FLAGS_distill_weight);
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

absl::StatusOr<TokenSplit> LoadSplit(const std::string& path, int64_t vocab, int64_t seq_len) {
  if (path.empty()) return absl::InvalidArgumentError("give --tokens FILE (see `hilnas corpus`)");
  HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ReadTokenFile(path, vocab));
  auto split = SplitTokens(std::move(ids), absl::GetFlag(FLAGS_heldout), seq_len + 1);
  if (!split.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", split.status().message()));
  return split;
}

absl::Status RunCorpus() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("corpus needs --out FILE");
  std::vector<std::string> sources = DefaultCorpusSources();
  if (const std::string s = absl::GetFlag(FLAGS_sources); !s.empty()) {
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
absl::StatusOr<TrainResult> RunTrainKvp(const std::string& ckpt, const std::string& out,
                                        const TrainOptions& o) {
  HILNAS_ASSIGN_OR_RETURN(KvPredictor kvp, LoadKvpCheckpoint(ckpt));
  KvpLossWeights weights;
  weights.consistency = absl::GetFlag(FLAGS_kvp_consistency_weight);
  weights.auxiliary = absl::GetFlag(FLAGS_kvp_aux_weight);
  HILNAS_ASSIGN_OR_RETURN(TokenSplit data, LoadSplit(absl::GetFlag(FLAGS_tokens),
                                                     kvp.base().arch().vocab_size, o.seq_len));
  std::printf("training the auxiliary model and KV predictor of %s (base frozen), %lld steps\n",
              ckpt.c_str(), static_cast<long long>(o.steps));
  HILNAS_ASSIGN_OR_RETURN(TrainResult r, TrainKvp(kvp, data, o, weights, PrintProgress));
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeFromFlags());
  HILNAS_RETURN_IF_ERROR(SaveKvpCheckpoint(kvp, out, storage));
  std::printf("held-out loss of the base over the predicted cache %.4f (from %.4f) -> %s\n",
              r.final_eval_loss, r.initial_eval_loss, out.c_str());
  return r;
}

absl::StatusOr<TrainResult> RunTrain(const std::string& out) {
  ApplyThreadsFlag();
  const TrainOptions o = TrainOptionsFromFlags();
  HILNAS_RETURN_IF_ERROR(o.Validate());
  if (const std::string ckpt = absl::GetFlag(FLAGS_ckpt); !ckpt.empty()) {
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ReadConfigJson(ckpt + "/config.json"));
    if (arch.kv_prediction.kind != KvPredictionSpec::Kind::kNone) return RunTrainKvp(ckpt, out, o);
  }
  std::unique_ptr<Decoder> model;
  if (const std::string ckpt = absl::GetFlag(FLAGS_ckpt); !ckpt.empty()) {
    HILNAS_ASSIGN_OR_RETURN(Decoder d, LoadCheckpoint(ckpt));
    model = std::make_unique<Decoder>(std::move(d));
  } else {
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromFlags());
    HILNAS_ASSIGN_OR_RETURN(Decoder d, Decoder::Create(arch, absl::GetFlag(FLAGS_seed)));
    model = std::make_unique<Decoder>(std::move(d));
  }
  std::unique_ptr<Decoder> teacher;
  if (const std::string t = absl::GetFlag(FLAGS_distill_from); !t.empty()) {
    HILNAS_ASSIGN_OR_RETURN(Decoder d, LoadCheckpoint(t));
    teacher = std::make_unique<Decoder>(std::move(d));
  }
  const Arch& arch = model->arch();
  HILNAS_ASSIGN_OR_RETURN(TokenSplit data,
                          LoadSplit(absl::GetFlag(FLAGS_tokens), arch.vocab_size, o.seq_len));
  std::printf(
      "training %s (%s parameters) on %s tokens (%s held out), %lld steps x %lld x %lld "
      "tokens, %d threads%s\n",
      arch.name.c_str(), WithCommas(CountParameters(arch).model()).c_str(),
      WithCommas(data.train.size()).c_str(), WithCommas(data.heldout.size()).c_str(),
      static_cast<long long>(o.steps), static_cast<long long>(o.batch_size),
      static_cast<long long>(o.seq_len), at::get_num_threads(),
      teacher ? absl::StrFormat(", KD weight %.2f", o.distill_weight).c_str() : "");
  HILNAS_ASSIGN_OR_RETURN(TrainResult r, Train(*model, teacher.get(), data, o, PrintProgress));
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeFromFlags());
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(*model, out, storage));
  const double chance = std::log(static_cast<double>(arch.vocab_size));
  nlohmann::json summary = {{"arch", arch.name},
                            {"tokens_file", absl::GetFlag(FLAGS_tokens)},
                            {"steps", o.steps},
                            {"batch_size", o.batch_size},
                            {"seq_len", o.seq_len},
                            {"lr", o.lr},
                            {"warmup_steps", o.warmup_steps},
                            {"weight_decay", o.weight_decay},
                            {"seed", o.seed},
                            {"distill_from", absl::GetFlag(FLAGS_distill_from)},
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

absl::Status RunCalibrate(const std::string& ckpt, const std::string& tokens_path,
                          std::string out) {
  ApplyThreadsFlag();
  if (ckpt.empty()) return absl::InvalidArgumentError("calibrate needs --ckpt DIR");
  if (out.empty()) out = (fs::path(ckpt) / "metrics.json").string();
  HILNAS_ASSIGN_OR_RETURN(Decoder model, LoadCheckpoint(ckpt));
  HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                          ReadTokenFile(tokens_path, model.arch().vocab_size));
  CalibrationOptions o;
  o.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.max_tokens = absl::GetFlag(FLAGS_calib_tokens);
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

absl::Status RunPrune() {
  const std::string base = absl::GetFlag(FLAGS_base), out = absl::GetFlag(FLAGS_out);
  if (base.empty() || out.empty()) {
    return absl::InvalidArgumentError("prune needs --base DIR and --out DIR");
  }
  HILNAS_ASSIGN_OR_RETURN(Backbone b, LoadBackbone(base, absl::GetFlag(FLAGS_metrics)));
  Decoder& backbone = *b.model;
  Arch target;
  if (!absl::GetFlag(FLAGS_shape).empty() || !absl::GetFlag(FLAGS_arch).empty()) {
    HILNAS_ASSIGN_OR_RETURN(target, ArchFromFlags());
  } else {
    HILNAS_ASSIGN_OR_RETURN(
        target, OverrideShape(backbone.arch(), absl::GetFlag(FLAGS_layers),
                              absl::GetFlag(FLAGS_d_model), absl::GetFlag(FLAGS_d_ffn),
                              absl::GetFlag(FLAGS_pattern), absl::GetFlag(FLAGS_window)));
  }
  PruneOptions po;
  po.block_size = absl::GetFlag(FLAGS_block_size);
  if (target.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    // A KV-prediction candidate: base, auxiliary/ and kv_predictor.safetensors.
    HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeFromFlags());
    HILNAS_RETURN_IF_ERROR(PruneToCheckpoint(b, target, po, out, storage));
    const ParameterCount c = CountParameters(target);
    std::printf(
        "%s: KV-prediction candidate, base %d layers, d_model %d, d_ffn %d, pattern %s "
        "(%s parameters); auxiliary and predictor %s parameters\n",
        out.c_str(), target.num_layers, target.d_model, target.d_ffn,
        PatternString(target.attention).c_str(), WithCommas(c.model()).c_str(),
        WithCommas(c.auxiliary + c.predictor).c_str());
    return absl::OkStatus();
  }
  HILNAS_ASSIGN_OR_RETURN(PrunePlan plan, PlanPrune(b.metrics, backbone.arch(), target, po));
  HILNAS_ASSIGN_OR_RETURN(Decoder pruned, ApplyPrune(backbone, plan, target));
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeFromFlags());
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(pruned, out, storage));
  std::string kept;
  for (int l : plan.layers) absl::StrAppend(&kept, kept.empty() ? "" : ",", l);
  std::printf(
      "%s: %d layers (backbone layers %s kept), d_model %d of %d, d_ffn %d of %d, "
      "pattern %s, %s parameters (backbone %s)\n",
      out.c_str(), target.num_layers, kept.c_str(), target.d_model, backbone.arch().d_model,
      target.d_ffn, backbone.arch().d_ffn, PatternString(target.attention).c_str(),
      WithCommas(CountParameters(target).model()).c_str(),
      WithCommas(CountParameters(backbone.arch()).model()).c_str());
  return absl::OkStatus();
}

}  // namespace

int CorpusCommand(const std::vector<std::string>&) {
  absl::Status s = RunCorpus();
  return s.ok() ? 0 : Fail(s);
}

int TrainCommand(const std::vector<std::string>&) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(absl::InvalidArgumentError("train needs --out DIR"));
  auto r = RunTrain(out);
  return r.ok() ? 0 : Fail(r.status());
}

int CalibrateCommand(const std::vector<std::string>&) {
  absl::Status s = RunCalibrate(
      absl::GetFlag(FLAGS_ckpt), absl::GetFlag(FLAGS_tokens),
      absl::GetFlag(FLAGS_out).empty() ? absl::GetFlag(FLAGS_metrics) : absl::GetFlag(FLAGS_out));
  return s.ok() ? 0 : Fail(s);
}

// The demo backbone's recipe, recorded in DIR/train.json and
// DIR/corpus.bin.json: the byte corpus
// of Debian English text, configs/demo-backbone.textproto trained from
// seed 0 with the options below, then calibrated on the training tokens.
int BackboneCommand(const std::vector<std::string>&) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(absl::InvalidArgumentError("backbone needs --out DIR"));
  const std::string corpus = (fs::path(out) / "corpus.bin").string();
  std::error_code ec;
  fs::create_directories(out, ec);
  absl::SetFlag(&FLAGS_out, corpus);
  if (absl::Status s = RunCorpus(); !s.ok()) return Fail(s);
  if (absl::GetFlag(FLAGS_arch).empty() && absl::GetFlag(FLAGS_shape).empty()) {
    absl::SetFlag(&FLAGS_arch, std::string(HILNAS_SOURCE_DIR) + "/configs/demo-backbone.textproto");
  }
  absl::SetFlag(&FLAGS_tokens, corpus);
  absl::SetFlag(&FLAGS_ckpt, "");
  absl::SetFlag(&FLAGS_steps, absl::GetFlag(FLAGS_backbone_steps));
  absl::SetFlag(&FLAGS_batch_size, 16);
  absl::SetFlag(&FLAGS_seq_len, 128);
  absl::SetFlag(&FLAGS_lr, 3e-3);
  absl::SetFlag(&FLAGS_warmup_steps, 30);
  absl::SetFlag(&FLAGS_eval_every, 100);
  absl::SetFlag(&FLAGS_checkpoint_dir, (fs::path(out) / "training").string());
  auto r = RunTrain(out);
  if (!r.ok()) return Fail(r.status());
  absl::Status s = RunCalibrate(out, corpus, (fs::path(out) / "metrics.json").string());
  if (!s.ok()) return Fail(s);
  fs::remove_all(fs::path(out) / "training", ec);
  return 0;
}

int PruneCommand(const std::vector<std::string>&) {
  absl::Status s = RunPrune();
  return s.ok() ? 0 : Fail(s);
}

}  // namespace hilnas::tools
