// `hilnas calibrate`: FFNMetric, ModelDimMetric and LayerMetric
// (MobileLLM-Flash Sec. 3.3) in one pass, with progress.
#include "tools/commands/calibrate.h"

#include <cstdio>
#include <filesystem>

#include "model/checkpoint.h"
#include "pruner/metrics.h"
#include "quality/tokens.h"
#include "tools/commands/commands.h"
#include "tools/commands/corpus.h"
#include "tools/common.h"
#include "util/status_macros.h"

namespace hilnas::tools {

namespace fs = std::filesystem;

absl::Status RunCalibrate(const CalibrateOptions& cl) {
  HILNAS_RETURN_IF_ERROR(ApplyThreads(cl.threads));
  const std::string& ckpt = cl.ckpt;
  const std::string& tokens_path = cl.tokens;
  std::string out = cl.out.empty() ? cl.metrics : cl.out;
  if (out.empty()) out = MetricsFileName(ckpt);
  HILNAS_RETURN_IF_ERROR(CheckTokenizerMatches(ckpt, tokens_path));
  HILNAS_ASSIGN_OR_RETURN(auto checkpoint, CheckpointReader::Open(ckpt));
  HILNAS_ASSIGN_OR_RETURN(Decoder model, checkpoint->Load());
  HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                          ReadTokenFile(tokens_path, model.arch().vocab_size));
  CalibrationOptions o;
  o.seq_len = cl.seq_len;
  o.batch_size = cl.batch_size;
  o.max_tokens = cl.calib_tokens;
  int last_pct = -1;
  HILNAS_ASSIGN_OR_RETURN(ActivationMetrics m,
                          Calibrate(model, ids, o, [&](int64_t done, int64_t total) {
                            const int pct = static_cast<int>(100 * done / total);
                            if (pct / 10 != last_pct / 10 || done == total) {
                              std::printf("calibrating: %s / %s positions (%d%%)\n",
                                          WithCommas(done).c_str(), WithCommas(total).c_str(), pct);
                              std::fflush(stdout);
                              last_pct = pct;
                            }
                          }));
  // Taken while the weights were read (the file is not read again).
  HILNAS_ASSIGN_OR_RETURN(m.backbone_fingerprint, checkpoint->Fingerprint());
  HILNAS_RETURN_IF_ERROR(SaveMetrics(m, out));
  std::printf("LayerMetric (1 - mean cos(in, out)) by layer:");
  for (double v : m.layer) std::printf(" %.3f", v);
  std::printf("\nmetrics of %s on %s positions -> %s\n", ckpt.c_str(), WithCommas(m.tokens).c_str(),
              out.c_str());
  return absl::OkStatus();
}

void AddCalibrateCommand(Cli& cli) {
  auto [app, o] = cli.Add<CalibrateOptions>(
      "calibrate", "--ckpt DIR --tokens FILE [--out FILE --calib-tokens N --seq-len 128]",
      "FFN / ModelDim / Layer activation metrics (Sec. 3.3)",
      [](const CalibrateOptions& o) { return ExitCode(RunCalibrate(o)); });
  app->add_option("--ckpt", o->ckpt, "the checkpoint to calibrate")->required();
  app->add_option("--tokens", o->tokens, "token file (uint16 ids; *.u32 for uint32)")->required();
  CLI::Option* out = app->add_option("--out", o->out, "metrics file; default CKPT/metrics.json");
  app->add_option("--metrics", o->metrics, "the same as --out")->excludes(out);
  app->add_option("--calib-tokens", o->calib_tokens, "calibration positions used")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app->add_option("--seq-len", o->seq_len, "tokens per sequence")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app->add_option("--batch-size", o->batch_size, "sequences per batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  AddThreadsFlag(app, &o->threads);
  cli.StableTiming(app, &o->threads);
}

}  // namespace hilnas::tools
