// The stable-ranking claim behind pruning-based search (MobileLLM-Flash
// Sec. 3.3, Key Insight-2): candidates pruned from a pretrained backbone and
// trained briefly rank the same as when trained longer. Prunes the demo
// backbone to 10 targets (depth, widths, attention pattern), trains each
// for a short and a long budget (each its own warm-up + cosine schedule,
// same seed and batches), and reports the Kendall tau between the rankings
// by held-out loss, beside the ranking before any training and by size.
//
// usage: ranking_bench --backbone DIR [--tokens FILE --short 25 --long 100
//                      --threads 2 --csv FILE]
// The backbone folder needs metrics.json; tokens default to DIR/corpus.bin
// (`hilnas corpus --out FILE` rebuilds the demo corpus).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "latency_model/metrics.h"
#include "model/checkpoint.h"
#include "pruner/metrics.h"
#include "pruner/prune.h"
#include "quality/tokens.h"
#include "quality/trainer.h"
#include "search_space/counts.h"
#include "util/status_macros.h"

namespace ranking_bench_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

struct Target {
  int layers, d_model, d_ffn;
  const char* pattern;
};

struct TargetResult {
  int64_t parameters = 0;
  double pruned = 0, short_loss = 0, long_loss = 0;  // held-out loss, nats/token
};

// Prunes the backbone to `t` and trains a copy for each budget; the losses
// right after pruning and after each budget.
absl::StatusOr<TargetResult> PruneAndTrain(const Target& t, hilnas::Decoder& backbone,
                                           const hilnas::ActivationMetrics& metrics,
                                           const hilnas::TokenSplit& data, int64_t short_steps,
                                           int64_t long_steps) {
  HILNAS_ASSIGN_OR_RETURN(
      hilnas::Arch arch,
      hilnas::OverrideShape(backbone.arch(), t.layers, t.d_model, t.d_ffn, t.pattern, 64));
  hilnas::PruneOptions po;
  po.block_size = 64;
  HILNAS_ASSIGN_OR_RETURN(hilnas::PrunePlan plan,
                          hilnas::PlanPrune(metrics, backbone.arch(), arch, po));
  TargetResult out;
  out.parameters = hilnas::CountParameters(arch).model();
  for (int budget = 0; budget < 2; ++budget) {
    HILNAS_ASSIGN_OR_RETURN(hilnas::Decoder model, hilnas::ApplyPrune(backbone, plan, arch));
    hilnas::TrainOptions o;
    o.steps = budget == 0 ? short_steps : long_steps;
    o.batch_size = 16;
    o.seq_len = 128;
    o.lr = 1e-3;
    o.warmup_steps = std::max<int64_t>(1, o.steps / 10);
    o.eval_windows = 128;
    HILNAS_ASSIGN_OR_RETURN(auto r, hilnas::Train(model, nullptr, data, o));
    (budget == 0 ? out.short_loss : out.long_loss) = r.final_eval_loss;
    out.pruned = r.initial_eval_loss;
  }
  return out;
}

// Kendall tau of each cheap ranking against the ranking after long_steps.
void PrintTaus(int64_t short_steps, int64_t long_steps, const std::vector<double>& params,
               const std::vector<double>& pruned_loss, const std::vector<double>& short_loss,
               const std::vector<double>& long_loss) {
  std::vector<double> neg_params;
  for (double p : params) neg_params.push_back(-p);
  std::printf("\nKendall tau against the ranking after %lld steps:\n",
              static_cast<long long>(long_steps));
  std::printf("| ranking by | tau |\n|---|---|\n");
  std::printf("| loss after %lld steps | %.3f |\n", static_cast<long long>(short_steps),
              hilnas::KendallTau(short_loss, long_loss));
  std::printf("| loss right after pruning | %.3f |\n", hilnas::KendallTau(pruned_loss, long_loss));
  std::printf("| parameter count (more = better) | %.3f |\n",
              hilnas::KendallTau(neg_params, long_loss));
}

}  // namespace

