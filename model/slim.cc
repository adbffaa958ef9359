#include "model/slim.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hilnas {
namespace {

constexpr double kFloat16Max = 65504.0;

const char* NameOf(StorageDtype d) {
  switch (d) {
    case StorageDtype::kF16:
      return "float16";
    case StorageDtype::kBF16:
      return "bfloat16";
    case StorageDtype::kF32:
      break;
  }
  return "float32";
}

absl::Status CheckEligible(const Arch& a) {
  if (a.kv_cache == KvLayout::kSlim) {
    return absl::InvalidArgumentError(absl::StrCat(a.name, " already has kv_cache SLIM"));
  }
  if (a.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat(a.name,
                     " has a KV-prediction auxiliary model; its predicted values are not "
                     "K W_KV, so it cannot use a SLIM cache"));
  }
  if (a.num_kv_heads != a.num_heads) {
    return absl::InvalidArgumentError(absl::StrCat(
        a.name, ": slim attention needs multi-head attention, but ", a.num_heads,
        " query heads share ", a.num_kv_heads, " key/value heads (",
        a.num_kv_heads == 1 ? "MQA" : "GQA", "): W_K is not square and V cannot come from K"));
  }
  if (a.q_width() != a.d_model) {
    return absl::InvalidArgumentError(
        absl::StrCat(a.name, ": slim attention needs square W_K, but ", a.num_heads, " heads x ",
                     a.head_dim, " = ", a.q_width(), " != d_model ", a.d_model));
  }
  return absl::OkStatus();
}

template <typename T>
void SlimDecodeScoresKernel(const torch::Tensor& raw, const torch::Tensor& q,
                            const torch::Tensor& cos, const torch::Tensor& sin,
                            const torch::Tensor& norm_weight, double eps, torch::Tensor& out) {
  const int64_t b_n = raw.size(0), n = raw.size(1), h = q.size(1), hd = q.size(3), half = hd / 2;
  const T scale = T(1) / std::sqrt(T(hd));
  const T* w = norm_weight.defined() ? norm_weight.data_ptr<T>() : nullptr;
  for (int64_t b = 0; b < b_n; ++b) {
    const T* kb = raw[b].data_ptr<T>();  // [n, h * hd], rows contiguous
    const int64_t row = raw.stride(1);
    const T* qb = q[b].data_ptr<T>();  // [h, hd]
    T* ob = out[b].data_ptr<T>();      // [h, n]
    at::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
      std::vector<T> normed(hd);
      for (int64_t j = begin; j < end; ++j) {
        const T* c = cos.data_ptr<T>() + j * cos.stride(0);
        const T* s = sin.data_ptr<T>() + j * sin.stride(0);
        for (int64_t i = 0; i < h; ++i) {
          const T* k = kb + j * row + i * hd;
          if (w != nullptr) {  // the layer's K-norm (RMSNorm over the head)
            T ss = 0;
            for (int64_t f = 0; f < hd; ++f) ss += k[f] * k[f];
            const T inv = T(1) / std::sqrt(ss / T(hd) + T(eps));
            for (int64_t f = 0; f < hd; ++f) normed[f] = k[f] * inv * w[f];
            k = normed.data();
          }
          const T* q1 = qb + i * hd;
          const T* q2 = q1 + half;
          T acc = 0;
          for (int64_t f = 0; f < half; ++f) {
            const T a = k[f], bb = k[f + half];
            acc += c[f] * (q1[f] * a + q2[f] * bb) + s[f] * (q2[f] * a - q1[f] * bb);
          }
          ob[i * n + j] = acc * scale;
        }
      }
    });
  }
}

}  // namespace

std::string SlimReport::ToText() const {
  std::string out = "layer  cond(W_K)  max|W_KV|  rel.error(V)\n";
  for (const auto& l : layers) {
    absl::StrAppendFormat(&out, "%5d  %9.3g  %9.3g  %12.3g\n", l.layer, l.condition, l.max_abs,
                          l.relative_error);
  }
  return out;
}

