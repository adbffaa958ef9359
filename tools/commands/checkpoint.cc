// `hilnas checkpoint init | check`: write a random-weight checkpoint;
// validate a checkpoint folder and summarise what was read.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "search_space/counts.h"
#include "tools/commands/commands.h"
#include "tools/common.h"

namespace hilnas::tools {
namespace {

struct CheckpointOptions {
  std::string verb;  // init | check
  std::string dir;   // check: the folder
  ArchFlags model;
  std::string out;
  std::string dtype = "f32";
  uint64_t seed = 0;
  bool overwrite = false;
  bool values = false;
};

int RunCheckpoint(const CheckpointOptions& cl) {
  if (cl.verb == "init" && cl.dir.empty()) {
    const std::string out = cl.out;
    if (out.empty()) return Fail(absl::InvalidArgumentError("checkpoint init needs --out DIR"));
    auto storage = StorageDtypeOf(cl.dtype);
    if (!storage.ok()) return Fail(storage.status());
    auto arch = ArchOf(cl.model);
    if (!arch.ok()) return Fail(arch.status());
    if (absl::Status s = CheckFitsInMemory(*arch, 0, BytesPerElement(*storage), "checkpoint init");
        !s.ok()) {
      return Fail(s);
    }
    absl::StatusOr<OutputFolder> dest = OutputFolder::Prepare(out, cl.overwrite, {});
    if (!dest.ok()) return Fail(dest.status());
    auto decoder = Decoder::Create(*arch, cl.seed);
    if (!decoder.ok()) return Fail(decoder.status());
    absl::Status s = SaveCheckpoint(*decoder, dest->staging(), *storage);
    if (s.ok()) s = dest->Commit();
    if (!s.ok()) return Fail(s);
    std::printf("wrote %s (config.json, model.safetensors; %s parameters, %s)\n", out.c_str(),
                WithCommas(CountParameters(*arch).model()).c_str(), cl.dtype.c_str());
    return 0;
  }
  if (cl.verb == "check" && !cl.dir.empty()) {
    auto decoder = LoadCheckpoint(cl.dir);
    if (!decoder.ok()) return Fail(decoder.status());
    if (cl.values) {
      absl::Status finite = CheckFiniteWeights(cl.dir);
      if (!finite.ok()) return Fail(finite);
    }
    const Arch& a = decoder->arch();
    std::printf("%s: ok%s: %d layers, d_model %d, d_ffn %d, pattern %s, %s parameters\n",
                cl.dir.c_str(), cl.values ? " (every weight finite)" : "", a.num_layers, a.d_model,
                a.d_ffn, PatternString(a.attention).c_str(),
                WithCommas(CountParameters(a).model()).c_str());
    std::printf("%s\n", DescribeArch(a).c_str());
    return 0;
  }
  return Fail(
      absl::InvalidArgumentError("usage: hilnas checkpoint init --shape NAME|--arch FILE --out DIR "
                                 "| hilnas checkpoint check DIR"));
}

}  // namespace

void AddCheckpointCommand(Cli& cli) {
  auto [app, o] = cli.Add<CheckpointOptions>(
      "checkpoint",
      "init --shape NAME|--arch FILE --out DIR [--dtype f32|f16|bf16 --seed S] | check DIR "
      "[--values]",
      "write a random-weight checkpoint; validate a checkpoint folder and summarise it",
      RunCheckpoint);
  app->add_option("verb", o->verb, "init | check")
      ->required()
      ->check(CLI::IsMember({"init", "check"}));
  app->add_option("dir", o->dir, "check: the checkpoint folder");
  AddArchFlags(app, &o->model);
  app->add_option("--out", o->out, "init: the folder to write");
  app->add_option("--dtype", o->dtype, "init: storage dtype f32 | f16 | bf16");
  app->add_option("--seed", o->seed, "init: random seed of the weights");
  app->add_flag("--overwrite", o->overwrite,
                "init: replace an existing non-empty --out (written beside it, renamed into place)");
  app->add_flag("--values", o->values, "check: also scan every weight for NaN and Inf");
}

}  // namespace hilnas::tools
