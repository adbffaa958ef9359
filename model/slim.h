// Slim attention conversion (Slim Attention Sec. 1, Eq. 4): a multi-head
// attention checkpoint keeps only its keys in the cache and computes values
// from them, V = K W_KV with W_KV = W_K^-1 W_V precomputed offline and stored
// in place of W_V. Exact in real arithmetic; in floating point the error of
// the reconstructed values grows with W_K's condition number, so conversion
// measures it per layer and refuses what would not be exact enough.
#ifndef HILNAS_MODEL_SLIM_H_
#define HILNAS_MODEL_SLIM_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/decoder.h"

namespace hilnas {

struct SlimOptions {
  // Largest accepted 2-norm condition number of a layer's W_K.
  double max_condition = 1e5;
  // The dtype W_KV will be stored in: its range is checked (float16 tops out
  // at 65504) and the values' reconstruction error is measured after
  // rounding W_KV to it.
  StorageDtype storage = StorageDtype::kF32;
  // Largest accepted ||W_K W_KV - W_V||_F / ||W_V||_F with W_KV rounded to
  // `storage` (computed in double).
  double max_relative_error = 1e-3;
};

struct SlimLayerReport {
  int layer = 0;
  double condition = 0;       // cond_2(W_K)
  double max_abs = 0;         // max |W_KV|
  double relative_error = 0;  // as SlimOptions::max_relative_error
};

struct SlimReport {
  std::vector<SlimLayerReport> layers;  // attention layers only
  std::string ToText() const;           // one row per layer
};

// W_KV for one layer in Linear layout (v = k W^T): W = W_v W_k^-1, found by
// solving W_k^T W^T = W_v^T in double precision (a solve, not an inverse).
// `k_proj`, `v_proj` are [width, d_model] Linear weights with width ==
// d_model. FAILED_PRECONDITION when W_k is singular.
absl::StatusOr<torch::Tensor> SlimKvWeight(const torch::Tensor& k_proj,
                                           const torch::Tensor& v_proj);

// Converts a standard-cache decoder into an equivalent SLIM one (same dtype;
// every other tensor copied). INVALID_ARGUMENT when the architecture is not
// multi-head attention (GQA/MQA, or heads x head_dim != d_model), is already
// SLIM or has a KV-prediction auxiliary model; FAILED_PRECONDITION naming the
// layer for a singular or ill-conditioned W_K, a W_KV out of the storage
// dtype's range, or a reconstruction error above the limit.
absl::StatusOr<Decoder> ConvertToSlim(const Decoder& standard, const SlimOptions& options,
                                      SlimReport* report = nullptr);

// The scores of the decoder's slim decode step, fused:
// q_i . RoPE_j(K-norm(k_j)) / sqrt(hd) for one query per head, q [B, H, 1, hd] already normalised
// and rotated, over raw keys [B, S, H*hd] (rows contiguous) at positions whose cos/sin rows are
// given [S, hd]. Rotating key pair (a, b) and dotting with (q1, q2) is
// c (q1 a + q2 b) + s (q2 a - q1 b), so each key is read once and no rotated
// copy is made; the op-by-op route (rotate into n x d temporaries, then a
// matmul) was 3x the standard cache's decode time at 8k tokens. Returns
// [B, H, 1, S]; float and double only.
torch::Tensor SlimDecodeScores(const torch::Tensor& raw, const torch::Tensor& q,
                               const torch::Tensor& cos, const torch::Tensor& sin,
                               const torch::Tensor& norm_weight, double eps);

}  // namespace hilnas

#endif  // HILNAS_MODEL_SLIM_H_
