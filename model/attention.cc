#include "model/attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

namespace hilnas {

torch::Tensor BlockedPositions(int64_t q_start, int64_t t, int64_t k_start, int64_t s,
                               int64_t window) {
  auto opts = torch::TensorOptions().dtype(torch::kLong);
  auto qpos = torch::arange(q_start, q_start + t, opts).view({t, 1});
  auto kpos = torch::arange(k_start, k_start + s, opts).view({1, s});
  auto blocked = kpos > qpos;
  if (window > 0) blocked = blocked.logical_or(qpos - kpos >= window);
  return blocked;
}

torch::Tensor ReferenceProbabilities(const torch::Tensor& q, const torch::Tensor& k,
                                     int64_t q_start, int64_t k_start, int64_t window) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
  const int64_t kvh = k.size(1), s = k.size(2);
  auto qg = q.reshape({b, kvh, h / kvh, t, hd});
  auto scores = torch::matmul(qg, k.unsqueeze(2).transpose(-1, -2)) / std::sqrt(double(hd));
  // One query with every key at or before it and no window needs no mask.
  if (t > 1 || window > 0 || k_start + s - 1 > q_start) {
    scores = scores.masked_fill(BlockedPositions(q_start, t, k_start, s, window),
                                -std::numeric_limits<double>::infinity());
  }
  return torch::softmax(scores, -1);
}

torch::Tensor ReferenceAttention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, int64_t q_start, int64_t k_start,
                                 int64_t window) {
  auto out = torch::matmul(ReferenceProbabilities(q, k, q_start, k_start, window),
                           v.unsqueeze(2));  // [B, KVH, G, T, hd]
  return out.reshape({q.size(0), q.size(1), q.size(2), q.size(3)});
}

torch::Tensor BlockedAttention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t q_start, int64_t k_start,
                               int64_t window, int64_t block) {
  torch::NoGradGuard no_grad;
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
  const int64_t kvh = k.size(1), s = k.size(2), g = h / kvh;
  const int64_t k_end = k_start + s;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (t == 1) {
    // Decode: one query per head against the keys it may see, all KV heads
    // in one batched product ([B*KVH, G, hd] x [B*KVH, hd, S']): four ops,
    // each key and value read once, no mask (the range is exact).
    const int64_t p = q_start;
    const int64_t hi = std::min(p + 1, k_end);
    const int64_t lo = window > 0 ? std::max(k_start, p - window + 1) : k_start;
    const int64_t n = hi - lo;
    auto keys = k.narrow(2, lo - k_start, n).reshape({b * kvh, n, hd});
    auto values = v.narrow(2, lo - k_start, n).reshape({b * kvh, n, hd});
    auto qs = q.reshape({b * kvh, g, hd});
    auto probs = torch::softmax(torch::bmm(qs, keys.transpose(1, 2)).mul_(scale), -1);
    return torch::bmm(probs, values).view({b, h, 1, hd});
  }
  const int64_t bq = std::min(t, block);
  const int64_t n_qblocks = (t + bq - 1) / bq;
  const int64_t bk = block;
  torch::Tensor out = torch::empty({b, h, t, hd}, q.options());
  // Work items: (batch, KV head, query block), each writing its own slice.
  at::parallel_for(0, b * kvh * n_qblocks, 1, [&](int64_t first, int64_t last) {
    std::map<std::tuple<int64_t, int64_t, int64_t>, torch::Tensor> masks;
    for (int64_t item = first; item < last; ++item) {
      const int64_t bi = item / (kvh * n_qblocks), gi = (item / n_qblocks) % kvh,
                    qb = item % n_qblocks;
      const int64_t i0 = qb * bq, rows_q = std::min(bq, t - i0);
      const int64_t p0 = q_start + i0, p1 = p0 + rows_q;  // query positions [p0, p1)
      // The G query heads sharing this KV head, stacked: [G * rows_q, hd].
      torch::Tensor qs =
          q[bi].narrow(0, gi * g, g).narrow(1, i0, rows_q).reshape({g * rows_q, hd}) * scale;
      const torch::Tensor keys = k[bi][gi], values = v[bi][gi];  // [S, hd]
      // Keys any of these queries may see: causal above, window below.
      const int64_t hi = std::min(p1, k_end);
      const int64_t lo = window > 0 ? std::max(k_start, p0 - window + 1) : k_start;
      torch::Tensor m = torch::full({g * rows_q}, neg_inf, q.options());
      torch::Tensor l = torch::zeros({g * rows_q}, q.options());
      torch::Tensor acc = torch::zeros({g * rows_q, hd}, q.options());
      for (int64_t c0 = lo; c0 < hi; c0 += bk) {
        const int64_t cols = std::min(bk, hi - c0);
        const torch::Tensor kb = keys.narrow(0, c0 - k_start, cols);
        torch::Tensor sc = torch::mm(qs, kb.t());  // [G * rows_q, cols]
        // Mask only blocks that cross the diagonal or the window's edge.
        const bool crosses_diagonal = c0 + cols - 1 > p0;
        const bool crosses_window = window > 0 && p1 - 1 - c0 >= window;
        if (crosses_diagonal || crosses_window) {
          // The mask depends only on the block's shape and its offset from
          // the queries: made once per shape and offset, reused by every
          // query block of this work range.
          const std::tuple<int64_t, int64_t, int64_t> key{p0 - c0, rows_q, cols};
          auto it = masks.find(key);
          if (it == masks.end()) {
            it = masks.emplace(key, BlockedPositions(p0, rows_q, c0, cols, window)).first;
          }
          sc.view({g, rows_q, cols}).masked_fill_(it->second, neg_inf);
        }
        // Online softmax (Milakov & Gimelshein): rescale what was summed so
        // far to the new row maximum. Rows that saw only masked keys keep
        // maximum -inf; 0 stands in for it so exp() gives 0, not NaN.
        torch::Tensor m_new = torch::maximum(m, std::get<0>(sc.max(1)));
        torch::Tensor m_safe = m_new.masked_fill(m_new.isinf(), 0);
        torch::Tensor alpha = (m - m_safe).exp_();
        sc.sub_(m_safe.unsqueeze(1)).exp_();
        l.mul_(alpha).add_(sc.sum(1));
        acc.mul_(alpha.unsqueeze(1)).addmm_(sc, values.narrow(0, c0 - k_start, cols));
        m = m_new;
      }
      acc.div_(l.unsqueeze(1));
      out[bi].narrow(0, gi * g, g).narrow(1, i0, rows_q).copy_(acc.view({g, rows_q, hd}));
    }
  });
  return out;
}

}  // namespace hilnas
