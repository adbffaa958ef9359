#include "model/kernel_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/attention.h"
#include "model/blas_core.h"
#include "model/gemv.h"
#include "model/internal/decoder_layers.h"
#include "model/prompt_gemm.h"
#include "model/quant.h"
#include "util/cpu_caches.h"
#include "util/cpu_features.h"

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
      // Every other form the tuner may pick (model/gemv.h) must give the
      // default form's bits, not only a small error.
      const GemvForm before = CurrentGemvForm();
      SetGemvForm(GemvForm::kOneRow);
      const torch::Tensor one_row = WeightGemv(w, x);
      for (GemvForm form : GemvFormsHere()) {
        if (form == GemvForm::kOneRow) continue;
        SetGemvForm(form);
        const torch::Tensor got = WeightGemv(w, x);
        KernelCheckRow f;
        f.kernel = absl::StrCat(row.kernel, " form ", GemvFormName(form), " (one-row's bits)");
        f.best_error = GemvError(got, want, scale);
        f.ok = f.best_error <= KernelCheck::kTolerance && torch::equal(got, one_row);
        out.rows.push_back(f);
      }
      SetGemvForm(before);
    }
  }
}

// The prompt product (model/prompt_gemm.h) where this CPU can run it: 13
// rows leave a partial tile of 6, 67 columns a partial tile of 4 and an
// uneven split over threads, 1027 a remainder after every 16-float vector
// and a second block of 512; bf16 and f16 weights widen in blocks.
void CheckPromptGemm(KernelCheck& out) {
  if (!OwnPromptGemmAvailable()) return;
  for (torch::Dtype storage : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
    for (auto [rows, in] : {std::pair<int64_t, int64_t>{67, 1027}, {131, 576}, {5, 7}}) {
      constexpr int64_t kTokens = 13;
      const torch::Tensor w = torch::randn({rows, in}).to(storage);
      const torch::Tensor x = torch::randn({kTokens, in});
      const torch::Tensor wd = w.to(torch::kDouble), xd = x.to(torch::kDouble);
      const torch::Tensor want = torch::mm(xd, wd.t()), scale = torch::mm(xd.abs(), wd.abs().t());
      torch::Tensor got = torch::empty({kTokens, rows});
      OwnPromptGemm(x.data_ptr<float>(), w.data_ptr(), *GemmWeightsFor(storage), kTokens, rows, in,
                    got.data_ptr<float>());
      KernelCheckRow row;
      row.kernel =
          absl::StrCat("prompt ", c10::toString(storage), " ", rows, "x", in, " x", kTokens);
      row.best_error = GemvError(got, want, scale);
      row.ok = row.best_error <= KernelCheck::kTolerance;
      out.rows.push_back(row);
    }
  }
}

// One attention row: the largest difference from the double reference
// relative to the reference's largest value.
void AddAttentionRow(std::string kernel, const torch::Tensor& got, const torch::Tensor& want,
                     KernelCheck& out) {
  KernelCheckRow row;
  row.kernel = std::move(kernel);
  row.best_error = ((got.to(torch::kDouble) - want).abs().max() / want.abs().max()).item<double>();
  row.ok = row.best_error <= KernelCheck::kTolerance;
  out.rows.push_back(std::move(row));
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
      AddAttentionRow(absl::StrCat("attention ", t == 1 ? "decode" : "prefill",
                                   window > 0 ? absl::StrCat(" window ", window) : " full"),
                      got, want, out);
    }
  }
}

// Decode over a half-precision cache (--kv-dtype f16): keys and values
// widened in registers as they are read, against the double product of
// the same halves. 8 query heads on 2 KV heads of 64 dims (tiles of four
// query rows), on 8 KV heads of 48 (one row a KV head, a value chunk of 48
// dims), and on 1 KV head over 1100 keys: three chunks of keys
// (DecodeChunkKeys), split over the threads and folded.
void CheckHalfCacheAttention(KernelCheck& out) {
  const int64_t h = 8;
  for (auto [kvh, hd, n] :
       {std::tuple<int64_t, int64_t, int64_t>{2, 64, 200}, {8, 48, 200}, {1, 64, 1100}}) {
    const torch::Tensor k = torch::randn({kvh, n, hd}).to(torch::kHalf);
    const torch::Tensor v = torch::randn({kvh, n, hd}).to(torch::kHalf);
    const torch::Tensor q = torch::randn({h, hd});
    torch::Tensor got = torch::empty({h, hd});
    DecodeAttention(q.data_ptr<float>(), h, kvh, hd,
                    reinterpret_cast<const uint16_t*>(k.data_ptr<at::Half>()),
                    reinterpret_cast<const uint16_t*>(v.data_ptr<at::Half>()), n * hd, n, 0, n - 1,
                    got.data_ptr<float>());
    const torch::Tensor want = ReferenceAttention(q.to(torch::kDouble).view({1, h, 1, hd}),
                                                  k.to(torch::kDouble).unsqueeze(0),
                                                  v.to(torch::kDouble).unsqueeze(0), n - 1, 0, 0)
                                   .view({h, hd});
    AddAttentionRow(kvh == h   ? "attention decode f16 cache mha"
                    : kvh == 1 ? "attention decode f16 cache, 1 KV head in chunks"
                               : "attention decode f16 cache",
                    got, want, out);
  }
}