int Main(int argc, char** argv) {
  std::string backbone_dir, csv, tokens;
  int64_t short_steps = 25, long_steps = 100;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--backbone")) backbone_dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--short")) short_steps = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--long")) long_steps = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--csv")) csv = argv[i + 1];
    if (!std::strcmp(argv[i], "--tokens")) tokens = argv[i + 1];
  }
  if (backbone_dir.empty()) {
    std::fprintf(stderr, "usage: ranking_bench --backbone DIR [--short N --long N]\n");
    return 2;
  }
  at::set_num_threads(threads);
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "ranking_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  auto checkpoint = hilnas::CheckpointReader::Open(backbone_dir);
  if (!checkpoint.ok()) return fail(checkpoint.status());
  auto backbone = (*checkpoint)->Load();
  if (!backbone.ok()) return fail(backbone.status());
  auto metrics = hilnas::LoadMetrics(hilnas::MetricsFileName(backbone_dir));
  if (!metrics.ok()) return fail(metrics.status());
  if (auto s = hilnas::CheckMetricsMatch(*metrics, "metrics.json", **checkpoint); !s.ok()) {
    return fail(s);
  }
  if (tokens.empty()) tokens = backbone_dir + "/corpus.bin";
  auto ids = hilnas::ReadTokenFile(tokens, 256);
  if (!ids.ok()) return fail(ids.status());
  auto data = hilnas::SplitTokens(std::move(*ids), 0.05, 1024);
  if (!data.ok()) return fail(data.status());

  const std::vector<Target> targets = {{8, 256, 384, "FFFFFFFF"}, {6, 256, 768, "FFFFFF"},
                                       {6, 192, 512, "FFFFFF"},   {4, 256, 768, "FFFF"},
                                       {8, 128, 768, "FFFFFFFF"}, {6, 256, 512, "FWFWFF"},
                                       {6, 256, 768, "FSFSFF"},   {5, 192, 384, "FFFFF"},
                                       {7, 256, 256, "FFFFFFF"},  {4, 128, 384, "FFFF"}};
  std::printf(
      "# %zu targets pruned from %s, trained %lld and %lld steps of 16 x 128 tokens, "
      "%d threads\n\n",
      targets.size(), backbone->arch().name.c_str(), static_cast<long long>(short_steps),
      static_cast<long long>(long_steps), threads);
  std::printf(
      "| target | parameters | loss after pruning | loss @%lld | loss @%lld | seconds |\n"
      "|---|---|---|---|---|---|\n",
      static_cast<long long>(short_steps), static_cast<long long>(long_steps));
  std::vector<double> params, pruned_loss, short_loss, long_loss;
  std::ofstream out_csv;
  if (!csv.empty()) {
    out_csv.open(csv);
    out_csv << "target,parameters,loss_pruned,loss_short,loss_long,short_steps,long_steps\n";
  }
  for (const Target& t : targets) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = PruneAndTrain(t, *backbone, *metrics, *data, short_steps, long_steps);
    if (!r.ok()) return fail(r.status());
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    params.push_back(static_cast<double>(r->parameters));
    pruned_loss.push_back(r->pruned);
    short_loss.push_back(r->short_loss);
    long_loss.push_back(r->long_loss);
    std::printf("| L%d d%d f%d %s | %lld | %.4f | %.4f | %.4f | %.0f |\n", t.layers, t.d_model,
                t.d_ffn, t.pattern, static_cast<long long>(r->parameters), r->pruned, r->short_loss,
                r->long_loss, secs);
    std::fflush(stdout);
    if (out_csv) {
      out_csv << "L" << t.layers << "-d" << t.d_model << "-f" << t.d_ffn << "-" << t.pattern << ","
              << r->parameters << "," << r->pruned << "," << r->short_loss << "," << r->long_loss
              << "," << short_steps << "," << long_steps << "\n";
    }
  }
  PrintTaus(short_steps, long_steps, params, pruned_loss, short_loss, long_loss);
  return 0;
}

}  // namespace ranking_bench_main
