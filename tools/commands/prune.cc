// `hilnas prune`: Prune(metrics, s) (MobileLLM-Flash Sec. 3.3) as a dense
// checkpoint, through the one prune path campaigns use (PruneToCheckpoint):
// plain, slim and KV-prediction targets alike.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "pruner/backbone.h"
#include "pruner/prune.h"
#include "search_space/counts.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

struct PruneCommandOptions {
  std::string base;
  std::string metrics;  // default BASE/metrics.json
  ArchFlags model;
  int32_t layers = 0;   // 0 = the backbone's
  int32_t d_model = 0;  // 0 = the backbone's
  int32_t d_ffn = 0;    // 0 = the backbone's
  std::string pattern;
  int32_t window = 0;
  int32_t block_size = 128;
  std::string out;
  bool overwrite = false;
  std::string dtype = "f32";
};

void PrintPruned(const std::string& out, const Arch& target, const Arch& backbone,
                 const PrunePlan& plan) {
  std::string kept;
  for (int l : plan.layers) absl::StrAppend(&kept, kept.empty() ? "" : ",", l);
  const ParameterCount c = CountParameters(target);
  std::printf(
      "%s: %d layers (backbone layers %s kept), d_model %d of %d, d_ffn %d of %d, "
      "pattern %s, %s parameters (backbone %s)%s\n",
      out.c_str(), target.num_layers, kept.c_str(), target.d_model, backbone.d_model,
      target.d_ffn, backbone.d_ffn, PatternString(target.attention).c_str(),
      WithCommas(c.model()).c_str(), WithCommas(CountParameters(backbone).model()).c_str(),
      target.kv_cache == KvLayout::kSlim ? "; slim KV cache (W_KV stored)" : "");
  if (target.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    std::printf("%s: KV-prediction candidate; auxiliary and predictor %s parameters\n",
                out.c_str(), WithCommas(c.auxiliary + c.predictor).c_str());
  }
}

absl::Status RunPrune(const PruneCommandOptions& o) {
  HILNAS_ASSIGN_OR_RETURN(OutputFolder dest,
                          OutputFolder::Prepare(o.out, o.overwrite, {o.base, o.metrics}));
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeOf(o.dtype));
  HILNAS_ASSIGN_OR_RETURN(Backbone b, LoadBackbone(o.base, o.metrics));
  const Arch backbone = b.model->arch();
  Arch target;
  if (o.model.given()) {
    HILNAS_ASSIGN_OR_RETURN(target, ArchOf(o.model));
  } else {
    HILNAS_ASSIGN_OR_RETURN(
        target, OverrideShape(backbone, o.layers, o.d_model, o.d_ffn, o.pattern, o.window));
  }
  PruneOptions po;
  po.block_size = o.block_size;
  PrunePlan plan;
  HILNAS_RETURN_IF_ERROR(PruneToCheckpoint(b, target, po, dest.staging(), storage, &plan));
  HILNAS_RETURN_IF_ERROR(dest.Commit());
  PrintPruned(o.out, target, backbone, plan);
  return absl::OkStatus();
}

}  // namespace

void AddPruneCommand(Cli& cli) {
  auto [app, o] = cli.Add<PruneCommandOptions>(
      "prune",
      "--base DIR [--metrics FILE] --shape NAME|--arch FILE|--layers N --d-model N\n"
      "    --d-ffn N --pattern FWS.. --window W --out DIR [--block-size 128]",
      "a dense pruned checkpoint (plain, slim or KV-prediction target)",
      [](const PruneCommandOptions& o) { return ExitCode(RunPrune(o)); });
  app->add_option("--base", o->base, "backbone checkpoint folder")->required();
  app->add_option("--metrics", o->metrics, "metrics file; default BASE/metrics.json");
  auto [shape, arch] = AddArchFlags(app, &o->model);
  CLI::Option_group* dims = app->add_option_group("target by dimensions");
  dims->add_option("--layers", o->layers, "target depth (0 = the backbone's)")
      ->check(CLI::Range(0, 4096));
  dims->add_option("--d-model", o->d_model, "target residual width (0 = the backbone's)")
      ->check(CLI::Range(0, 1 << 20));
  dims->add_option("--d-ffn", o->d_ffn, "target FFN width (0 = the backbone's)")
      ->check(CLI::Range(0, 1 << 22));
  dims->add_option("--pattern", o->pattern, "attention per target layer, F full W window S skip");
  dims->add_option("--window", o->window, "sliding window for W layers")
      ->check(CLI::Range(0, 1 << 24));
  dims->excludes(shape);
  dims->excludes(arch);
  app->add_option("--block-size", o->block_size,
                  "width block (MobileLLM-Flash Sec. 3.3 uses 128)")
      ->check(CLI::Range(1, 1 << 16));
  app->add_option("--out", o->out, "the pruned checkpoint's folder")->required();
  app->add_flag("--overwrite", o->overwrite,
                "replace an existing non-empty --out (never an input; written beside it, "
                "renamed into place)");
  app->add_option("--dtype", o->dtype, "storage dtype f32 | f16 | bf16");
}

}  // namespace hilnas::tools
