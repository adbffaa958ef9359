#include "coordinator/campaign_config.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/checkpoint.h"
#include "model/quant.h"
#include "proto/benchmark_request.h"
#include "pruner/metrics.h"
#include "pruner/prune.h"
#include "quality/evaluator.h"
#include "quality/tasks.h"
#include "search/strategy.h"
#include "search_space/sobol.h"
#include "search_space/space.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

// Posterior draws qNEHVI may hold at once (see ValidateCampaignConfig).
constexpr double kMaxAcquisitionBytes = 2.0 * (1 << 30);

namespace fs = std::filesystem;

}  // namespace

CampaignConfig WithCampaignDefaults(CampaignConfig c) {
  if (!c.has_search_space()) *c.mutable_search_space() = DefaultSearchSpace();
  auto set = [](auto getter, auto setter, auto value) {
    if (getter() == decltype(getter()){}) setter(value);
  };
  set([&] { return c.batch_size(); }, [&](int v) { c.set_batch_size(v); }, 8);
  set([&] { return c.stage1_latency_points(); }, [&](int v) { c.set_stage1_latency_points(v); },
      64);
  set([&] { return c.stage1_sobol_points(); }, [&](int v) { c.set_stage1_sobol_points(v); },
      std::max(2, c.stage1_latency_points() / 2));
  set([&] { return c.stage1_target_r2(); }, [&](double v) { c.set_stage1_target_r2(v); }, 0.9);
  set([&] { return c.stage2_trials(); }, [&](int v) { c.set_stage2_trials(v); }, 64);
  set([&] { return c.stage2_initial_points(); }, [&](int v) { c.set_stage2_initial_points(v); },
      2 * c.batch_size());
  set([&] { return c.strategy(); }, [&](std::string v) { c.set_strategy(v); },
      std::string(StrategyName(Strategy::kQnehvi)));
  set([&] { return c.candidates(); }, [&](int v) { c.set_candidates(v); }, 1000);
  set([&] { return c.mc_samples(); }, [&](int v) { c.set_mc_samples(v); }, 128);
  set([&] { return c.max_failed_fraction(); }, [&](double v) { c.set_max_failed_fraction(v); },
      0.25);
  set([&] { return c.ttft_prompt_tokens(); }, [&](int v) { c.set_ttft_prompt_tokens(v); }, 1024);
  set([&] { return c.backbone_metrics(); }, [&](std::string v) { c.set_backbone_metrics(v); },
      c.backbone_checkpoint().empty() ? std::string() : MetricsFileName(c.backbone_checkpoint()));
  set([&] { return c.quality_evaluator(); }, [&](std::string v) { c.set_quality_evaluator(v); },
      std::string("in-process"));
  if (!c.quality_task().empty() && c.reference().task_error() == 0) {
    c.mutable_reference()->set_task_error(1.0);
  }
  set([&] { return c.quality_timeout_s(); }, [&](double v) { c.set_quality_timeout_s(v); }, 3600.0);
  TrainRecipe* t = c.mutable_train();
  set([&] { return t->steps(); }, [&](int v) { t->set_steps(v); }, 20);
  set([&] { return t->batch_size(); }, [&](int v) { t->set_batch_size(v); }, 8);
  set([&] { return t->seq_len(); }, [&](int v) { t->set_seq_len(v); }, 128);
  set([&] { return t->lr(); }, [&](double v) { t->set_lr(v); }, 1e-3);
  set([&] { return t->warmup_steps(); }, [&](int v) { t->set_warmup_steps(v); },
      std::max(1, t->steps() / 10));
  set([&] { return t->eval_windows(); }, [&](int v) { t->set_eval_windows(v); }, 64);
  set([&] { return t->heldout_fraction(); }, [&](double v) { t->set_heldout_fraction(v); }, 0.05);
  BenchmarkRequest* b = c.mutable_benchmark();
  set([&] { return b->warmup_runs(); }, [&](int v) { b->set_warmup_runs(v); }, 1);
  set([&] { return b->repeats(); }, [&](int v) { b->set_repeats(v); }, 3);
  set([&] { return b->max_repeats(); }, [&](int v) { b->set_max_repeats(v); }, 5);
  set([&] { return b->max_rel_spread(); }, [&](double v) { b->set_max_rel_spread(v); }, 0.05);
  set([&] { return b->decode_tokens(); }, [&](int v) { b->set_decode_tokens(v); }, 8);
  set([&] { return b->prefill_chunk(); }, [&](int v) { b->set_prefill_chunk(v); }, 1024);
  return c;
}

