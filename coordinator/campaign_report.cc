#include "coordinator/campaign_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/campaign_config.h"
#include "nlohmann/json.hpp"

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

Objectives ReferenceVector(const ReferencePoint& r, const std::vector<Objective>& objectives) {
  Objectives out;
  for (Objective o : objectives) {
    out.push_back(o == LOSS     ? r.loss()
                  : o == TTFT   ? r.ttft_ms()
                  : o == DECODE ? r.decode_ms()
                                : r.memory_mb());
  }
  return out;
}

Objectives TrialObjectives(const Trial& t, const std::vector<Objective>& objectives) {
  Objectives out;
  for (Objective o : objectives) {
    out.push_back(o == LOSS     ? t.loss()
                  : o == TTFT   ? t.predicted_ttft_ms()
                  : o == DECODE ? t.predicted_decode_ms()
                                : t.memory_mb());
  }
  return out;
}

FrontView ComputeFront(const CampaignRecord& record, const std::vector<Trial>& trials) {
  FrontView v;
  v.objectives = CampaignObjectives(record.config);
  v.reference = ReferenceVector(record.reference, v.objectives);
  std::vector<Objectives> points;
  for (const Trial& t : trials) {
    if (t.stage() == 2 && t.state() == DONE) {
      v.evaluated.push_back(&t);
      points.push_back(TrialObjectives(t, v.objectives));
    }
  }
  v.on_front.assign(points.size(), false);
  for (int i : NonDominated(points)) v.on_front[i] = true;
  if (record.stage >= 2) v.hypervolume = Hypervolume(points, v.reference);
  return v;
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

}  // namespace

