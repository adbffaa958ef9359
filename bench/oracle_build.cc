// Builds the tabular oracle behind bench/search_bench: N distinct feasible
// Sobol architectures of a search space, each pruned from the demo backbone
// (Prune(metrics, s), MobileLLM-Flash Sec. 3.3), trained briefly by the same
// in-process evaluator a campaign uses, scored by held-out loss, and its TTFT
// timed in this process (warm-up, then the median of --repeats runs). Rows
// are appended as they finish, so a killed run resumes where it stopped.
//
// usage: oracle_build --backbone DIR --tokens FILE --space FILE --out CSV
//          [--n 500 --seed 7 --steps 8 --batch 8 --seq 128 --prompt 256
//           --repeats 3 --threads 1]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "model/generate.h"
#include "pruner/backbone.h"
#include "quality/evaluator.h"
#include "quality/tokens.h"
#include "search_space/counts.h"
#include "search_space/sobol.h"
#include "search_space/space.h"
#include "util/textproto.h"

namespace oracle_build_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using hilnas::bench::Arg;
using hilnas::bench::Die;

// Median TTFT (ms) of `repeats` greedy runs after one warm-up.
double TimeTtft(hilnas::Decoder& model, int prompt, int repeats) {
  std::vector<int64_t> ids(prompt);
  for (int i = 0; i < prompt; ++i) ids[i] = (i * 37 + 11) % model.arch().vocab_size;
  hilnas::GenerateOptions o;
  o.max_new_tokens = 1;
  std::vector<double> ms;
  for (int r = 0; r <= repeats; ++r) {
    auto g = hilnas::GreedyGenerate(model, ids, o);
    if (!g.ok()) Die(g.status());
    if (r > 0) ms.push_back(g->stats.ttft_ms());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Rewrites `path` with every row's TTFT measured again.
int Retime(const std::string& path, int prompt, int repeats, const std::string& space_file) {
  hilnas::SearchSpace proto;
  if (auto s = hilnas::ReadTextProtoFile(space_file, &proto); !s.ok()) Die(s);
  auto space = hilnas::Space::FromProto(proto);
  if (!space.ok()) Die(space.status());
  const hilnas::Arch base = *space->Decode(std::vector<double>(space->dimensions(), 0.5));
  std::ifstream in(path);
  std::string line, out;
  int n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::getline(in, line)) {
    if (line.rfind("index,", 0) == 0) {
      absl::StrAppend(&out, absl::StrFormat("# TTFT re-timed on an idle machine with --retime: the "
                                            "smaller of the stored value and a new median of %d "
                                            "after a warm-up (random weights)\n",
                                            repeats));
    }
    if (line.empty() || line[0] == '#' || line.rfind("index,", 0) == 0) {
      absl::StrAppend(&out, line, "\n");
      continue;
    }
    std::vector<std::string> f = absl::StrSplit(line, ',');
    hilnas::Arch arch = base;
    arch.num_layers = std::stoi(f[1]);
    arch.d_model = std::stoi(f[2]);
    arch.d_ffn = std::stoi(f[3]);
    auto pattern = hilnas::ParsePattern(f[4]);
    if (!pattern.ok()) Die(pattern.status());
    arch.attention = *pattern;
    auto model = hilnas::Decoder::Create(arch, 0);
    if (!model.ok()) Die(model.status());
    // Keep the smaller of the stored and the new median: interference from
    // other work on a shared machine only ever adds time.
    f[6] = absl::StrFormat("%.4f", std::min(std::stod(f[6]), TimeTtft(*model, prompt, repeats)));
    absl::StrAppend(&out, absl::StrJoin(f, ","), "\n");
    if (++n % 50 == 0)
      std::printf("re-timed %d rows (%.0f s)\n", n,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (auto s = hilnas::WriteFileAtomically(path, out); !s.ok()) Die(s);
  std::printf("re-timed %d rows of %s\n", n, path.c_str());
  return 0;
}

// The indices of the rows `out` already holds (a run resumes where the
// last one stopped).
std::set<std::string> RowsDone(const std::string& out) {
  std::set<std::string> done;
  std::ifstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("index,", 0) == 0) continue;
    done.insert(line.substr(0, line.find(',')));
  }
  return done;
}

// Each candidate's short training (lr 1e-3, held-out loss on 64 windows).
hilnas::TrainOptions OracleTraining(int steps, int batch, int seq) {
  hilnas::TrainOptions train;
  train.steps = steps;
  train.batch_size = batch;
  train.seq_len = seq;
  train.lr = 1e-3;
  train.warmup_steps = std::max(1, steps / 4);
  train.eval_windows = 64;
  return train;
}

}  // namespace