absl::StatusOr<torch::Tensor> SlimKvWeight(const torch::Tensor& k_proj,
                                           const torch::Tensor& v_proj) {
  try {
    torch::NoGradGuard no_grad;
    auto wk = k_proj.to(torch::kDouble);
    auto wv = v_proj.to(torch::kDouble);
    // v = x Wv^T and k = x Wk^T; v = k W^T needs Wk^T W^T = Wv^T (Eq. 4 in
    // Linear layout).
    return torch::linalg::solve(wk.t(), wv.t(), /*left=*/true).t().contiguous();
  } catch (const c10::Error& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("W_K is singular: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<Decoder> ConvertToSlim(const Decoder& standard, const SlimOptions& options,
                                      SlimReport* report) {
  const Arch& a = standard.arch();
  if (absl::Status s = CheckEligible(a); !s.ok()) return s;
  Arch slim_arch = a;
  slim_arch.kv_cache = KvLayout::kSlim;
  auto slim = Decoder::Create(slim_arch, /*seed=*/0, standard.dtype());
  if (!slim.ok()) return slim.status();
  std::map<std::string, torch::Tensor> source;
  for (auto& [name, t] : standard.NamedTensors()) source[name] = t;
  SlimReport local;
  try {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : slim->NamedTensors()) {
      const std::string suffix = "self_attn.kv_proj.weight";
      if (name.size() < suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        t.copy_(source.at(name));
        continue;
      }
      const std::string prefix = name.substr(0, name.size() - suffix.size());
      const int layer = std::stoi(prefix.substr(std::string("model.layers.").size()));
      // Everything below in double: the solve, the conditioning, the error.
      const torch::Tensor wk = source.at(prefix + "self_attn.k_proj.weight").to(torch::kDouble);
      const torch::Tensor wv = source.at(prefix + "self_attn.v_proj.weight").to(torch::kDouble);
      SlimLayerReport r;
      r.layer = layer;
      auto sv = torch::linalg::svdvals(wk, c10::nullopt);
      const double smax = sv.max().item<double>(), smin = sv.min().item<double>();
      r.condition = smin > 0 ? smax / smin : std::numeric_limits<double>::infinity();
      if (!std::isfinite(r.condition) || r.condition > 1e15) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s layer %d: W_K is singular (smallest singular value %g, largest %g); slim "
            "attention cannot recover V from K",
            a.name, layer, smin, smax));
      }
      if (r.condition > options.max_condition) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s layer %d: W_K condition number %.3g exceeds the limit %.3g; values computed as "
            "K W_KV would lose about %.0f more decimal digits than K",
            a.name, layer, r.condition, options.max_condition, std::log10(r.condition)));
      }
      auto w = SlimKvWeight(wk, wv);
      if (!w.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat(a.name, " layer ", layer, ": ", w.status().message()));
      }
      r.max_abs = w->abs().max().item<double>();
      if (options.storage == StorageDtype::kF16 && r.max_abs >= kFloat16Max) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s layer %d: W_KV entries reach %.4g, beyond float16's largest value %g; store the "
            "slim checkpoint as f32 or bf16",
            a.name, layer, r.max_abs, kFloat16Max));
      }
      auto stored = w->to(TorchDtypeOf(options.storage)).to(torch::kDouble);
      r.relative_error =
          (torch::matmul(stored, wk) - wv).norm().item<double>() / wv.norm().item<double>();
      if (!(r.relative_error <= options.max_relative_error)) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s layer %d: W_KV rounded to %s reconstructs W_V with relative error %.3g, above the "
            "limit %.3g (cond(W_K) %.3g)",
            a.name, layer, NameOf(options.storage), r.relative_error, options.max_relative_error,
            r.condition));
      }
      t.copy_(*w);
      local.layers.push_back(r);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("converting ", a.name, " to slim: ", e.what_without_backtrace()));
  } catch (const std::out_of_range& e) {
    return absl::InternalError(absl::StrCat("converting ", a.name, ": missing tensor"));
  }
  if (report != nullptr) *report = std::move(local);
  return slim;
}

torch::Tensor SlimDecodeScores(const torch::Tensor& raw, const torch::Tensor& q,
                               const torch::Tensor& cos, const torch::Tensor& sin,
                               const torch::Tensor& norm_weight, double eps) {
  auto qc = q.contiguous();
  auto out = torch::empty({raw.size(0), q.size(1), raw.size(1)}, raw.options());
  if (raw.scalar_type() == torch::kDouble) {
    SlimDecodeScoresKernel<double>(raw, qc, cos.contiguous(), sin.contiguous(), norm_weight, eps,
                                   out);
  } else {
    SlimDecodeScoresKernel<float>(raw, qc, cos.contiguous(), sin.contiguous(), norm_weight, eps,
                                  out);
  }
  return out.unsqueeze(2);
}

}  // namespace hilnas