// A prompt's keys and values written into an f16 cache (NarrowToHalves:
// F16C on x86, NEON's FCVTN on arm64) hold c10::Half's bits, value for
// value, on 203 values (a tail after every vector width) spanning half's
// range, past it (to infinity) and below it (subnormals, zero).
void CheckHalfCacheWrite(KernelCheck& out) {
  const torch::Tensor x = torch::cat(
      {torch::randn({101}) * 300, torch::randn({100}) * 1e-6, torch::tensor({7e4f, -1e5f})});
  std::vector<uint16_t> got(static_cast<size_t>(x.numel()));
  NarrowToHalves(x.data_ptr<float>(), x.numel(), got.data());
  const torch::Tensor want = x.to(torch::kHalf);
  int64_t differ = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    differ += got[static_cast<size_t>(i)] != want.data_ptr<at::Half>()[i].x;
  }
  KernelCheckRow row;
  row.kernel = "cache write f16 (c10::Half's bits)";
  row.best_error = static_cast<double>(differ) / static_cast<double>(x.numel());
  row.ok = differ == 0;
  out.rows.push_back(row);
}

// The SwiGLU and GeGLU rows a decode step and a prompt run (exp in
// registers on AVX2 and NEON) against the double formulas, over gates in
// [-20, 20] and past exp's clamps: each output's error relative to
// |gate * up|.
void CheckSwiGlu(KernelCheck& out) {
  const torch::Tensor gate =
      torch::cat({torch::linspace(-20, 20, 203), torch::tensor({-100.0f, -88.0f, 88.0f, 100.0f})});
  const torch::Tensor up = torch::randn({gate.numel()});
  const torch::Tensor g = gate.to(torch::kDouble), u = up.to(torch::kDouble);
  struct Glu {
    const char* name;
    void (*row)(const float*, const float*, int64_t, float*);
    torch::Tensor want;  // in double
  };
  const Glu rows[] = {
      {"swiglu row", decoder_internal::SwiGluRow, g / (1 + torch::exp(-g)) * u},
      {"geglu row", decoder_internal::GeGluRow,
       0.5 * g * (1 + torch::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u}};
  for (const auto& [name, glu, want] : rows) {
    torch::Tensor got = torch::empty_like(gate);
    glu(gate.data_ptr<float>(), up.data_ptr<float>(), gate.numel(), got.data_ptr<float>());
    KernelCheckRow row;
    row.kernel = name;
    row.best_error = ((got.to(torch::kDouble) - want).abs() / (g * u).abs().clamp_min(1e-30))
                         .max()
                         .item<double>();
    row.ok = row.best_error <= KernelCheck::kTolerance;
    out.rows.push_back(row);
  }
}

// Activations quantized to Q8_0 blocks as every quantized product, a Q8_0
// cache's rows and its decode queries are (QuantizeActivationsFast: AVX2,
// NEON) hold the portable loop's bytes (llama.cpp's reference quantizer),
// on blocks of every scale, an all-zero block, and ties (x * 127 / amax
// on .5: rounded to even either way).
void CheckActivationQuantizer(KernelCheck& out) {
  torch::Tensor x = torch::randn({24, 32}) * torch::logspace(-6, 4, 24).unsqueeze(1);
  x[3].zero_();
  x[5].fill_(63.5);
  x[5][0] = 127;  // amax 127: 63.5 * 127 / 127 is a tie
  x[6].fill_(-0.5);
  x[6][7] = 127;
  std::vector<uint8_t> got(24 * kQ8BlockBytes), want(24 * kQ8BlockBytes);
  QuantizeActivationsFast(x.data_ptr<float>(), x.numel(), got.data());
  QuantizeActivations(x.data_ptr<float>(), x.numel(), want.data());
  int64_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
  KernelCheckRow row;
  row.kernel = "q8_0 activations (portable bytes)";
  row.best_error = static_cast<double>(differ) / static_cast<double>(got.size());
  row.ok = differ == 0;
  out.rows.push_back(row);
}

// Decode over a Q8_0 cache (--kv-dtype q8_0): integer scores against the
// query quantized as the kernel quantizes it (scaled by 1/sqrt(hd)),
// values dequantized in registers, against the double product of the same
// blocks. 8 query heads on 2 KV heads of 64 dims (the four rows' scores in
// one product), and on 8 KV heads of 96 (three blocks a row).
void CheckQ8CacheAttention(KernelCheck& out) {
  const int64_t h = 8, n = 200;
  for (auto [kvh, hd] : {std::pair<int64_t, int64_t>{2, 64}, {8, 96}}) {
    const int64_t row = hd / kQuantBlock * kQ8BlockBytes;
    auto blocks = [&](const torch::Tensor& x) {  // [rows, hd] -> Q8_0 rows
      torch::Tensor q = torch::empty({x.size(0), row}, torch::kByte);
      for (int64_t r = 0; r < x.size(0); ++r) {
        QuantizeActivations(x[r].data_ptr<float>(), hd, q.data_ptr<uint8_t>() + r * row);
      }
      return q;
    };
    auto values = [&](const torch::Tensor& q) {  // Q8_0 rows -> double [rows, hd]
      return DequantizeMatrix(q.view({q.size(0), hd / kQuantBlock, kQ8BlockBytes}))
          .to(torch::kDouble);
    };
    const torch::Tensor k = blocks(torch::randn({kvh * n, hd}));
    const torch::Tensor v = blocks(torch::randn({kvh * n, hd}));
    const torch::Tensor q = torch::randn({h, hd});
    torch::Tensor got = torch::empty({h, hd});
    DecodeAttention(q.data_ptr<float>(), h, kvh, hd, k.data_ptr<uint8_t>(), v.data_ptr<uint8_t>(),
                    n * row, n, 0, n - 1, got.data_ptr<float>());
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const torch::Tensor q_seen = values(blocks((q * scale).contiguous())) / scale;
    const torch::Tensor want =
        ReferenceAttention(q_seen.view({1, h, 1, hd}), values(k).view({1, kvh, n, hd}),
                           values(v).view({1, kvh, n, hd}), n - 1, 0, 0)
            .view({h, hd});
    AddAttentionRow(kvh == h ? "attention decode q8_0 cache mha" : "attention decode q8_0 cache",
                    got, want, out);
  }
}

// Q4_0 and Q8_0 weights against Q8_0 activations: the best path (VNNI, or
// NEON's SMMLA for prompts and SDOT for one token, through QuantMatmul's
// threads), the baseline (AVX2, NEON without SDOT) and the portable loop,
// against a double product of the dequantized weights and activations.
// Integer sums are exact on every path, so only the f32 sums over blocks
// separate them from the reference. Q4_0 rows grouped eight at a time
// (model/quant.h), as a decoder holds them on x86 and NEON, likewise: each
// path reads that form too.
void CheckQuantized(KernelCheck& out) {
  using Case = std::tuple<QuantType, bool, int64_t, int64_t, int64_t>;  // grouped, rows, in, tokens
  std::vector<Case> cases;
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ8_0}) {
    for (auto [rows, in, tokens] :
         {std::tuple<int64_t, int64_t, int64_t>{67, 1024, 1}, {131, 576, 7}, {5, 32, 4}}) {
      cases.emplace_back(t, false, rows, in, tokens);
    }
  }
  // More tokens than a block of the prompt's product holds (QuantGemm
  // takes 256 KiB of activation rows at a time: 60 of 4096 columns), an
  // odd count of them and of rows: NEON's SMMLA pairs carried across the
  // blocks.
  cases.emplace_back(QuantType::kQ8_0, false, 67, 4096, 67);
  cases.emplace_back(QuantType::kQ4_0, true, 72, 4096, 67);
  cases.emplace_back(QuantType::kQ4_0, true, 64, 1024, 1);
  cases.emplace_back(QuantType::kQ4_0, true, 136, 576, 7);
  for (const auto& [t, grouped, rows, in, tokens] : cases) {
    torch::Tensor q = QuantizeMatrix(torch::randn({rows, in}), t).value();
    if (grouped) GroupQuantRows(q);
    const torch::Tensor x = torch::randn({tokens, in});
    const int64_t blocks = in / kQuantBlock;
    std::vector<uint8_t> xq(static_cast<size_t>(tokens * blocks * 34));
    torch::Tensor xr = torch::empty({tokens, in});
    for (int64_t i = 0; i < tokens; ++i) {
      QuantizeActivations(x.data_ptr<float>() + i * in, in, xq.data() + i * blocks * 34);
      DequantizeRow(QuantType::kQ8_0, xq.data() + i * blocks * 34, in,
                    xr.data_ptr<float>() + i * in);
    }
    const torch::Tensor wd = DequantizeMatrix(q).to(torch::kDouble), xd = xr.to(torch::kDouble);
    const torch::Tensor want = torch::mm(xd, wd.t()), scale = torch::mm(xd.abs(), wd.abs().t());
    auto path = [&](KernelPath p) {
      torch::Tensor c = torch::empty({tokens, rows});
      if (grouped) {
        QuantGroupsGemm(q.data_ptr<uint8_t>(), blocks, xq.data(), tokens, c.data_ptr<float>(), rows,
                        0, rows / kQ4GroupRows, p);
      } else {
        QuantGemm(t, q.data_ptr<uint8_t>(), blocks, xq.data(), tokens, c.data_ptr<float>(), rows, 0,
                  rows, p);
      }
      return GemvError(c, want, scale);
    };
    KernelCheckRow row;
    row.kernel =
        absl::StrCat(QuantTypeName(t), grouped ? " grouped " : " ", rows, "x", in, " x", tokens);
    row.best_error = GemvError(QuantMatmul(x, q), want, scale);
    row.baseline_error = path(KernelPath::kBaseline);
    row.portable_error = path(KernelPath::kPortable);
    row.ok = std::max({row.best_error, *row.baseline_error, *row.portable_error}) <=
             KernelCheck::kTolerance;
    out.rows.push_back(row);
  }
}

}  // namespace

