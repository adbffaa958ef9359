#include "search/search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "search_space/counts.h"
#include "search_space/sobol.h"
#include "util/status_macros.h"

namespace hilnas {

std::string KeyOf(const Arch& arch) { return ArchKey(ArchToProto(arch)); }

absl::StatusOr<std::vector<Arch>> FreshSobol(const Space& space, int n, uint64_t seed,
                                             const std::set<std::string>& seen) {
  std::vector<Arch> out;
  if (n <= 0) return out;
  const uint64_t size = space.Size();
  const int want =
      static_cast<int>(std::min<uint64_t>(size, static_cast<uint64_t>(n) + seen.size()));
  HILNAS_ASSIGN_OR_RETURN(SobolSample sample, SampleSobol(space, want, seed));
  for (const Arch& a : sample.archs) {
    if (static_cast<int>(out.size()) == n) break;
    if (!seen.count(KeyOf(a))) out.push_back(a);
  }
  return out;
}

std::vector<Arch> RandomMembers(const Space& space, int n, std::mt19937_64& rng,
                                const std::set<std::string>& seen) {
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Arch> out;
  std::set<std::string> taken = seen;
  for (int tries = 0; static_cast<int>(out.size()) < n && tries < 1000 * (n + 1); ++tries) {
    std::vector<double> x(space.dimensions());
    for (double& v : x) v = u(rng);
    absl::StatusOr<Arch> a = space.Decode(x);
    if (!a.ok() || !space.Contains(*a).ok()) continue;
    if (taken.insert(KeyOf(*a)).second) out.push_back(*a);
  }
  return out;
}

namespace {

// The choice list's neighbours of `value`: the previous and next choice.
std::vector<int> Neighbours(const std::vector<int>& choices, int value) {
  std::vector<int> out;
  auto it = std::find(choices.begin(), choices.end(), value);
  if (it == choices.end()) return out;
  if (it != choices.begin()) out.push_back(*(it - 1));
  if (it + 1 != choices.end()) out.push_back(*(it + 1));
  return out;
}

}  // namespace

std::vector<Arch> Mutations(const Space& space, const std::vector<Arch>& parents,
                            const std::set<std::string>& seen) {
  std::vector<Arch> out;
  std::set<std::string> taken = seen;
  auto add = [&](const Arch& a) {
    if (space.Contains(a).ok() && taken.insert(KeyOf(a)).second) out.push_back(a);
  };
  for (const Arch& p : parents) {
    for (int layers : Neighbours(space.layer_choices(), p.num_layers)) {
      Arch a = p;
      a.num_layers = layers;
      a.attention.resize(layers, Attention::kFull);
      add(a);
    }
    for (int w : Neighbours(space.ffn_choices(), p.d_ffn)) {
      Arch a = p;
      a.d_ffn = w;
      add(a);
    }
    for (int w : Neighbours(space.model_choices(), p.d_model)) {
      Arch a = p;
      a.d_model = w;
      add(a);
    }
    for (int l = 0; l < p.num_layers; ++l) {
      for (Attention t : space.attention_choices()) {
        if (t == p.attention[l]) continue;
        Arch a = p;
        a.attention[l] = t;
        add(a);
      }
    }
  }
  return out;
}

double MemoryMb(const Arch& arch, int context_tokens) {
  const double weights = 4.0 * static_cast<double>(CountParameters(arch).total());
  return (weights + static_cast<double>(KvCacheBytes(arch, context_tokens, 4))) / 1e6;
}

namespace {

// Loss GP inputs: the space's encoding plus log parameters scaled to [0,1]
// over `all` (parameter count is the strongest single predictor of loss).
absl::StatusOr<std::vector<std::vector<double>>> LossFeatures(const Space& space,
                                                              const std::vector<Arch>& archs,
                                                              double lo, double hi) {
  std::vector<std::vector<double>> x;
  for (const Arch& a : archs) {
    HILNAS_ASSIGN_OR_RETURN(std::vector<double> e, space.Encode(a));
    const double lp = std::log(static_cast<double>(CountParameters(a).model()));
    e.push_back(hi > lo ? (lp - lo) / (hi - lo) : 0.5);
    x.push_back(std::move(e));
  }
  return x;
}

absl::StatusOr<std::vector<std::vector<double>>> LatencyDraws(const LatencyModel* m,
                                                              const std::vector<Arch>& archs,
                                                              int draws, uint64_t seed) {
  if (m == nullptr) return absl::FailedPreconditionError("qNEHVI needs a fitted latency model");
  HILNAS_ASSIGN_OR_RETURN(auto d, m->SampleLogMs(archs, draws, seed));
  for (auto& row : d) {
    for (double& v : row) v = std::exp(v);  // log ms -> ms
  }
  return d;
}

}  // namespace

absl::StatusOr<JointSamples> SampleObjectives(const SearchState& state,
                                              const std::vector<Arch>& archs, int draws,
                                              uint64_t seed, const GpOptions& gp) {
  const int M = static_cast<int>(state.objectives.size());
  JointSamples out(draws, static_cast<int>(archs.size()), M);
  for (int k = 0; k < M; ++k) {
    std::vector<std::vector<double>> d;  // draws x archs
    switch (state.objectives[k]) {
      case LOSS: {
        double lo = INFINITY, hi = -INFINITY;
        for (const auto* set : {&state.observed, &archs}) {
          for (const Arch& a : *set) {
            const double lp = std::log(static_cast<double>(CountParameters(a).model()));
            lo = std::min(lo, lp), hi = std::max(hi, lp);
          }
        }
        GpData data;
        HILNAS_ASSIGN_OR_RETURN(data.x, LossFeatures(*state.space, state.observed, lo, hi));
        data.y = state.observed_loss;
        GpOptions o = gp;
        o.seed = seed;
        HILNAS_ASSIGN_OR_RETURN(ExactGp model, ExactGp::Fit(data, o));
        HILNAS_ASSIGN_OR_RETURN(auto x, LossFeatures(*state.space, archs, lo, hi));
        HILNAS_ASSIGN_OR_RETURN(d, model.Samples(x, draws, seed + 1));
        break;
      }
      case TTFT: {
        HILNAS_ASSIGN_OR_RETURN(d, LatencyDraws(state.ttft, archs, draws, seed + 2));
        break;
      }
      case DECODE: {
        HILNAS_ASSIGN_OR_RETURN(d, LatencyDraws(state.decode, archs, draws, seed + 3));
        break;
      }
      case MEMORY: {
        d.assign(draws, std::vector<double>(archs.size()));
        for (size_t i = 0; i < archs.size(); ++i) {
          const double mb = MemoryMb(archs[i], state.prompt_tokens);
          for (auto& row : d) row[i] = mb;
        }
        break;
      }
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("objective ", Objective_Name(state.objectives[k]), " is not supported"));
    }
    for (int s = 0; s < draws; ++s) {
      for (size_t i = 0; i < archs.size(); ++i) out.at(s, static_cast<int>(i), k) = d[s][i];
    }
  }
  return out;
}

