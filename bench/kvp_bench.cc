// KV Prediction on the demo backbone (issue 7's check, KV Prediction Sec. 5,
// Fig. 5b): KVP-LP-0.5 (the backbone as the frozen base, the auxiliary model
// its layers 0, 2, 4, 6, predictor maps) against the plain layer-pruned 0.5
// model (the same four layers as a standalone model), both trained on the
// same tokens with the same recipe. Reports held-out loss (KVP: the base
// generating from the predicted cache) and TTFT (KVP: auxiliary prefill +
// predictor + one base step), beside the unpruned backbone.
//
// usage: kvp_bench --tokens FILE [--backbone DIR --steps 100 --batch 8 --seq 128
//                  --prompt 512 --repeats 5 --threads 2]
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "bench/bench_util.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "model/kv_prediction.h"
#include "quality/kvp_trainer.h"
#include "quality/tokens.h"
#include "quality/trainer.h"

namespace kvp_bench_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using hilnas::bench::Arg;
using hilnas::bench::Die;

template <typename Gen>
double MedianTtft(Gen generate, int repeats) {
  std::vector<double> ms;
  for (int r = 0; r <= repeats; ++r) {
    auto g = generate();
    if (!g.ok()) Die(g.status());
    if (r > 0) ms.push_back(g->stats.ttft_ms());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void CopyWeights(const hilnas::Decoder& from, hilnas::Decoder& to) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> src;
  for (auto& [n, t] : from.NamedTensors()) src[n] = t;
  for (auto& [n, t] : to.NamedTensors()) t.copy_(src.at(n));
}

// Both models' training: the same steps, batches and schedule.
hilnas::TrainOptions Training(int64_t steps, int64_t batch, int64_t seq) {
  hilnas::TrainOptions o;
  o.steps = steps;
  o.batch_size = batch;
  o.seq_len = seq;
  o.lr = 1e-3;
  o.warmup_steps = std::max<int64_t>(1, o.steps / 10);
  o.eval_windows = 64;
  o.eval_every = std::max<int64_t>(1, o.steps / 4);
  return o;
}

// Prints `who`'s held-out evaluations as training goes.
std::function<void(const hilnas::TrainProgress&)> PrintProgress(const char* who) {
  return [who](const hilnas::TrainProgress& p) {
    if (!std::isnan(p.eval_loss)) {
      std::printf("%s step %lld/%lld: train %.4f, held-out %.4f, %.0f tok/s\n", who,
                  static_cast<long long>(p.step), static_cast<long long>(p.steps), p.train_loss,
                  p.eval_loss, p.tokens_per_s);
      std::fflush(stdout);
    }
  };
}

}  // namespace

int Main(int argc, char** argv) {
  const std::string backbone_dir = Arg(argc, argv, "--backbone", "data/demo-backbone");
  const std::string tokens = Arg(argc, argv, "--tokens", "");
  const hilnas::TrainOptions o = Training(std::stoi(Arg(argc, argv, "--steps", "100")),
                                          std::stoi(Arg(argc, argv, "--batch", "8")),
                                          std::stoi(Arg(argc, argv, "--seq", "128")));
  const int prompt_len = std::stoi(Arg(argc, argv, "--prompt", "512"));
  const int repeats = std::stoi(Arg(argc, argv, "--repeats", "5"));
  at::set_num_threads(std::stoi(Arg(argc, argv, "--threads", "2")));
  if (tokens.empty()) {
    std::fprintf(stderr, "usage: kvp_bench --tokens FILE [--backbone DIR --steps N]\n");
    return 2;
  }
  auto backbone = hilnas::LoadCheckpoint(backbone_dir);
  if (!backbone.ok()) Die(backbone.status());
  auto ids = hilnas::ReadTokenFile(tokens, backbone->arch().vocab_size);
  if (!ids.ok()) Die(ids.status());
  auto data = hilnas::SplitTokens(std::move(*ids), 0.05, o.seq_len + 1);
  if (!data.ok()) Die(data.status());

  hilnas::Arch kvp_arch = backbone->arch();
  kvp_arch.kv_prediction.kind = hilnas::KvPredictionSpec::Kind::kLayerPruned;
  kvp_arch.kv_prediction.layer_pruned_ratio = 0.5;
  auto base_d = hilnas::Decoder::Create(kvp_arch, 0);
  if (!base_d.ok()) Die(base_d.status());
  CopyWeights(*backbone, *base_d);
  auto base = std::make_shared<hilnas::Decoder>(std::move(*base_d));
  auto kvp = hilnas::KvPredictor::Create(base, 0);
  if (!kvp.ok()) Die(kvp.status());
  auto plain = hilnas::Decoder::Create(kvp->auxiliary().arch(), 0);
  if (!plain.ok()) Die(plain.status());
  CopyWeights(kvp->auxiliary(), *plain);  // the same four layers, before training

  auto backbone_loss = hilnas::HeldOutLoss(*backbone, data->heldout, o.seq_len, o.eval_windows);
  if (!backbone_loss.ok()) Die(backbone_loss.status());
  auto plain_r = hilnas::Train(*plain, nullptr, *data, o, PrintProgress("plain LP-0.5"));
  if (!plain_r.ok()) Die(plain_r.status());
  auto kvp_r = hilnas::TrainKvp(*kvp, *data, o, {}, PrintProgress("KVP-LP-0.5"));
  if (!kvp_r.ok()) Die(kvp_r.status());

  std::vector<int64_t> prompt(prompt_len);
  for (int i = 0; i < prompt_len; ++i) prompt[i] = data->heldout[i] % backbone->arch().vocab_size;
  hilnas::GenerateOptions go;
  go.max_new_tokens = 1;
  go.prefill_chunk = prompt_len;
  const double ttft_plain =
      MedianTtft([&] { return hilnas::GreedyGenerate(*plain, prompt, go); }, repeats);
  const double ttft_kvp = MedianTtft([&] { return kvp->Generate(prompt, go); }, repeats);
  const double ttft_base =
      MedianTtft([&] { return hilnas::GreedyGenerate(*backbone, prompt, go); }, repeats);

  std::printf(
      "\n# demo backbone (%d layers), %lld steps x %lld x %lld tokens each, TTFT at a "
      "%d-token prompt (median of %d, %d threads)\n\n",
      backbone->arch().num_layers, static_cast<long long>(o.steps),
      static_cast<long long>(o.batch_size), static_cast<long long>(o.seq_len), prompt_len, repeats,
      at::get_num_threads());
  std::printf(
      "| model | held-out loss before | after | TTFT ms | TTFT / plain |\n|---|---|---|---|---|\n");
  std::printf("| plain layer-pruned 0.5 (layers 0,2,4,6) | %.4f | %.4f | %.2f | 1.00 |\n",
              plain_r->initial_eval_loss, plain_r->final_eval_loss, ttft_plain);
  std::printf("| KVP-LP-0.5 (base from predicted cache) | %.4f | %.4f | %.2f | %.2f |\n",
              kvp_r->initial_eval_loss, kvp_r->final_eval_loss, ttft_kvp, ttft_kvp / ttft_plain);
  std::printf("| backbone, unpruned (reference) | %.4f | - | %.2f | %.2f |\n", *backbone_loss,
              ttft_base, ttft_base / ttft_plain);
  return 0;
}

}  // namespace kvp_bench_main