bool KernelCheck::ok() const {
  return !rows.empty() &&
         std::all_of(rows.begin(), rows.end(), [](const KernelCheckRow& r) { return r.ok; });
}

std::string KernelCheck::Report() const {
  std::string out = absl::StrFormat("%-32s %14s %14s %14s\n", "kernel", "best error",
                                    "baseline error", "portable error");
  auto maybe = [](const std::optional<double>& e) {
    return e ? absl::StrFormat("%.2e", *e) : std::string("-");
  };
  for (const KernelCheckRow& r : rows) {
    absl::StrAppendFormat(&out, "%-32s %14.2e %14s %14s%s\n", r.kernel, r.best_error,
                          maybe(r.baseline_error), maybe(r.portable_error),
                          r.ok ? "" : "  OVER TOLERANCE");
  }
  absl::StrAppendFormat(&out,
                        "kernels: %s (gemv path %s, quantized path %s, %d threads, tolerance %.0e "
                        "relative; prompt matrix products %s)\n",
                        ok() ? "ok" : "FAILED", gemv_path, quant_path, threads, kTolerance,
                        PromptKernelsDescription());
  absl::StrAppend(&out, "kernels: quantized prompt blocks ", PromptBlocksDescription(), "; ",
                  KernelCpuCaches().Describe(), "\n");
  if (const std::string capped = CpuFeaturesCapNote(); !capped.empty()) {
    absl::StrAppend(&out, "kernels: ", capped, "\n");
  }
  return out;
}

absl::StatusOr<KernelCheck> CheckKernels(int threads) {
  if (threads < 1 || threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat("threads ", threads, " is outside 1..256"));
  }
  KernelCheck out;
  out.gemv_path = GemvKernelName();
  out.quant_path = QuantKernelName();
  out.threads = threads;
  const int saved = at::get_num_threads();
  try {
    torch::NoGradGuard no_grad;
    at::set_num_threads(threads);
    torch::manual_seed(35);
    CheckGemvs(out);
    CheckPromptGemm(out);
    CheckAttention(out);
    CheckHalfCacheAttention(out);
    CheckHalfCacheWrite(out);
    CheckActivationQuantizer(out);
    CheckSwiGlu(out);
    CheckQ8CacheAttention(out);
    CheckQuantized(out);
  } catch (const c10::Error& e) {
    at::set_num_threads(saved);
    return absl::InternalError(absl::StrCat("kernel check: ", e.what_without_backtrace()));
  }
  at::set_num_threads(saved);
  return out;
}

}  // namespace hilnas