namespace {

double Distance(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::abs(a[i] - b[i]);
  return d;
}

// Unseen pool members, in pool order.
std::vector<Arch> UnseenPool(const ProposeOptions& o, const std::set<std::string>& seen) {
  std::vector<Arch> out;
  for (const Arch& a : o.pool) {
    if (!seen.count(KeyOf(a))) out.push_back(a);
  }
  return out;
}

absl::StatusOr<std::vector<Proposal>> SobolBatch(const SearchState& state,
                                                 const ProposeOptions& o) {
  std::vector<Proposal> out;
  if (o.pool.empty()) {
    HILNAS_ASSIGN_OR_RETURN(std::vector<Arch> archs,
                            FreshSobol(*state.space, o.q, o.seed, state.seen));
    for (Arch& a : archs) out.push_back({std::move(a), Provenance::kSobol, 0});
    return out;
  }
  // Over a pool: the unseen member nearest each fresh Sobol point.
  std::vector<Arch> pool = UnseenPool(o, state.seen);
  std::vector<std::vector<double>> enc;
  for (const Arch& a : pool) {
    HILNAS_ASSIGN_OR_RETURN(std::vector<double> e, state.space->Encode(a));
    enc.push_back(std::move(e));
  }
  const int64_t skip = static_cast<int64_t>(state.seen.size());
  HILNAS_ASSIGN_OR_RETURN(auto points, SobolPoints(state.space->dimensions(), skip + o.q, o.seed));
  std::vector<bool> used(pool.size(), false);
  for (int64_t p = skip; p < static_cast<int64_t>(points.size()); ++p) {
    int best = -1;
    for (size_t i = 0; i < pool.size(); ++i) {
      if (!used[i] && (best < 0 || Distance(enc[i], points[p]) < Distance(enc[best], points[p]))) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) break;
    used[best] = true;
    out.push_back({pool[best], Provenance::kSobol, 0});
  }
  return out;
}

std::vector<Proposal> RandomBatch(const SearchState& state, const ProposeOptions& o) {
  std::mt19937_64 rng(o.seed * 1000003 + o.round);
  std::vector<Proposal> out;
  if (o.pool.empty()) {
    for (Arch& a : RandomMembers(*state.space, o.q, rng, state.seen)) {
      out.push_back({std::move(a), Provenance::kRandom, 0});
    }
    return out;
  }
  std::vector<Arch> pool = UnseenPool(o, state.seen);
  std::shuffle(pool.begin(), pool.end(), rng);
  for (int i = 0; i < o.q && i < static_cast<int>(pool.size()); ++i) {
    out.push_back({pool[i], Provenance::kRandom, 0});
  }
  return out;
}

absl::StatusOr<std::vector<Proposal>> QNehviBatch(const SearchState& state,
                                                  const ProposeOptions& o) {
  std::vector<Arch> candidates;
  std::vector<Provenance> origin;
  if (!o.pool.empty()) {
    candidates = UnseenPool(o, state.seen);
    origin.assign(candidates.size(), Provenance::kQnehvi);
  } else {
    std::set<std::string> taken = state.seen;
    for (const Arch& a : state.pending) taken.insert(KeyOf(a));
    HILNAS_ASSIGN_OR_RETURN(candidates, FreshSobol(*state.space, o.candidates, o.seed, taken));
    origin.assign(candidates.size(), Provenance::kQnehvi);
    for (const Arch& a : candidates) taken.insert(KeyOf(a));
    // Mutations of the current front by (loss, predicted TTFT).
    HILNAS_ASSIGN_OR_RETURN(std::vector<LatencyPrediction> ttft,
                            state.ttft->Predict(state.observed));
    std::vector<Objectives> points;
    for (size_t i = 0; i < state.observed.size(); ++i) {
      points.push_back({state.observed_loss[i], ttft[i].median_ms});
    }
    std::vector<Arch> front;
    for (int i : NonDominated(points)) front.push_back(state.observed[i]);
    for (Arch& a : Mutations(*state.space, front, taken)) {
      candidates.push_back(std::move(a));
      origin.push_back(Provenance::kQnehviMutation);
    }
  }
  const int q = std::min<int>(o.q, static_cast<int>(candidates.size()));
  if (q == 0) return std::vector<Proposal>{};
  std::vector<Arch> all = state.observed;
  all.insert(all.end(), state.pending.begin(), state.pending.end());
  const int baseline = static_cast<int>(all.size());
  all.insert(all.end(), candidates.begin(), candidates.end());
  HILNAS_ASSIGN_OR_RETURN(
      JointSamples draws,
      SampleObjectives(state, all, o.mc_samples, o.seed * 7919 + o.round * 104729 + 17, o.gp));
  std::vector<int> index(candidates.size());
  for (size_t i = 0; i < index.size(); ++i) index[i] = baseline + static_cast<int>(i);
  HILNAS_ASSIGN_OR_RETURN(std::vector<QNehviPick> picks,
                          SelectQNehvi(draws, baseline, index, state.reference, q));
  std::vector<Proposal> out;
  for (const QNehviPick& p : picks) {
    const int c = p.point - baseline;
    out.push_back({candidates[c], origin[c], p.log_value});
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Proposal>> ProposeLatencyBatch(const Space& space,
                                                          const LatencyModel& ttft,
                                                          double reference_ttft_ms, int q,
                                                          int candidates, uint64_t seed,
                                                          const std::set<std::string>& seen) {
  HILNAS_ASSIGN_OR_RETURN(std::vector<Arch> pool, FreshSobol(space, candidates, seed, seen));
  std::vector<std::vector<double>> x;
  for (const Arch& a : pool) {
    HILNAS_ASSIGN_OR_RETURN(std::vector<double> f, ttft.Features(a));
    x.push_back(std::move(f));
  }
  ExactGp gp = ttft.gp();
  std::vector<bool> taken(pool.size(), false);
  std::vector<Proposal> out;
  const double log_ref = std::log(reference_ttft_ms);
  for (int k = 0; k < q && k < static_cast<int>(pool.size()); ++k) {
    HILNAS_ASSIGN_OR_RETURN(GpPosterior post, gp.Posterior(x));
    int best = -1;
    double best_score = -1;
    for (size_t i = 0; i < pool.size(); ++i) {
      if (taken[i]) continue;
      const double sd = std::sqrt(std::max(post.variance[i], 1e-12));
      const double mean = post.mean[i] + ttft.Trend(x[i]);  // the GP models the residual
      const double p_under = 0.5 * std::erfc(-(log_ref - mean) / (sd * std::sqrt(2.0)));
      const double score = sd * p_under;
      if (score > best_score) best_score = score, best = static_cast<int>(i);
    }
    taken[best] = true;
    out.push_back({pool[best], Provenance::kUncertainty, best_score});
    GpData data = gp.data();
    data.x.push_back(x[best]);
    data.y.push_back(post.mean[best]);
    if (!data.y_var.empty()) data.y_var.push_back(0);
    HILNAS_ASSIGN_OR_RETURN(gp, ExactGp::FromParts(data, gp.hyperparameters()));
  }
  return out;
}

absl::StatusOr<std::vector<Proposal>> ProposeBatch(const SearchState& state,
                                                   const ProposeOptions& options) {
  if (state.space == nullptr) return absl::InvalidArgumentError("ProposeBatch: no space");
  if (options.strategy == Strategy::kRandom) return RandomBatch(state, options);
  if (options.strategy == Strategy::kSobol || state.observed.size() < 2) {
    return SobolBatch(state, options);
  }
  if (state.objectives.size() != state.reference.size()) {
    return absl::InvalidArgumentError(absl::StrCat(state.objectives.size(), " objectives but a ",
                                                   state.reference.size(), "-D reference point"));
  }
  return QNehviBatch(state, options);
}

}  // namespace hilnas
