// hilnas: one binary, subcommands (DESIGN.md, "The command").
#include <unistd.h>
#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "tools/commands.h"

ABSL_FLAG(std::string, shape, "", "published shape name (see `hilnas shapes list`)");
ABSL_FLAG(std::string, arch, "", "ArchSpec .textproto file, or a Hugging Face config.json");
ABSL_FLAG(std::string, ckpt, "", "checkpoint folder (config.json + model.safetensors)");
ABSL_FLAG(std::string, space, "", "SearchSpace .textproto file; default: MobileLLM-Flash Tab. 3");
ABSL_FLAG(std::string, out, "", "output path");
ABSL_FLAG(std::string, dtype, "f32",
          "f32 | bf16 | f16 (compute dtype, or storage for checkpoints)");
ABSL_FLAG(int64_t, prompt_tokens, 256, "prompt length in tokens");
ABSL_FLAG(int64_t, max_new_tokens, 16, "tokens to generate");
ABSL_FLAG(int64_t, prefill_chunk, 1024, "prefill chunk in tokens (MobileLLM-Flash Sec. 4.2.2)");
ABSL_FLAG(int32_t, threads, 0, "intra-op threads; 0 = libtorch's default");
ABSL_FLAG(uint64_t, seed, 0, "random seed (weights, prompts, Sobol)");
ABSL_FLAG(int32_t, n, 8, "how many (space sample)");
ABSL_FLAG(bool, json, false, "machine-readable output where supported");
ABSL_FLAG(std::string, coordinator, "",
          "coordinator address HOST:PORT; default $HILNAS_COORDINATOR, then 127.0.0.1:50051");
ABSL_FLAG(std::string, token, "", "enrollment token agents present; default $HILNAS_TOKEN");

namespace {

constexpr char kUsage[] = R"(hilnas: hardware-in-the-loop architecture search for on-device LLMs

usage: hilnas COMMAND [ARGS] [--flags]

  shapes list                      published shapes with exact parameter counts
  shapes show NAME                 one shape: fields, pattern, counts, KVP map
  space show [--space FILE]        search-space dimensions and size
  space sample [--n N --seed S]    Sobol draws of feasible architectures
  run --shape NAME|--arch FILE|--ckpt DIR [--prompt-tokens N --max-new-tokens M
      --prefill-chunk C --threads T --dtype f32|bf16 --seed S]
                                   build, prefill and decode once; print TTFT and decode speed
  checkpoint init --shape NAME|--arch FILE --out DIR [--dtype f32|f16|bf16 --seed S]
                                   write a random-weight checkpoint
  checkpoint check DIR             validate a checkpoint folder and summarise it
  coordinator [--listen ADDR --db FILE --http ADDR --work-dir DIR --token T --lease-ttl-ms MS]
                                   serve agents, users and campaigns over gRPC (SQLite store),
                                   and the web page with --http
  agent [--coordinator ADDR --name NAME --token T --threads N --cpu-set 0-1 --pools P
      --runtime libtorch|external ...]
                                   a device agent: lease benchmark jobs, measure, report
  fleet --agents N [--fleet-threads 1,2 --coordinator ADDR]
                                   N local agents, each pinned to its own CPUs
  agents list [--json]             registered agents, state, last heartbeat, jobs done
  bench --shape NAME|--arch FILE|--ckpt DIR [--prompt-lengths 1024,2048,4096
      --decode-tokens 16 --repeats 3 --max-repeats 10 --max-spread 0.05
      --precision fp32|bf16 --device NAME|--pool POOL --json]
                                   one benchmark job through the coordinator
  latency collect --space FILE --n N --prompt-lengths L --out CSV
                                   measure Sobol draws of a space through the agents
  latency fit --data CSV [--space FILE --metric ttft|decode --prompt-tokens N] --out MODEL
                                   fit the GP latency model
  latency eval --data CSV [--space FILE --metric ttft|decode --folds 10 --plot FILE.svg]
                                   cross-validated R^2, RMSE, Kendall tau vs FLOPs/params proxies
  latency predict --model MODEL [--space FILE] --shape NAME|--arch FILE
                                   predicted latency with a 95% interval
  corpus --out FILE [--sources A,B]
                                   byte-level tokens of English text from Debian packages
  train --tokens FILE --ckpt DIR|--arch FILE --out DIR [--steps 200 --batch-size 16
      --seq-len 128 --lr 3e-3 --warmup-steps 20 --distill-from DIR --distill-weight 0.5
      --eval-every 50 --checkpoint-dir DIR --heldout 0.05]
                                   continued pretraining (AdamW, cosine, clip, optional KD)
  calibrate --ckpt DIR --tokens FILE [--out FILE --calib-tokens N --seq-len 128]
                                   FFN / ModelDim / Layer activation metrics (Sec. 3.3)
  prune --base DIR [--metrics FILE] --shape NAME|--arch FILE|--layers N --d-model N
      --d-ffn N --pattern FWS.. --window W --out DIR [--block-size 128]
                                   a dense pruned checkpoint
  backbone --out DIR [--backbone-steps 600]
                                   build the demo backbone: corpus, train, calibrate
  campaign create --config FILE    validate and store a search campaign (.textproto)
  campaign start NAME [--wait]     run it: stage 1 latency, stage 2 qNEHVI (follow with --wait)
  campaign status|stop|resume NAME, campaign list
                                   progress, diagnostics, log; stop and resume
  pareto show CAMPAIGN [--db FILE --all]
                                   the Pareto table (loss vs predicted TTFT, decode, memory)
  pareto export CAMPAIGN --format csv|json [--out FILE]
  pareto plot CAMPAIGN --out front.svg
                                   every trial, the front, the reference point, published shapes
  export --campaign C --trial N --out DIR [--db FILE]
                                   the dense pruned checkpoint of any trial
  latency fit|eval --campaign C [--db FILE]
                                   the latency model on a campaign's own measurements
  slim --in CKPT --out CKPT [--dtype f32|f16|bf16 --max-condition 1e5 --max-error 1e-3]
                                   K-only KV cache: store W_KV = W_K^-1 W_V (MHA checkpoints)
  ppd --ckpt CKPT --layer D --k K [--tokens FILE --prompts 4 --prompt-tokens 256
      --max-new-tokens 256 --json]
                                   predictive pipelined decoding: p_correct, Theorem 4.1's
                                   latency and compute against measured, identity with greedy
  demo [--out hilnas-demo]         the README's main job: a small two-stage campaign end to end
)";

