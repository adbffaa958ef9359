// `hilnas backbone`: the demo backbone's recipe, recorded in DIR/train.json
// and DIR/corpus.bin.json: the byte corpus of Debian English text,
// configs/demo-backbone.textproto trained from seed 0 with the options
// below, then calibrated on the training tokens. Each step is the library
// function of its command with options set here.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/checkpoint_files.h"
#include "tools/commands/calibrate.h"
#include "tools/commands/commands.h"
#include "tools/commands/corpus.h"
#include "tools/commands/train.h"
#include "tools/common.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

namespace fs = std::filesystem;

struct BackboneOptions {
  std::string out;
  bool overwrite = false;
  int64_t backbone_steps = 600;
  ArchFlags model;  // default configs/demo-backbone.textproto
  std::string sources;
  int64_t calib_tokens = 1 << 17;
  int32_t threads = 0;
  uint64_t seed = 0;
};

absl::Status RunBackbone(const BackboneOptions& o) {
  const std::string corpus = (fs::path(o.out) / "corpus.bin").string();
  std::error_code ec;
  // The recipe writes several files into DIR in turn; it refuses a folder
  // that holds something else unless --overwrite (the same rule as prune).
  if (fs::exists(o.out, ec) && !fs::is_empty(o.out, ec) && !o.overwrite) {
    return absl::AlreadyExistsError(absl::StrCat(
        "--out ", o.out, " exists and is not empty; choose a new folder or pass --overwrite"));
  }
  fs::create_directories(o.out, ec);
  HILNAS_RETURN_IF_ERROR(RunCorpus(ByteCorpusOptions(corpus, o.sources)));
  TrainCommandOptions train;
  train.model = o.model;
  if (!train.model.given()) {
    train.model.arch = std::string(HILNAS_SOURCE_DIR) + "/configs/demo-backbone.textproto";
  }
  train.tokens = corpus;
  train.steps = o.backbone_steps;
  train.batch_size = 16;
  train.seq_len = 128;
  train.lr = 3e-3;
  train.warmup_steps = 30;
  train.eval_every = 100;
  train.checkpoint_dir = (fs::path(o.out) / "training").string();
  train.threads = o.threads;
  train.seed = o.seed;
  HILNAS_RETURN_IF_ERROR(TrainInto(train, o.out).status());
  CalibrateOptions calibrate;
  calibrate.ckpt = o.out;
  calibrate.tokens = corpus;
  calibrate.out = MetricsFileName(o.out);
  calibrate.calib_tokens = o.calib_tokens;
  calibrate.threads = o.threads;
  HILNAS_RETURN_IF_ERROR(RunCalibrate(calibrate));
  fs::remove_all(fs::path(o.out) / "training", ec);
  return absl::OkStatus();
}

}  // namespace

void AddBackboneCommand(Cli& cli) {
  auto [app, o] = cli.Add<BackboneOptions>(
      "backbone", "--out DIR [--backbone-steps 600]",
      "build the demo backbone: corpus, train, calibrate",
      [](const BackboneOptions& o) { return ExitCode(RunBackbone(o)); });
  app->add_option("--out", o->out, "the backbone's folder")->required();
  app->add_flag("--overwrite", o->overwrite, "write into a non-empty --out");
  app->add_option("--backbone-steps", o->backbone_steps, "training steps of the recipe")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  AddArchFlags(app, &o->model);
  app->add_option("--sources", o->sources,
                  "corpus: comma-separated text files or folders; default Debian's English text");
  app->add_option("--calib-tokens", o->calib_tokens, "calibration positions used")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  AddThreadsFlag(app, &o->threads);
  app->add_option("--seed", o->seed, "random seed of the weights and batches");
  cli.StableTiming(app, &o->threads);
}

}  // namespace hilnas::tools
