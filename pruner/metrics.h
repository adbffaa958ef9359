// Activation metrics that decide what to prune (MobileLLM-Flash Sec. 3.3,
// after Fedorov et al. 2024 and Gromov et al. 2024), measured by one pass of
// the backbone over calibration tokens:
//   FFNMetric[l][c]   = 1/N sum_i |h_i,c|, h the FFN hidden (down_proj input)
//   ModelDimMetric[c] = 1/N sum_i |LN(x_i)_c|, averaged over every norm that
//                       feeds a block (input_ and post_attention_layernorm)
//   LayerMetric[l]    = 1 - 1/N sum_i cos(x_i, y_i), x/y the layer's input
//                       and output residual stream
// with N the positions (batch x sequence).
#ifndef HILNAS_PRUNER_METRICS_H_
#define HILNAS_PRUNER_METRICS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint_reader.h"
#include "model/decoder.h"

namespace hilnas {

struct ActivationMetrics {
  // CheckpointFingerprint of the backbone; metrics are refused for any other.
  std::string backbone_fingerprint;
  std::string backbone_name;
  int num_layers = 0, d_model = 0, d_ffn = 0;
  int64_t tokens = 0;                    // calibration positions N
  std::vector<std::vector<double>> ffn;  // [layer][d_ffn]
  std::vector<double> model_dim;         // [d_model]
  std::vector<double> layer;             // [layer]
};

// 64-bit FNV-1a of the checkpoint's config.json and weight files, hex
// (CheckpointReader::Fingerprint of a reader opened for just this).
absl::StatusOr<std::string> CheckpointFingerprint(const std::string& checkpoint_dir);

struct CalibrationOptions {
  int64_t seq_len = 256;
  int64_t batch_size = 8;
  int64_t max_tokens = 1 << 17;  // calibration positions used, from the start
};

// One pass over windows of `tokens`; `progress(done, total)` after every
// batch. INVALID_ARGUMENT when the tokens do not fill one window.
absl::StatusOr<ActivationMetrics> Calibrate(
    Decoder& model, const std::vector<int32_t>& tokens, const CalibrationOptions& options,
    const std::function<void(int64_t done, int64_t total)>& progress = {});

// JSON, written atomically. Load checks every array's length against the
// recorded shape and names the field on a mismatch (DATA_LOSS).
absl::Status SaveMetrics(const ActivationMetrics& metrics, const std::string& path);
absl::StatusOr<ActivationMetrics> LoadMetrics(const std::string& path);

// FAILED_PRECONDITION unless `metrics` were computed on this checkpoint
// (same fingerprint and shape); the message names both.
absl::Status CheckMetricsMatch(const ActivationMetrics& metrics, const std::string& metrics_path,
                               CheckpointReader& checkpoint);

}  // namespace hilnas

#endif  // HILNAS_PRUNER_METRICS_H_