std::string ParetoTable(const CampaignRecord& record, const std::vector<Trial>& trials, bool all) {
  const FrontView v = ComputeFront(record, trials);
  std::string s =
      "| trial | stage | state | provenance | architecture | parameters | TTFT ms (pred) | TTFT ms "
      "(meas) | decode ms/tok | memory MB | loss | front |\n"
      "|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|:---:|\n";
  auto row = [&](const Trial& t, bool front) {
    const double decode = t.has_latency() && t.latency().summaries_size() > 0
                              ? t.latency().summaries(0).decode_median_ms_per_token()
                              : t.predicted_decode_ms();
    absl::StrAppend(
        &s, absl::StrFormat(
                "| %d | %d | %s | %s | %s | %d | %s | %s | %s | %.1f | %s | %s |\n", t.id(),
                t.stage(), absl::AsciiStrToLower(TrialState_Name(t.state())), t.provenance(),
                ArchSummary(t.arch()), t.parameters(), Ms(t.predicted_ttft_ms()),
                Ms(t.measured_ttft_ms()), decode > 0 ? absl::StrFormat("%.2f", decode) : "-",
                t.memory_mb(),
                t.stage() == 2 && t.state() == DONE ? absl::StrFormat("%.4f", t.loss()) : "-",
                front ? "*" : ""));
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
  std::string s =
      "trial,provenance,layers,d_model,d_ffn,pattern,parameters,predicted_ttft_ms,"
      "measured_ttft_ms,predicted_decode_ms,memory_mb,loss,on_front\n";
  for (size_t i = 0; i < v.evaluated.size(); ++i) {
    const Trial& t = *v.evaluated[i];
    std::string pattern = ArchSummary(t.arch());
    pattern = pattern.substr(pattern.rfind(' ') + 1);
    absl::StrAppend(
        &s,
        absl::StrFormat("%d,%s,%d,%d,%d,%s,%d,%.4f,%.4f,%.4f,%.3f,%.6f,%d\n", t.id(),
                        t.provenance(), t.arch().num_layers(), t.arch().d_model(), t.arch().d_ffn(),
                        pattern, t.parameters(), t.predicted_ttft_ms(), t.measured_ttft_ms(),
                        t.predicted_decode_ms(), t.memory_mb(), t.loss(), v.on_front[i] ? 1 : 0));
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
  }
  return j.dump(2) + "\n";
}

std::string ParetoSvg(const CampaignRecord& record, const std::vector<Trial>& trials,
                      const std::vector<std::pair<std::string, double>>& markers) {
  const FrontView v = ComputeFront(record, trials);
  const double W = 720, H = 480, L = 70, R = 30, T = 50, B = 60;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  auto extend = [&](double x, double y) {
    if (x > 0) x0 = std::min(x0, x), x1 = std::max(x1, x);
    if (std::isfinite(y)) y0 = std::min(y0, y), y1 = std::max(y1, y);
  };
  for (const Trial* t : v.evaluated) extend(t->predicted_ttft_ms(), t->loss());
  if (v.reference.size() >= 2 && v.reference[1] > 0) extend(v.reference[1], v.reference[0]);
  for (const auto& m : markers) extend(m.second, NAN);
  if (!(x1 > x0)) x0 = 1, x1 = 10;
  if (!(y1 > y0)) y0 = 0, y1 = 1;
  const double xa = std::log10(x0) - 0.05, xb = std::log10(x1) + 0.05;
  const double ya = y0 - 0.05 * (y1 - y0), yb = y1 + 0.05 * (y1 - y0);
  auto px = [&](double ms) { return L + (std::log10(ms) - xa) / (xb - xa) * (W - L - R); };
  auto py = [&](double loss) { return H - B - (loss - ya) / (yb - ya) * (H - T - B); };
  std::string s = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
      "font-family='sans-serif' font-size='12'>\n<rect width='100%%' height='100%%' "
      "fill='white'/>\n<text x='%.0f' y='20' text-anchor='middle' font-size='15'>%s</text>\n"
      "<text x='%.0f' y='38' text-anchor='middle' font-size='11'>%s</text>\n"
      "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='none' stroke='black'/>\n",
      W, H, W / 2, record.config.name(), W / 2, FrontSummary(record, trials), L, T, W - L - R,
      H - T - B);
  for (double d = std::pow(10, std::floor(xa)); d <= std::pow(10, xb); d *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double t = d * m;
      if (std::log10(t) < xa || std::log10(t) > xb) continue;
      absl::StrAppend(
          &s, absl::StrFormat("<text x='%.1f' y='%.0f' text-anchor='middle'>%g</text>\n", px(t),
                              H - B + 16, t));
    }
  }
  for (int i = 0; i <= 5; ++i) {
    const double l = ya + (yb - ya) * i / 5;
    absl::StrAppend(&s, absl::StrFormat("<text x='%.0f' y='%.1f' text-anchor='end'>%.3f</text>\n",
                                        L - 6, py(l) + 4, l));
  }
  absl::StrAppend(
      &s, absl::StrFormat("<text x='%.0f' y='%.0f' text-anchor='middle'>TTFT ms (predicted, log "
                          "scale)</text>\n<text x='18' y='%.0f' transform='rotate(-90 18 %.0f)' "
                          "text-anchor='middle'>held-out loss</text>\n",
                          (W + L - R) / 2, H - 18, (H + T - B) / 2, (H + T - B) / 2));
  if (v.reference.size() >= 2 && v.reference[1] > 0) {
    absl::StrAppend(
        &s, absl::StrFormat("<line x1='%.1f' y1='%.0f' x2='%.1f' y2='%.0f' stroke='#d62728' "
                            "stroke-dasharray='5'/>\n<line x1='%.0f' y1='%.1f' x2='%.0f' "
                            "y2='%.1f' stroke='#d62728' stroke-dasharray='5'/>\n"
                            "<circle cx='%.1f' cy='%.1f' r='5' fill='#d62728'/>\n"
                            "<text x='%.1f' y='%.1f' fill='#d62728'>reference</text>\n",
                            px(v.reference[1]), T, px(v.reference[1]), H - B, L, py(v.reference[0]),
                            W - R, py(v.reference[0]), px(v.reference[1]), py(v.reference[0]),
                            px(v.reference[1]) - 70, py(v.reference[0]) - 8));
  }
  for (const auto& [label, ms] : markers) {
    absl::StrAppend(
        &s, absl::StrFormat("<line x1='%.1f' y1='%.0f' x2='%.1f' y2='%.0f' stroke='#2ca02c' "
                            "stroke-dasharray='2 3'/>\n<text x='%.1f' y='%.0f' fill='#2ca02c' "
                            "transform='rotate(-90 %.1f %.0f)'>%s</text>\n",
                            px(ms), T, px(ms), H - B, px(ms) - 3, T + 6, px(ms) - 3, T + 6, label));
  }
  // The front as a staircase in (TTFT, loss); the legend sits in the
  // lower left, the corner no trial reaches.
  std::vector<std::pair<double, double>> front;
  for (size_t i = 0; i < v.evaluated.size(); ++i) {
    if (v.on_front[i])
      front.push_back({v.evaluated[i]->predicted_ttft_ms(), v.evaluated[i]->loss()});
  }
  std::sort(front.begin(), front.end());
  if (!front.empty()) {
    std::string path = absl::StrFormat("M%.1f,%.1f", px(front[0].first), py(front[0].second));
    for (size_t i = 1; i < front.size(); ++i) {
      absl::StrAppend(&path,
                      absl::StrFormat(" H%.1f V%.1f", px(front[i].first), py(front[i].second)));
    }
    absl::StrAppend(&s, "<path d='", path, "' fill='none' stroke='#ff7f0e' stroke-width='2'/>\n");
  }
  for (size_t i = 0; i < v.evaluated.size(); ++i) {
    const Trial& t = *v.evaluated[i];
    absl::StrAppend(
        &s, absl::StrFormat("<circle cx='%.1f' cy='%.1f' r='%d' fill='%s' fill-opacity='0.75'>"
                            "<title>trial %d: %s, loss %.4f, TTFT %.1f ms</title></circle>\n",
                            px(t.predicted_ttft_ms()), py(t.loss()), v.on_front[i] ? 5 : 3,
                            v.on_front[i] ? "#ff7f0e" : "#1f77b4", t.id(), ArchSummary(t.arch()),
                            t.loss(), t.predicted_ttft_ms()));
  }
  absl::StrAppend(
      &s,
      absl::StrFormat(
          "<circle cx='%.0f' cy='%.0f' r='3' fill='#1f77b4'/><text x='%.0f' y='%.0f'>trial</text>\n"
          "<circle cx='%.0f' cy='%.0f' r='5' fill='#ff7f0e'/><text x='%.0f' y='%.0f'>Pareto "
          "front</text>\n",
          L + 14, H - B - 34.0, L + 24, H - B - 30.0, L + 14, H - B - 16.0, L + 24, H - B - 12.0));
  return s + "</svg>\n";
}

}  // namespace hilnas