// Accept --prompt-tokens as well as Abseil's --prompt_tokens.
std::vector<std::string> NormaliseFlagNames(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  for (std::string& a : out) {
    if (a.size() < 3 || a.rfind("--", 0) != 0) continue;
    const size_t end = std::min(a.find('='), a.size());
    for (size_t i = 2; i < end; ++i) {
      if (a[i] == '-') a[i] = '_';
    }
  }
  return out;
}

// libgomp (libtorch's OpenMP) reads its environment when the library loads,
// before main. Its default ACTIVE wait policy leaves worker threads spinning
// after each parallel region, fighting OpenBLAS's own threads for the same
// cores: on 2 cores that moved mobilellm-flash-350m's TTFT by up to 40%
// between identical runs. Commands that time models re-exec themselves once
// with a passive policy (and OpenBLAS sized to --threads) unless the user
// chose otherwise. Training gains too: 985 -> 1888 tokens/s for the demo
// backbone on 2 threads.
void ReexecForStableTiming(char** argv, const std::string& command) {
  if (command != "agent" && command != "run" && command != "demo" && command != "train" &&
      command != "calibrate" && command != "prune" && command != "backbone" &&
      command != "coordinator" && command != "ppd" && command != "slim") {
    return;
  }
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && absl::GetFlag(FLAGS_threads) > 0) {
    setenv("OPENBLAS_NUM_THREADS", absl::StrCat(absl::GetFlag(FLAGS_threads)).c_str(), 1);
  }
  execv("/proc/self/exe", argv);  // on failure, carry on with the default policy
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<std::string> normalised = NormaliseFlagNames(argc, argv);
  std::vector<char*> cargv;
  for (std::string& a : normalised) cargv.push_back(a.data());
  std::vector<char*> rest = absl::ParseCommandLine(argc, cargv.data());
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  if (args.empty() || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  ReexecForStableTiming(argv, command);
  args.erase(args.begin());
  using namespace hilnas::tools;
  if (command == "shapes") return ShapesCommand(args);
  if (command == "space") return SpaceCommand(args);
  if (command == "run") return RunCommand(args);
  if (command == "checkpoint") return CheckpointCommand(args);
  if (command == "demo") return DemoCommand(args);
  if (command == "coordinator") return CoordinatorCommand(args);
  if (command == "agent") return AgentCommand(args);
  if (command == "fleet") return FleetCommand(args);
  if (command == "agents") return AgentsCommand(args);
  if (command == "bench") return BenchCommand(args);
  if (command == "latency") return LatencyCommand(args);
  if (command == "corpus") return CorpusCommand(args);
  if (command == "train") return TrainCommand(args);
  if (command == "calibrate") return CalibrateCommand(args);
  if (command == "prune") return PruneCommand(args);
  if (command == "backbone") return BackboneCommand(args);
  if (command == "campaign") return CampaignCommand(args);
  if (command == "pareto") return ParetoCommand(args);
  if (command == "export") return ExportCommand(args);
  if (command == "slim") return SlimCommand(args);
  if (command == "ppd") return PpdCommand(args);
  std::fprintf(stderr, "hilnas: unknown command \"%s\"\n\n%s", command.c_str(), kUsage);
  return 2;
}
