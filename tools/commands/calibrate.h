// `hilnas calibrate`, also the last step of `hilnas backbone`.
#ifndef HILNAS_TOOLS_COMMANDS_CALIBRATE_H_
#define HILNAS_TOOLS_COMMANDS_CALIBRATE_H_

#include <string>

#include "absl/status/status.h"

namespace hilnas::tools {

struct CalibrateOptions {
  std::string ckpt;
  std::string tokens;
  std::string out;      // default CKPT/metrics.json
  std::string metrics;  // the same as --out (prune's name for the file)
  int64_t calib_tokens = 1 << 17;
  int64_t seq_len = 128;
  int64_t batch_size = 16;
  int32_t threads = 0;
};

// FFN / ModelDim / Layer activation metrics of o.ckpt on o.tokens, saved
// with the checkpoint's fingerprint.
absl::Status RunCalibrate(const CalibrateOptions& o);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_CALIBRATE_H_
