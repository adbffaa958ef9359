// hilnas: one binary, subcommands (DESIGN.md, "The command"). The command
// table below is the one list of commands: dispatch, `hilnas help` and the
// stable-timing re-exec all read it.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "util/subprocess.h"

namespace hilnas::tools {
namespace {

// Usage texts: the first line follows the command's name; further lines
// (arguments that did not fit, then what it does) are indented under it.
const Command kCommands[] = {
    {"shapes", ShapesCommand,
     "list | show NAME\n"
     "published shapes with exact parameter counts; one shape: fields, pattern, counts, KVP map",
     false},
    {"space", SpaceCommand,
     "show [--space FILE] | sample [--n N --seed S]\n"
     "search-space dimensions and size; Sobol draws of feasible architectures",
     false},
    {"run", RunCommand,
     "--shape NAME|--arch FILE|--ckpt DIR [--prompt-tokens N --max-new-tokens M\n"
     "    --prefill-chunk C --threads T --dtype f32|bf16 --weight-dtype f32|bf16|f16 --seed S]\n"
     "build, prefill and decode once; print TTFT and decode speed",
     true},
    {"checkpoint", CheckpointCommand,
     "init --shape NAME|--arch FILE --out DIR [--dtype f32|f16|bf16 --seed S] | check DIR\n"
     "write a random-weight checkpoint; validate a checkpoint folder and summarise it",
     false},
    {"coordinator", CoordinatorCommand,
     "[--listen ADDR --db FILE --http ADDR --work-dir DIR --token T --lease-ttl-ms MS\n"
     "    --tls-cert F --tls-key F --tls-client-ca F --user-token T --user-tokens-file F\n"
     "    --data-root DIR... --evaluator NAME=TEMPLATE|NAME=slurm:FILE... --max-queued-jobs N\n"
     "    --insecure]\n"
     "serve agents, users and campaigns over gRPC (SQLite store), and the web page with --http;\n"
     "off loopback it needs TLS, both tokens and a data root (docs/security.md)",
     true},
    {"agent", AgentCommand,
     "[--coordinator ADDR --name NAME --token T --threads N --cpu-set 0-1 --pools P\n"
     "    --tls-ca F [--tls-cert F --tls-key F] --runtime libtorch|external ...]\n"
     "a device agent: lease benchmark jobs, measure, report",
     true},
    {"fleet", FleetCommand,
     "--agents N [--fleet-threads 1,2 --coordinator ADDR]\n"
     "N local agents, each pinned to its own CPUs",
     false},
    {"agents", AgentsCommand,
     "list [--json]\n"
     "registered agents, state, last heartbeat, jobs done",
     false},
    {"bench", BenchCommand,
     "--shape NAME|--arch FILE|--ckpt DIR [--prompt-lengths 1024,2048,4096\n"
     "    --decode-tokens 16 --repeats 3 --max-repeats 10 --max-spread 0.05\n"
     "    --precision fp32|bf16 --device NAME|--pool POOL --json]\n"
     "one benchmark job through the coordinator",
     false},
    {"latency", LatencyCommand,
     "collect --space FILE --n N --prompt-lengths L [--passes 2] --out CSV\n"
     "  | fit --data CSV|--campaign C [--space FILE --metric ttft|decode --prompt-tokens N\n"
     "        --prior-model A.model] --out MODEL\n"
     "  | eval --data CSV|--campaign C [--space FILE --metric ttft|decode --folds 10 --plot "
     "F.svg\n"
     "        --prior-model A.model]\n"
     "  | predict --model MODEL [--space FILE] --shape NAME|--arch FILE\n"
     "measure Sobol draws through the agents; fit the GP latency model; cross-validated R^2,\n"
     "RMSE, Kendall tau vs FLOPs/params proxies; predicted latency with a 95% interval;\n"
     "--prior-model: a new device from a few points, on top of another device's model",
     true},
    {"corpus", CorpusCommand,
     "--out FILE [--sources A,B]\n"
     "byte-level tokens of English text from Debian packages",
     false},
    {"train", TrainCommand,
     "--tokens FILE --ckpt DIR|--arch FILE --out DIR [--steps 200 --batch-size 16\n"
     "    --seq-len 128 --lr 3e-3 --warmup-steps 20 --distill-from DIR --distill-weight 0.5\n"
     "    --eval-every 50 --checkpoint-dir DIR --heldout 0.05]\n"
     "continued pretraining (AdamW, cosine, clip, optional KD)",
     true},
    {"eval", EvalCommand,
     "--ckpt DIR --tokens FILE [--seq-len 128 --windows 64 --heldout 0.05 --threads T]\n"
     "held-out loss (nats/token), perplexity and tokens/s with the trainer's windows",
     true},
    {"generate", GenerateCommand,
     "--ckpt DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens 16 --logits-out F.npy]\n"
     "greedy continuation: text for byte-level vocabularies, ids otherwise",
     true},
    {"calibrate", CalibrateCommand,
     "--ckpt DIR --tokens FILE [--out FILE --calib-tokens N --seq-len 128]\n"
     "FFN / ModelDim / Layer activation metrics (Sec. 3.3)",
     true},
    {"prune", PruneCommand,
     "--base DIR [--metrics FILE] --shape NAME|--arch FILE|--layers N --d-model N\n"
     "    --d-ffn N --pattern FWS.. --window W --out DIR [--block-size 128]\n"
     "a dense pruned checkpoint",
     true},
    {"backbone", BackboneCommand,
     "--out DIR [--backbone-steps 600]\n"
     "build the demo backbone: corpus, train, calibrate",
     true},
    {"campaign", CampaignCommand,
     "create --config FILE | start NAME [--wait] | status|stop|resume NAME | list\n"
     "store a search campaign (.textproto); run it: stage 1 latency, stage 2 qNEHVI;\n"
     "progress, diagnostics, log; stop and resume",
     true},
    {"pareto", ParetoCommand,
     "show CAMPAIGN [--db FILE --all] | export CAMPAIGN --format csv|json [--out FILE]\n"
     "  | plot CAMPAIGN --out front.svg\n"
     "the Pareto table (loss vs predicted TTFT, decode, memory); every trial, the front,\n"
     "the reference point and published shapes as a plot",
     false},
    {"audit", AuditCommand,
     "[--db FILE --n 50 --json]\n"
     "who did what to this coordinator: create, start, stop, resume, submit (docs/security.md)",
     false},
    {"export", ExportCommand,
     "--campaign C --trial N --out DIR [--db FILE] |\n"
     "    --format gguf (--ckpt DIR | --campaign C --trial N) --out FILE [--dtype f32|f16]\n"
     "the dense pruned checkpoint of any trial; or a GGUF file for llama.cpp",
     false},
    {"slim", SlimCommand,
     "--in CKPT --out CKPT [--dtype f32|f16|bf16 --max-condition 1e5 --max-error 1e-3]\n"
     "K-only KV cache: store W_KV = W_K^-1 W_V (MHA checkpoints)",
     true},
    {"ppd", PpdCommand,
     "--ckpt CKPT --layer D --k K [--tokens FILE --prompts 4 --prompt-tokens 256\n"
     "    --max-new-tokens 256 --json]\n"
     "predictive pipelined decoding: p_correct, Theorem 4.1's latency and compute against\n"
     "measured, identity with greedy",
     true},
    {"demo", DemoCommand,
     "[--out hilnas-demo]\n"
     "the README's main job: a small two-stage campaign end to end",
     true},
};

const Command* FindCommand(const std::string& name) {
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// The whole usage text, from the table.
std::string Usage() {
  std::string out =
      "hilnas: hardware-in-the-loop architecture search for on-device LLMs\n\n"
      "usage: hilnas COMMAND [ARGS] [--flags]   (hilnas --helpfull lists every flag)\n\n";
  for (const Command& c : kCommands) {
    const std::vector<std::string> lines = absl::StrSplit(c.usage, '\n');
    absl::StrAppend(&out, "  ", c.name, " ", lines[0], "\n");
    for (size_t i = 1; i < lines.size(); ++i) absl::StrAppend(&out, "      ", lines[i], "\n");
  }
  return out;
}

void ReexecForStableTiming(char** argv, const Command& command, const CommandLine& cl) {
  if (command.stable_timing) ReexecWithTimingThreads(argv, cl.threads);
}

}  // namespace
}  // namespace hilnas::tools

int main(int argc, char** argv) {
  using namespace hilnas::tools;
  const std::string usage = Usage();
  absl::SetProgramUsageMessage(usage);
  std::vector<std::string> normalised = NormaliseFlagNames(argc, argv);
  const auto repeated = TakeRepeatedFlags(normalised);
  std::vector<char*> cargv;
  for (std::string& a : normalised) cargv.push_back(a.data());
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(cargv.size()), cargv.data());
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  if (args.empty() || args[0] == "help") {
    std::fputs(usage.c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const Command* command = FindCommand(args[0]);
  if (command == nullptr) {
    std::fprintf(stderr, "hilnas: unknown command \"%s\"\n\n%s", args[0].c_str(), usage.c_str());
    return 2;
  }
  const CommandLine cl = ParseCommandLine(repeated);
  ReexecForStableTiming(argv, *command, cl);
  args.erase(args.begin());
  return command->run(args, cl);
}