std::vector<Objective> CampaignObjectives(const CampaignConfig& config) {
  std::vector<Objective> out = {LOSS, TTFT};
  for (int o : config.objectives()) out.push_back(static_cast<Objective>(o));
  return out;
}

namespace {

absl::Status CheckBackbone(const CampaignConfig& c, const Space& space, const std::string& where) {
  const std::string config_json = ConfigFileName(c.backbone_checkpoint());
  absl::StatusOr<Arch> backbone = ReadConfigJson(config_json);
  if (!backbone.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "backbone_checkpoint: ", backbone.status().message()));
  }
  absl::StatusOr<ActivationMetrics> metrics = LoadMetrics(c.backbone_metrics());
  if (!metrics.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "backbone_metrics: ", metrics.status().message(),
                     " (`hilnas calibrate --ckpt ", c.backbone_checkpoint(), "` makes them)"));
  }
  // Every member must be prunable: check the widest, deepest member and a
  // Sobol sample (attention on layers, widths on the grid, heads).
  HILNAS_ASSIGN_OR_RETURN(SobolSample sample, SampleSobol(space, 16, c.seed()));
  std::vector<Arch> probes = sample.archs;
  std::vector<double> top(space.dimensions(), 0.999999);
  if (absl::StatusOr<Arch> widest = space.Decode(top); widest.ok()) {
    for (Attention& a : widest->attention) a = Attention::kFull;
    probes.push_back(*widest);
  }
  PruneOptions po;
  po.block_size = space.block_size();
  for (const Arch& probe : probes) {
    // A KV-prediction member prunes its base and, for KVP-C, its auxiliary.
    Arch a = probe;
    a.kv_prediction = KvPredictionSpec();
    absl::StatusOr<PrunePlan> plan = PlanPrune(*metrics, *backbone, a, po);
    if (plan.ok() && probe.kv_prediction.kind == KvPredictionSpec::Kind::kCanonical) {
      plan = PlanPrune(*metrics, *backbone, probe.kv_prediction.canonical[0], po);
    }
    if (!plan.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "search_space: the member ", a.num_layers, " layers, d_model ",
                       a.d_model, ", d_ffn ", a.d_ffn, ", pattern ", PatternString(a.attention),
                       " cannot be pruned from the backbone ", c.backbone_checkpoint(), ": ",
                       plan.status().message()));
    }
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT naming the config's origin, the field and why.
using Bad = std::function<absl::Status(const std::string& field, const std::string& why)>;

struct Bound {
  const char* field;
  int64_t value, max;
};

