#include "model/kernel_check.h"

#include <torch/torch.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/attention.h"
#include "model/gemv.h"

namespace hilnas {
namespace {

// Largest |got - want| / sum_i |w_i x_i| over the rows of one product.
double GemvError(const torch::Tensor& got, const torch::Tensor& want, const torch::Tensor& scale) {
  return ((got.to(torch::kDouble) - want).abs() / scale.clamp_min(1e-30)).max().item<double>();
}

void CheckGemvs(KernelCheck& out) {
  // 1027 columns leave a remainder after every vector width and unrolled
  // step (32 floats on AVX2, 16 on NEON); 576 is a real width (SmolLM); 7
  // is below one vector; odd row counts split unevenly across threads.
  for (torch::Dtype storage : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
    for (auto [rows, in] : {std::pair<int64_t, int64_t>{67, 1027}, {131, 576}, {5, 7}}) {
      const torch::Tensor w = torch::randn({rows, in}).to(storage);
      const torch::Tensor x = torch::randn({in});
      const torch::Tensor wd = w.to(torch::kDouble), xd = x.to(torch::kDouble);
      const torch::Tensor want = torch::mv(wd, xd);
      const torch::Tensor scale = torch::mv(wd.abs(), xd.abs());
      KernelCheckRow row;
      row.kernel = absl::StrCat("gemv ", c10::toString(storage), " ", rows, "x", in);
      row.best_error = GemvError(WeightGemvs({w}, x, KernelPath::kBest)[0], want, scale);
      row.portable_error = GemvError(WeightGemvs({w}, x, KernelPath::kPortable)[0], want, scale);
      row.ok = row.best_error <= KernelCheck::kTolerance &&
               *row.portable_error <= KernelCheck::kTolerance;
      out.rows.push_back(row);
    }
  }
}

void CheckAttention(KernelCheck& out) {
  // 8 query heads on 2 KV heads of 64 dims, 200 positions; one query (the
  // decode path) and all 200 (prefill), full and with a window of 48.
  const torch::Tensor k = torch::randn({1, 2, 200, 64}), v = torch::randn({1, 2, 200, 64});
  for (int64_t t : {int64_t{1}, int64_t{200}}) {
    for (int64_t window : {int64_t{0}, int64_t{48}}) {
      const torch::Tensor q = torch::randn({1, 8, t, 64});
      const int64_t q_start = 200 - t;
      const torch::Tensor got = BlockedAttention(q, k, v, q_start, 0, window, /*block=*/64);
      const torch::Tensor want = ReferenceAttention(q.to(torch::kDouble), k.to(torch::kDouble),
                                                    v.to(torch::kDouble), q_start, 0, window);
      KernelCheckRow row;
      row.kernel = absl::StrCat("attention ", t == 1 ? "decode" : "prefill",
                                window > 0 ? absl::StrCat(" window ", window) : " full");
      row.best_error =
          ((got.to(torch::kDouble) - want).abs().max() / want.abs().max()).item<double>();
      row.ok = row.best_error <= KernelCheck::kTolerance;
      out.rows.push_back(row);
    }
  }
}

}  // namespace

bool KernelCheck::ok() const {
  return !rows.empty() &&
         std::all_of(rows.begin(), rows.end(), [](const KernelCheckRow& r) { return r.ok; });
}

std::string KernelCheck::Report() const {
  std::string out = absl::StrFormat("%-32s %14s %14s\n", "kernel", "best error", "portable error");
  for (const KernelCheckRow& r : rows) {
    absl::StrAppendFormat(
        &out, "%-32s %14.2e %14s%s\n", r.kernel, r.best_error,
        r.portable_error ? absl::StrFormat("%.2e", *r.portable_error) : std::string("-"),
        r.ok ? "" : "  OVER TOLERANCE");
  }
  absl::StrAppendFormat(&out, "kernels: %s (gemv path %s, %d threads, tolerance %.0e relative)\n",
                        ok() ? "ok" : "FAILED", gemv_path, threads, kTolerance);
  return out;
}

absl::StatusOr<KernelCheck> CheckKernels(int threads) {
  if (threads < 1 || threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat("threads ", threads, " is outside 1..256"));
  }
  KernelCheck out;
  out.gemv_path = GemvKernelName();
  out.threads = threads;
  const int saved = at::get_num_threads();
  try {
    torch::NoGradGuard no_grad;
    at::set_num_threads(threads);
    torch::manual_seed(35);
    CheckGemvs(out);
    CheckAttention(out);
  } catch (const c10::Error& e) {
    at::set_num_threads(saved);
    return absl::InternalError(absl::StrCat("kernel check: ", e.what_without_backtrace()));
  }
  at::set_num_threads(saved);
  return out;
}

}  // namespace hilnas