int Main(int argc, char** argv) {
  const std::string backbone_dir = Arg(argc, argv, "--backbone", "data/demo-backbone");
  const std::string tokens = Arg(argc, argv, "--tokens", "");
  const std::string space_file = Arg(argc, argv, "--space", "configs/demo-space.textproto");
  const std::string out = Arg(argc, argv, "--out", "");
  const int n = std::stoi(Arg(argc, argv, "--n", "500"));
  const uint64_t seed = std::stoull(Arg(argc, argv, "--seed", "7"));
  const int steps = std::stoi(Arg(argc, argv, "--steps", "8"));
  const int batch = std::stoi(Arg(argc, argv, "--batch", "8"));
  const int seq = std::stoi(Arg(argc, argv, "--seq", "128"));
  const int prompt = std::stoi(Arg(argc, argv, "--prompt", "256"));
  const int repeats = std::stoi(Arg(argc, argv, "--repeats", "3"));
  const int threads = std::stoi(Arg(argc, argv, "--threads", "1"));
  if (tokens.empty() || out.empty()) {
    std::fprintf(stderr, "usage: oracle_build --tokens FILE --out CSV [--backbone DIR ...]\n");
    return 2;
  }
  at::set_num_threads(threads);
  if (Arg(argc, argv, "--retime", "0") == "1") return Retime(out, prompt, repeats, space_file);
  hilnas::SearchSpace proto;
  if (auto s = hilnas::ReadTextProtoFile(space_file, &proto); !s.ok()) Die(s);
  auto space = hilnas::Space::FromProto(proto);
  if (!space.ok()) Die(space.status());
  auto backbone = hilnas::LoadBackbone(backbone_dir);
  if (!backbone.ok()) Die(backbone.status());
  auto ids = hilnas::ReadTokenFile(tokens, backbone->model->arch().vocab_size);
  if (!ids.ok()) Die(ids.status());
  auto split = hilnas::SplitTokens(std::move(*ids), 0.05, seq + 1);
  if (!split.ok()) Die(split.status());
  auto data = std::make_shared<const hilnas::TokenSplit>(std::move(*split));
  auto evaluator = hilnas::NewInProcessEvaluator(data, OracleTraining(steps, batch, seq));

  auto sample = hilnas::SampleSobol(*space, n, seed);
  if (!sample.ok()) Die(sample.status());
  const std::set<std::string> done = RowsDone(out);
  const bool fresh = done.empty();
  std::ofstream csv(out, std::ios::app);
  if (fresh) {
    csv << absl::StrFormat(
        "# hilnas bench/oracle_build: %d Sobol draws (seed %d) of %s, pruned from %s,\n"
        "# trained %d steps x %d x %d tokens (lr 1e-3, in-process evaluator), held-out loss on\n"
        "# 64 windows; TTFT of a %d-token prompt timed in process, median of %d after a\n"
        "# warm-up, %d thread(s), f32\n"
        "index,layers,d_model,d_ffn,pattern,parameters,ttft_ms,loss,initial_loss,train_s\n",
        n, seed, space_file, backbone_dir, steps, batch, seq, prompt, repeats, threads);
  }
  const std::string work = std::filesystem::temp_directory_path() / "hilnas_oracle_build";
  hilnas::PruneOptions po;
  po.block_size = space->block_size();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (done.count(absl::StrCat(i))) continue;
    const hilnas::Arch& arch = sample->archs[i];
    std::filesystem::remove_all(work);
    const std::string ckpt = work + "/ckpt";
    if (auto s = hilnas::PruneToCheckpoint(*backbone, arch, po, ckpt); !s.ok()) Die(s);
    auto q = evaluator->Evaluate(ckpt, work + "/eval");
    if (!q.ok()) Die(q.status());
    auto model = hilnas::LoadCheckpoint(ckpt);
    if (!model.ok()) Die(model.status());
    const double ttft = TimeTtft(*model, prompt, repeats);
    csv << absl::StrFormat("%d,%d,%d,%d,%s,%d,%.4f,%.5f,%.5f,%.2f\n", i, arch.num_layers,
                           arch.d_model, arch.d_ffn, hilnas::PatternString(arch.attention),
                           hilnas::CountParameters(arch).model(), ttft, q->loss, q->initial_loss,
                           q->seconds);
    csv.flush();
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("oracle %d/%d: L%d d%d f%d %s loss %.4f ttft %.2f ms (%.0f s elapsed)\n", i + 1, n,
                arch.num_layers, arch.d_model, arch.d_ffn,
                hilnas::PatternString(arch.attention).c_str(), q->loss, ttft, el);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(work);
  return 0;
}

}  // namespace oracle_build_main