absl::Status CheckBounds(const CampaignConfig& c, const Bad& bad) {
  // Upper bounds, checked here at create: a campaign that would exhaust the
  // coordinator's memory or CPU in stage 2 must never be stored (it would be
  // picked up again on every restart).
  for (const Bound& b :
       {Bound{"batch_size", c.batch_size(), 256},
        Bound{"stage1_latency_points", c.stage1_latency_points(), 100'000},
        Bound{"stage2_trials", c.stage2_trials(), 100'000},
        Bound{"stage2_initial_points", c.stage2_initial_points(), 100'000},
        Bound{"candidates", c.candidates(), 1'000'000}, Bound{"mc_samples", c.mc_samples(), 65'536},
        Bound{"ttft_prompt_tokens", c.ttft_prompt_tokens(), kMaxContext}}) {
    if (b.value > b.max) return bad(b.field, absl::StrCat(b.value, " exceeds ", b.max));
  }
  {
    // qNEHVI holds mc_samples joint draws at every candidate and observed
    // trial, per objective, in doubles (search/acquisition.cc).
    const double draws_bytes = 8.0 * c.mc_samples() *
                               (static_cast<double>(c.candidates()) + c.stage2_trials()) *
                               (2 + c.objectives_size());
    if (draws_bytes > kMaxAcquisitionBytes) {
      return bad("mc_samples",
                 absl::StrFormat("%d MC samples over %d candidates need %.1f GiB of posterior "
                                 "draws; this coordinator allows %.1f GiB (lower mc_samples or "
                                 "candidates)",
                                 c.mc_samples(), c.candidates(), draws_bytes / (1 << 30),
                                 kMaxAcquisitionBytes / double(1 << 30)));
    }
  }
  return absl::OkStatus();
}

// The reference point, the extra objectives and the benchmark request a
// trial's measurement will send.
absl::Status CheckObjectives(const CampaignConfig& c, const Space& space, const Bad& bad) {
  if (!(c.stage1_target_r2() <= 1)) {
    return bad("stage1_target_r2", absl::StrCat(c.stage1_target_r2(), " > 1"));
  }
  if (c.quality_task().empty() && !(c.reference().loss() > 0)) {
    return bad("reference.loss",
               absl::StrCat(c.reference().loss(), " must be positive (the paper uses 0.6)"));
  }
  if (!c.quality_task().empty() &&
      !(c.reference().task_error() > 0 && c.reference().task_error() <= 1)) {
    return bad("reference.task_error",
               absl::StrCat(c.reference().task_error(), " is not in (0, 1] (1 - score)"));
  }
  if (c.reference().ttft_ms() < 0) return bad("reference.ttft_ms", "is negative");
  std::set<int> seen;
  for (int o : c.objectives()) {
    if (o != DECODE && o != MEMORY) {
      return bad("objectives",
                 absl::StrCat(Objective_Name(o), " is not an extra objective (DECODE or MEMORY)"));
    }
    if (!seen.insert(o).second) return bad("objectives", Objective_Name(o) + " twice");
  }
  if (c.ttft_prompt_tokens() < 1) return bad("ttft_prompt_tokens", "< 1");
  BenchmarkRequest probe = c.benchmark();
  probe.clear_prompt_lengths();
  probe.add_prompt_lengths(c.ttft_prompt_tokens());
  absl::StatusOr<Arch> middle = space.Decode(std::vector<double>(space.dimensions(), 0.5));
  if (middle.ok()) *probe.mutable_arch() = ArchToProto(*middle);
  if (absl::Status s = ValidateBenchmarkRequest(probe); !s.ok()) {
    return bad("benchmark", std::string(s.message()));
  }
  return absl::OkStatus();
}

// Block-quantized deployments (benchmark precision Q4_0/Q8_0, or a loss
// after quantization) need every matrix row in whole blocks of 32: each
// searched width and the base's attention widths.
absl::Status CheckDeployment(const CampaignConfig& c, const Space& space, const Bad& bad) {
  const Precision p = c.benchmark().precision();
  const std::string& eval = c.train().eval_weight_dtype();
  if (!eval.empty() && eval != "f32" && eval != "f16" && eval != "bf16" && !ParseQuantType(eval)) {
    return bad("train.eval_weight_dtype",
               absl::StrCat("\"", eval, "\" is not one of f32, bf16, f16, q4_0, q8_0"));
  }
  const std::string& eval_kv = c.train().eval_kv_dtype();
  if (!eval_kv.empty() && eval_kv != "f32" && eval_kv != "f16" && eval_kv != "q8_0") {
    return bad("train.eval_kv_dtype",
               absl::StrCat("\"", eval_kv, "\" is not one of f32, f16, q8_0"));
  }
  // A q8_0 cache stores each head's row in whole blocks.
  for (const auto& [field, kv] :
       {std::pair<const char*, std::string>{"benchmark.kv_dtype", c.benchmark().kv_dtype()},
        {"train.eval_kv_dtype", eval_kv}}) {
    const int hd = c.search_space().base().head_dim();
    if (kv == "q8_0" && hd % kQuantBlock != 0) {
      return bad(field, absl::StrCat("q8_0 needs search_space.base.head_dim (", hd,
                                     ") in whole blocks of ", kQuantBlock));
    }
  }
  std::string format;
  if (p == Q4_0 || p == Q8_0) {
    format = absl::StrCat("benchmark.precision ", Precision_Name(p));
  } else if (ParseQuantType(eval)) {
    format = absl::StrCat("train.eval_weight_dtype ", eval);
  } else {
    return absl::OkStatus();
  }
  auto check = [&](const std::string& field, int width) -> absl::Status {
    if (width % kQuantBlock == 0) return absl::OkStatus();
    return bad(field, absl::StrCat("choice ", width, " is not a multiple of ", kQuantBlock,
                                   ", the block of ", format,
                                   " (prune widths in whole blocks: block_size 32, 64 or 128)"));
  };
  for (int w : space.model_choices()) HILNAS_RETURN_IF_ERROR(check("search_space.d_model", w));
  for (int w : space.ffn_choices()) HILNAS_RETURN_IF_ERROR(check("search_space.d_ffn", w));
  const ArchSpec& base = c.search_space().base();
  HILNAS_RETURN_IF_ERROR(
      check("search_space.base.num_heads x head_dim", base.num_heads() * base.head_dim()));
  return check("search_space.base.num_kv_heads x head_dim", base.num_kv_heads() * base.head_dim());
}

// The tasks scored after training, and the one that may replace the loss as
// the quality objective: every config and its data read here, at create.
absl::Status CheckTasks(const CampaignConfig& c, const Bad& bad) {
  if (c.task_limit() < 0) return bad("task_limit", absl::StrCat(c.task_limit(), " < 0"));
  if (c.tasks_size() > 64) return bad("tasks", absl::StrCat(c.tasks_size(), " tasks exceed 64"));
  const std::vector<std::string> paths(c.tasks().begin(), c.tasks().end());
  if (absl::Status s = TaskFlags(paths, c.task_limit(), "", "").status(); !s.ok()) {
    return bad("tasks", std::string(s.message()));
  }
  std::set<std::string> names;
  std::vector<std::string> metrics;  // TASK/METRIC, what quality_task may name
  for (int i = 0; i < c.tasks_size(); ++i) {
    // A sample is enough to check the config and its data's fields.
    absl::StatusOr<Task> t = LoadTask(c.tasks(i), /*limit=*/8);
    if (!t.ok()) return bad(absl::StrCat("tasks[", i, "]"), std::string(t.status().message()));
    if (!names.insert(t->config.name()).second) {
      return bad(absl::StrCat("tasks[", i, "]"),
                 absl::StrCat("a second task named \"", t->config.name(), "\""));
    }
    if (t->config.kind() == TaskConfig::GENERATE_UNTIL) {
      metrics.push_back(t->config.name() + "/exact_match");
    } else {
      metrics.push_back(t->config.name() + "/acc");
      metrics.push_back(t->config.name() + "/acc_norm");
    }
  }
  if (c.quality_task().empty()) return absl::OkStatus();
  const std::string want = c.quality_task().find('/') == std::string::npos
                               ? c.quality_task() + "/"
                               : c.quality_task();
  for (const std::string& m : metrics) {
    if (m == want || absl::StartsWith(m, want)) return absl::OkStatus();
  }
  return bad("quality_task",
             absl::StrCat("\"", c.quality_task(), "\" is none of the campaign's task metrics (",
                          metrics.empty() ? "no tasks" : absl::StrJoin(metrics, ", "), ")"));
}

// The in-process evaluator's data and recipe, or an evaluator's name.
absl::Status CheckEvaluator(const CampaignConfig& c, const Bad& bad) {
  if (c.quality_evaluator() == "in-process") {
    if (c.tokens().empty()) return bad("tokens", "the in-process evaluator needs a token file");
    if (!fs::exists(c.tokens())) {
      return bad("tokens", absl::StrCat(c.tokens(), " does not exist (`hilnas corpus --out ",
                                        c.tokens(), "` makes one)"));
    }
    const TrainRecipe& t = c.train();
    if (t.steps() < 1 || t.batch_size() < 1 || t.seq_len() < 2 || !(t.lr() > 0)) {
      return bad("train",
                 absl::StrCat("steps ", t.steps(), ", batch_size ", t.batch_size(), ", seq_len ",
                              t.seq_len(), ", lr ", t.lr(), " must all be positive"));
    }
    for (const Bound& b : {Bound{"train.steps", t.steps(), 10'000'000},
                           Bound{"train.batch_size", t.batch_size(), 4096},
                           Bound{"train.seq_len", t.seq_len(), 1 << 16},
                           Bound{"train.warmup_steps", t.warmup_steps(), 10'000'000},
                           Bound{"train.eval_windows", t.eval_windows(), 1'000'000}}) {
      if (b.value > b.max) return bad(b.field, absl::StrCat(b.value, " exceeds ", b.max));
    }
    if (!(t.lr() < 10)) return bad("train.lr", absl::StrCat(t.lr(), " is not below 10"));
    if (!(t.heldout_fraction() > 0 && t.heldout_fraction() < 1)) {
      return bad("train.heldout_fraction", absl::StrCat(t.heldout_fraction(), " is not in (0, 1)"));
    }
  } else if (c.quality_evaluator().empty() ||
             c.quality_evaluator().find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
                 std::string::npos) {
    return bad("quality_evaluator",
               absl::StrCat("\"", c.quality_evaluator(),
                            "\" is neither \"in-process\" nor an evaluator name (letters, digits, "
                            "- _ .): a config names an evaluator, it never carries a command; "
                            "commands are defined on the coordinator's command line "
                            "(--evaluator NAME=TEMPLATE)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCampaignConfig(const CampaignConfig& c, const std::string& origin) {
  const std::string where = origin.empty() ? "campaign config: " : origin + ": ";
  const Bad bad = [&](const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(where, field, ": ", why));
  };
  if (c.name().empty()) return bad("name", "is empty");
  for (char ch : c.name()) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') {
      return bad("name", absl::StrCat("\"", c.name(), "\" may hold only letters, digits, - _ ."));
    }
  }
  if (c.backbone_checkpoint().empty()) return bad("backbone_checkpoint", "is empty");
  absl::StatusOr<Space> space = Space::FromProto(c.search_space());
  if (!space.ok()) return bad("search_space", std::string(space.status().message()));
  if (c.batch_size() < 1) return bad("batch_size", absl::StrCat(c.batch_size(), " < 1"));
  if (c.max_in_flight() < 0 || c.max_in_flight() > 1024) {
    return bad("max_in_flight",
               absl::StrCat(c.max_in_flight(), " is outside 0..1024 (0: batch_size)"));
  }
  if (c.stage1_latency_points() < 4) {
    return bad("stage1_latency_points", absl::StrCat(c.stage1_latency_points(), " < 4"));
  }
  if (c.stage1_sobol_points() < 3 || c.stage1_sobol_points() > c.stage1_latency_points()) {
    return bad("stage1_sobol_points",
               absl::StrCat(c.stage1_sobol_points(), " is not in 3..stage1_latency_points (",
                            c.stage1_latency_points(), ")"));
  }
  if (c.stage2_trials() < 1) return bad("stage2_trials", absl::StrCat(c.stage2_trials(), " < 1"));
  if (static_cast<uint64_t>(c.stage1_latency_points()) > space->Size() ||
      static_cast<uint64_t>(c.stage2_trials()) > space->Size()) {
    return bad("stage2_trials", absl::StrCat("the space has only ", space->Size(), " members"));
  }
  absl::StatusOr<Strategy> strategy = ParseStrategy(c.strategy());
  if (!strategy.ok()) return bad("strategy", std::string(strategy.status().message()));
  if (*strategy == Strategy::kQnehvi && c.stage2_initial_points() < 2) {
    return bad("stage2_initial_points", "qNEHVI needs at least 2 initial trials");
  }
  if (c.max_failed_fraction() <= 0 || c.max_failed_fraction() > 1) {
    return bad("max_failed_fraction", absl::StrCat(c.max_failed_fraction(), " is not in (0, 1]"));
  }
  if (c.mc_samples() < 1 || c.candidates() < c.batch_size()) {
    return bad("candidates", absl::StrCat(c.candidates(), " candidates and ", c.mc_samples(),
                                          " MC samples for batches of ", c.batch_size()));
  }
  HILNAS_RETURN_IF_ERROR(CheckBounds(c, bad));
  HILNAS_RETURN_IF_ERROR(CheckObjectives(c, *space, bad));
  HILNAS_RETURN_IF_ERROR(CheckEvaluator(c, bad));
  HILNAS_RETURN_IF_ERROR(CheckTasks(c, bad));
  HILNAS_RETURN_IF_ERROR(CheckDeployment(c, *space, bad));
  return CheckBackbone(c, *space, where);
}

absl::StatusOr<CampaignConfig> ReadCampaignConfig(const std::string& path) {
  CampaignConfig c;
  HILNAS_RETURN_IF_ERROR(ReadTextProtoFile(path, &c));
  auto absolute = [](std::string* p) {
    if (!p->empty() && fs::path(*p).is_relative())
      *p = fs::absolute(*p).lexically_normal().string();
  };
  absolute(c.mutable_backbone_checkpoint());
  absolute(c.mutable_backbone_metrics());
  absolute(c.mutable_tokens());
  for (std::string& task : *c.mutable_tasks()) absolute(&task);
  c = WithCampaignDefaults(std::move(c));
  HILNAS_RETURN_IF_ERROR(ValidateCampaignConfig(c, path));
  return c;
}

}  // namespace hilnas
