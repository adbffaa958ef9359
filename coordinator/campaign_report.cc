#include "coordinator/campaign_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/campaign_config.h"
#include "nlohmann/json.hpp"
#include "util/svg_plot.h"

namespace hilnas {

std::string ArchSummary(const ArchSpec& a) {
  std::string pattern;
  for (int t : a.attention()) pattern += t == FULL ? 'F' : t == SLIDING_WINDOW ? 'W' : 'S';
  std::string s =
      absl::StrFormat("L%d d%d f%d %s", a.num_layers(), a.d_model(), a.d_ffn(), pattern);
  if (a.has_kv_prediction()) absl::StrAppend(&s, " +KVP");
  if (a.kv_cache() == SLIM) absl::StrAppend(&s, " +slim");
  if (a.ppd().k() > 0) absl::StrAppend(&s, " +ppd", a.ppd().layer(), "/", a.ppd().k());
  return s;
}

const TaskScore* FindTaskScore(const Trial& t, const std::string& task_metric) {
  const size_t slash = task_metric.find('/');
  const std::string task = task_metric.substr(0, slash);
  const std::string metric = slash == std::string::npos ? "" : task_metric.substr(slash + 1);
  for (const TaskScore& s : t.task_scores()) {
    if (s.task() == task && (metric.empty() || s.metric() == metric)) return &s;
  }
  return nullptr;
}

void MergeTaskScores(const std::vector<TaskScoreValue>& scores, Trial& t) {
  for (const TaskScoreValue& v : scores) {
    TaskScore* slot = nullptr;
    for (TaskScore& old : *t.mutable_task_scores()) {
      if (old.task() == v.task && old.metric() == v.metric) slot = &old;
    }
    if (slot == nullptr) slot = t.add_task_scores();
    slot->set_task(v.task);
    slot->set_metric(v.metric);
    slot->set_value(v.value);
    slot->set_std_err(v.stderr_);
    slot->set_n(v.n);
  }
}

double QualityObjective(const CampaignConfig& c, const Trial& t) {
  if (c.quality_task().empty()) return t.loss();
  const TaskScore* s = FindTaskScore(t, c.quality_task());
  return s == nullptr ? NAN : 1 - s->value();
}

std::string QualityObjectiveName(const CampaignConfig& c) {
  if (c.quality_task().empty()) return "loss";
  std::string name = c.quality_task();
  std::replace(name.begin(), name.end(), '/', ' ');
  return absl::StrCat("1 - ", name);
}

Objectives ReferenceVector(const CampaignConfig& c, const ReferencePoint& r,
                           const std::vector<Objective>& objectives) {
  Objectives out;
  for (Objective o : objectives) {
    out.push_back(o == LOSS     ? (c.quality_task().empty() ? r.loss() : r.task_error())
                  : o == TTFT   ? r.ttft_ms()
                  : o == DECODE ? r.decode_ms()
                                : r.memory_mb());
  }
  return out;
}

Objectives TrialObjectives(const CampaignConfig& c, const Trial& t,
                           const std::vector<Objective>& objectives) {
  Objectives out;
  for (Objective o : objectives) {
    out.push_back(o == LOSS     ? QualityObjective(c, t)
                  : o == TTFT   ? t.predicted_ttft_ms()
                  : o == DECODE ? t.predicted_decode_ms()
                                : t.memory_mb());
  }
  return out;
}

FrontView ComputeFront(const CampaignRecord& record, const std::vector<Trial>& trials) {
  FrontView v;
  v.objectives = CampaignObjectives(record.config);
  v.reference = ReferenceVector(record.config, record.reference, v.objectives);
  std::vector<Objectives> points;
  for (const Trial& t : trials) {
    if (t.stage() == 2 && t.state() == DONE) {
      v.evaluated.push_back(&t);
      points.push_back(TrialObjectives(record.config, t, v.objectives));
    }
  }
  v.on_front.assign(points.size(), false);
  for (int i : NonDominated(points)) v.on_front[i] = true;
  if (record.stage >= 2) v.hypervolume = Hypervolume(points, v.reference);
  return v;
}

std::string EvaluationSummary(const Trial& t) {
  return absl::StrCat(t.eval_job().empty() ? "(submitting)" : t.eval_job(), " ", t.eval_state(),
                      t.eval_node().empty() ? "" : " on ", t.eval_node());
}

namespace {

// What the campaign's figures are for: the precision agents time at, and
// the one its loss is scored at (a campaign from before issue 36: f32).
// " with q8_0 KV cache" where the cache is not kept at the compute dtype
// (no comma: the text is a CSV field too).
std::string CacheSuffix(const std::string& kv) {
  return kv.empty() || kv == "f32" ? "" : absl::StrCat(" with ", kv, " KV cache");
}
std::string WeightPrecision(const CampaignConfig& c) {
  const Precision p = c.benchmark().precision();
  return p == PRECISION_UNSPECIFIED ? "fp32" : absl::AsciiStrToLower(Precision_Name(p));
}
std::string LatencyPrecision(const CampaignConfig& c) {
  return absl::StrCat(WeightPrecision(c), CacheSuffix(c.benchmark().kv_dtype()));
}
std::string LossPrecision(const CampaignConfig& c) {
  const std::string& d = c.train().eval_weight_dtype();
  return absl::StrCat(d.empty() ? "as trained" : d, CacheSuffix(c.train().eval_kv_dtype()));
}

}  // namespace

std::string DeploymentSummary(const CampaignConfig& c) {
  const int threads = c.benchmark().threads();
  return absl::StrFormat("latency at %s weights%s, %s, TTFT at %d tokens; loss %s%s",
                         WeightPrecision(c), CacheSuffix(c.benchmark().kv_dtype()),
                         threads > 0 ? absl::StrCat(threads, " thread(s)") : "the agent's threads",
                         c.ttft_prompt_tokens(),
                         c.train().eval_weight_dtype().empty() ? "" : "after ", LossPrecision(c));
}

std::string FrontSummary(const CampaignRecord& record, const std::vector<Trial>& trials) {
  const FrontView v = ComputeFront(record, trials);
  const int front = static_cast<int>(std::count(v.on_front.begin(), v.on_front.end(), true));
  std::string ref;
  for (size_t k = 0; k < v.objectives.size(); ++k) {
    absl::StrAppend(&ref, k ? ", " : "", absl::AsciiStrToLower(Objective_Name(v.objectives[k])),
                    " ", absl::StrFormat("%.4g", v.reference[k]));
  }
  return absl::StrFormat("%zu trials evaluated, %d on the front, hypervolume %.4g against (%s)",
                         v.evaluated.size(), front, v.hypervolume, ref);
}

namespace {

std::string Ms(double v) { return v > 0 ? absl::StrFormat("%.1f", v) : "-"; }

// Every "task/metric" some trial of `trials` has a score for, in the order
// first seen (a campaign's tasks in config order, then reported ones).
std::vector<std::string> TaskColumns(const std::vector<const Trial*>& trials) {
  std::vector<std::string> out;
  for (const Trial* t : trials) {
    for (const TaskScore& s : t->task_scores()) {
      const std::string key = absl::StrCat(s.task(), "/", s.metric());
      if (std::find(out.begin(), out.end(), key) == out.end()) out.push_back(key);
    }
  }
  return out;
}

}  // namespace

std::string ParetoTable(const CampaignRecord& record, const std::vector<Trial>& trials, bool all) {
  const FrontView v = ComputeFront(record, trials);
  std::vector<const Trial*> shown;
  for (const Trial& t : trials) shown.push_back(&t);
  const std::vector<std::string> tasks = TaskColumns(all ? shown : v.evaluated);
  std::string task_head, task_rule;
  for (const std::string& k : tasks) {
    std::string name = k;
    std::replace(name.begin(), name.end(), '/', ' ');
    absl::StrAppend(&task_head, " ", name, " |");
    absl::StrAppend(&task_rule, "---:|");
  }
  std::string s = absl::StrCat(
      "| trial | stage | state | provenance | architecture | parameters | TTFT ms (pred) | TTFT ms "
      "(meas) | decode ms/tok | memory MB | loss |",
      task_head, " front |\n|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|", task_rule,
      ":---:|\n");
  auto row = [&](const Trial& t, bool front) {
    std::string scores;
    for (const std::string& k : tasks) {
      const TaskScore* ts = FindTaskScore(t, k);
      absl::StrAppend(&scores, " ",
                      ts == nullptr ? std::string("-")
                                    : absl::StrFormat("%.3f ± %.3f", ts->value(), ts->std_err()),
                      " |");
    }
    const double decode = t.has_latency() && t.latency().summaries_size() > 0
                              ? t.latency().summaries(0).decode_median_ms_per_token()
                              : t.predicted_decode_ms();
    absl::StrAppend(
        &s, absl::StrFormat(
                "| %d | %d | %s | %s | %s | %d | %s | %s | %s | %.1f | %s |%s %s |\n", t.id(),
                t.stage(), absl::AsciiStrToLower(TrialState_Name(t.state())), t.provenance(),
                ArchSummary(t.arch()), t.parameters(), Ms(t.predicted_ttft_ms()),
                Ms(t.measured_ttft_ms()), decode > 0 ? absl::StrFormat("%.2f", decode) : "-",
                t.memory_mb(),
                t.stage() == 2 && t.state() == DONE ? absl::StrFormat("%.4f", t.loss()) : "-",
                scores, front ? "*" : ""));
  };
  if (all) {
    for (const Trial& t : trials) {
      auto it = std::find(v.evaluated.begin(), v.evaluated.end(), &t);
      row(t, it != v.evaluated.end() && v.on_front[it - v.evaluated.begin()]);
    }
  } else {
    for (size_t i = 0; i < v.evaluated.size(); ++i) row(*v.evaluated[i], v.on_front[i]);
  }
  return s;
}

std::string ParetoCsv(const CampaignRecord& record, const std::vector<Trial>& trials) {
  const FrontView v = ComputeFront(record, trials);
  const std::vector<std::string> tasks = TaskColumns(v.evaluated);
  std::string s =
      "trial,provenance,layers,d_model,d_ffn,pattern,parameters,predicted_ttft_ms,"
      "measured_ttft_ms,predicted_decode_ms,memory_mb,loss,on_front,latency_precision,"
      "loss_precision";
  // A task column's name: TASK:METRIC and TASK:METRIC:stderr (task names
  // are config names; a comma or quote in one is replaced).
  for (const std::string& k : tasks) {
    std::string name = k;
    std::replace(name.begin(), name.end(), '/', ':');
    for (char& ch : name) {
      if (ch == ',' || ch == '"' || ch == '\n') ch = '_';
    }
    absl::StrAppend(&s, ",", name, ",", name, ":stderr");
  }
  s += "\n";
  const std::string latency_precision = LatencyPrecision(record.config),
                    loss_precision = LossPrecision(record.config);
  for (size_t i = 0; i < v.evaluated.size(); ++i) {
    const Trial& t = *v.evaluated[i];
    std::string pattern = ArchSummary(t.arch());
    pattern = pattern.substr(pattern.rfind(' ') + 1);
    absl::StrAppend(
        &s, absl::StrFormat("%d,%s,%d,%d,%d,%s,%d,%.4f,%.4f,%.4f,%.3f,%.6f,%d,%s,%s", t.id(),
                            t.provenance(), t.arch().num_layers(), t.arch().d_model(),
                            t.arch().d_ffn(), pattern, t.parameters(), t.predicted_ttft_ms(),
                            t.measured_ttft_ms(), t.predicted_decode_ms(), t.memory_mb(), t.loss(),
                            v.on_front[i] ? 1 : 0, latency_precision, loss_precision));
    for (const std::string& k : tasks) {
      const TaskScore* ts = FindTaskScore(t, k);
      absl::StrAppend(&s, ts == nullptr ? ",," : absl::StrFormat(",%.6f,%.6f", ts->value(), ts->std_err()));
    }
    s += "\n";
  }
  return s;
}

std::string ParetoJson(const CampaignRecord& record, const std::vector<Trial>& trials) {
  const FrontView v = ComputeFront(record, trials);
  nlohmann::json j;
  j["campaign"] = record.config.name();
  j["state"] = std::string(CampaignStateName(record.state));
  j["stage"] = record.stage;
  j["hypervolume"] = v.hypervolume;
  j["deployment"] = {{"latency_precision", LatencyPrecision(record.config)},
                     {"threads", record.config.benchmark().threads()},
                     {"ttft_prompt_tokens", record.config.ttft_prompt_tokens()},
                     {"loss_precision", LossPrecision(record.config)}};
  for (size_t k = 0; k < v.objectives.size(); ++k) {
    j["reference"][absl::AsciiStrToLower(Objective_Name(v.objectives[k]))] = v.reference[k];
  }
  j["trials"] = nlohmann::json::array();
  for (size_t i = 0; i < v.evaluated.size(); ++i) {
    const Trial& t = *v.evaluated[i];
    j["trials"].push_back({{"trial", t.id()},
                           {"provenance", t.provenance()},
                           {"architecture", ArchSummary(t.arch())},
                           {"layers", t.arch().num_layers()},
                           {"d_model", t.arch().d_model()},
                           {"d_ffn", t.arch().d_ffn()},
                           {"parameters", t.parameters()},
                           {"predicted_ttft_ms", t.predicted_ttft_ms()},
                           {"measured_ttft_ms", t.measured_ttft_ms()},
                           {"predicted_decode_ms", t.predicted_decode_ms()},
                           {"memory_mb", t.memory_mb()},
                           {"loss", t.loss()},
                           {"on_front", static_cast<bool>(v.on_front[i])}});
    nlohmann::json scores = nlohmann::json::array();
    for (const TaskScore& ts : t.task_scores()) {
      scores.push_back({{"task", ts.task()},
                        {"metric", ts.metric()},
                        {"value", ts.value()},
                        {"stderr", ts.std_err()},
                        {"n", ts.n()}});
    }
    if (!scores.empty()) j["trials"].back()["tasks"] = std::move(scores);
  }
  if (!record.config.quality_task().empty()) j["quality_objective"] = QualityObjectiveName(record.config);
  return j.dump(2) + "\n";
}

std::string ParetoSvg(const CampaignRecord& record, const std::vector<Trial>& trials,
                      const std::vector<std::pair<std::string, double>>& markers) {
  const FrontView v = ComputeFront(record, trials);
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  auto extend = [&](double x, double y) {
    if (x > 0) x0 = std::min(x0, x), x1 = std::max(x1, x);
    if (std::isfinite(y)) y0 = std::min(y0, y), y1 = std::max(y1, y);
  };
  const CampaignConfig& c = record.config;
  for (const Trial* t : v.evaluated) extend(t->predicted_ttft_ms(), QualityObjective(c, *t));
  const bool has_reference = v.reference.size() >= 2 && v.reference[1] > 0;
  if (has_reference) extend(v.reference[1], v.reference[0]);
  for (const auto& m : markers) extend(m.second, NAN);
  if (!(x1 > x0)) x0 = 1, x1 = 10;
  if (!(y1 > y0)) y0 = 0, y1 = 1;
  // 5% room on each side: a factor 10^0.05 on the log axis.
  const double pad = std::pow(10, 0.05);
  const PlotAxis x("TTFT ms (predicted, log scale)", x0 / pad, x1 * pad, /*log=*/true);
  PlotAxis y(c.quality_task().empty() ? std::string("held-out loss")
                                      : absl::StrCat(QualityObjectiveName(c), " (error)"),
             y0 - 0.05 * (y1 - y0), y1 + 0.05 * (y1 - y0));
  y.tick_decimals = 3;
  SvgPlot plot(720, 480, record.config.name(), x, y, FrontSummary(record, trials));
  if (has_reference) {
    const PlotStyle dashed = Stroke("#d62728", 1, "5");
    plot.Segment(v.reference[1], y.min, v.reference[1], y.max, dashed);
    plot.Segment(x.min, v.reference[0], x.max, v.reference[0], dashed);
    plot.Point(v.reference[1], v.reference[0], Dot("#d62728", 5));
    plot.Label(v.reference[1], v.reference[0], "reference", "#d62728", -70, -8);
  }
  for (const auto& [label, ms] : markers) {
    plot.Segment(ms, y.min, ms, y.max, Stroke("#2ca02c", 1, "2 3"));
    plot.Label(ms, y.max, label, "#2ca02c", -3, 6, /*vertical=*/true);
  }
  // The front as a staircase in (TTFT, loss); the legend sits in the
  // lower left, the corner no trial reaches.
  std::vector<std::pair<double, double>> front;
  for (size_t i = 0; i < v.evaluated.size(); ++i) {
    if (v.on_front[i]) {
      front.push_back({v.evaluated[i]->predicted_ttft_ms(), QualityObjective(c, *v.evaluated[i])});
    }
  }
  std::sort(front.begin(), front.end());
  plot.Curve(front, Stroke("#ff7f0e", 2), /*steps=*/true);
  const PlotStyle trial_style = Dot("#1f77b4", 3, 0.75);
  const PlotStyle front_style = Dot("#ff7f0e", 5, 0.75);
  for (size_t i = 0; i < v.evaluated.size(); ++i) {
    const Trial& t = *v.evaluated[i];
    plot.Point(t.predicted_ttft_ms(), QualityObjective(c, t),
               v.on_front[i] ? front_style : trial_style,
               absl::StrFormat("trial %d: %s, loss %.4f%s, TTFT %.1f ms", t.id(),
                               ArchSummary(t.arch()), t.loss(),
                               c.quality_task().empty()
                                   ? std::string()
                                   : absl::StrFormat(", %s %.4f", QualityObjectiveName(c),
                                                     QualityObjective(c, t)),
                               t.predicted_ttft_ms()));
  }
  plot.Legend("Pareto front", front_style);
  plot.Legend("trial", trial_style);
  return plot.Render();
}

}  // namespace hilnas
