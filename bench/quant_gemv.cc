// A decode step's Q4_0 GEMV on one thread, over the two forms a Q4_0 matrix
// takes (model/quant.h): rows as GGUF stores them (QuantRowsDot, what the
// runtime ran before it grouped them) and rows grouped eight at a time
// (QuantGroupsGemm, what a decoder keeps on x86 and NEON), over matrices of
// several sizes: what fits L2, L3, and what streams from memory on most
// hosts. Rounds alternate the forms; medians of --rounds, each the mean of
// as many passes as read about 64 MiB, and their ratio (> 1: grouped
// faster). The weights are random nibbles under one scale (the kernels'
// work does not depend on the values); the two forms' products are checked
// to agree before anything is timed.
//
// --tokens N > 1 times a prompt's product of N tokens instead (QuantGemm
// over the rows as stored, which x86 regroups a block of rows at a time,
// against QuantGroupsGemm over the grouped matrix); GB/s then counts the
// weights once.
//
// --l2-kib A,B,... sizes the prompt blocks (model/quant.h's PromptBlocks)
// for each of those L2s in turn within every round, one table row each:
// what the blocks this CPU's L2 picks gain over ones sized for a core with
// less or more; --blocks A:W,... adds blocks of A KiB of activations
// against W KiB of weights (default: this CPU's blocks only).
//
// usage: quant_gemv [--cols 512] [--mib 1,8,64,512] [--rounds 7] [--tokens 1]
//                   [--l2-kib 256,1024,4096] [--blocks 1024:256,...]
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "model/quant.h"
#include "util/mapping_pages.h"

namespace quant_gemv_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using hilnas::bench::Arg;
using hilnas::bench::Median;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "quant_gemv: %s\nusage: quant_gemv [--cols 512] [--mib 1,8,64,512] "
               "[--rounds 7] [--tokens 1] [--l2-kib 256,1024,4096] [--blocks 1024:256]\n",
               why.c_str());
  std::exit(2);
}

int64_t Positive(const std::string& s, const char* name) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v <= 0)
    Usage(std::string(name) + " " + s + ": not a positive integer");
  return v;
}

}  // namespace

int Main(int argc, char** argv) {
  const int64_t cols = Positive(Arg(argc, argv, "--cols", "512"), "--cols");
  const int rounds = static_cast<int>(Positive(Arg(argc, argv, "--rounds", "7"), "--rounds"));
  const int64_t tokens = Positive(Arg(argc, argv, "--tokens", "1"), "--tokens");
  if (cols % hilnas::kQuantBlock != 0) Usage("--cols must be a multiple of 32");
  if (tokens > 8192) Usage("--tokens " + std::to_string(tokens) + ": at most 8192");
  std::vector<int64_t> sizes;
  for (absl::string_view s : absl::StrSplit(Arg(argc, argv, "--mib", "1,8,64,512"), ',')) {
    const int64_t mib = Positive(std::string(s), "--mib");
    if (mib > 2048) Usage("--mib " + std::string(s) + ": at most 2048 (two copies are held)");
    sizes.push_back(mib);
  }
  // The blocks to time, each with its label; nullopt: this CPU's.
  std::vector<std::pair<std::optional<hilnas::PromptBlocks>, std::string>> candidates;
  for (absl::string_view s :
       absl::StrSplit(Arg(argc, argv, "--l2-kib", ""), ',', absl::SkipEmpty())) {
    const int64_t kib = Positive(std::string(s), "--l2-kib");
    if (kib > (int64_t{1} << 20)) Usage("--l2-kib " + std::string(s) + ": at most 1 GiB");
    candidates.emplace_back(hilnas::PromptBlocksForL2(kib << 10), "L2 " + std::string(s) + " KiB");
  }
  for (absl::string_view s :
       absl::StrSplit(Arg(argc, argv, "--blocks", ""), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> aw = absl::StrSplit(s, ':');
    hilnas::PromptBlocks b;
    b.act_bytes = Positive(aw.first, "--blocks") << 10;
    b.weight_bytes = Positive(aw.second, "--blocks") << 10;
    if (b.act_bytes > (int64_t{1} << 30) || b.weight_bytes > (int64_t{1} << 30))
      Usage("--blocks " + std::string(s) + ": at most 1 GiB each");
    candidates.emplace_back(b, "set");
  }
  if (candidates.empty()) candidates.emplace_back(std::nullopt, "this CPU's");
  at::set_num_threads(1);
  const int64_t blocks = cols / hilnas::kQuantBlock;
  const int64_t row_bytes = blocks * hilnas::kQ4BlockBytes;
  std::printf("Q4_0 %s, 1 thread, rows of %lld weights; quantized path %s%s\n\n",
              tokens == 1 ? "GEMV" : ("product of " + std::to_string(tokens) + " tokens").c_str(),
              static_cast<long long>(cols), hilnas::QuantKernelName(),
              hilnas::QuantGroupsRowsHere() ? "" : " (a decoder here keeps rows as stored)");
  std::printf("prompt blocks here: %s\n\n", hilnas::PromptBlocksDescription().c_str());
  std::printf(
      "| MiB | rows | blocks | rows as stored ms | grouped ms | GB/s stored | GB/s grouped | "
      "grouped speed-up |\n"
      "|---:|---:|---|---:|---:|---:|---:|---:|\n");
  for (int64_t mib : sizes) {
    const int64_t rows = (mib << 20) / row_bytes / hilnas::kQ4GroupRows * hilnas::kQ4GroupRows;
    if (rows == 0) Usage("--mib " + std::to_string(mib) + " holds no group of 8 rows");
    // Both forms on huge pages where the kernel grants them, as a
    // decoder's weights are (util/mapping_pages.h): on 4 KiB pages the
    // same blocks read 114-144 ms at 33 MiB from process to process.
    const int64_t bytes = rows * row_bytes;
    const std::shared_ptr<char> pages =
        hilnas::HugePageBuffer(static_cast<size_t>(2 * bytes), /*populate=*/true);
    auto weights = [&](int64_t at) {
      const std::vector<int64_t> shape = {rows, blocks, hilnas::kQ4BlockBytes};
      return pages ? torch::from_blob(
                         pages.get() + at, shape, [pages](void*) {}, torch::kUInt8)
                   : torch::empty(shape, torch::kUInt8);
    };
    torch::Tensor stored = weights(0);
    stored.copy_(torch::randint(256, stored.sizes(), torch::kUInt8));
    const uint16_t scale = c10::Half(0.01f).x;
    stored.select(2, 0).fill_(scale & 0xff);
    stored.select(2, 1).fill_(scale >> 8);
    torch::Tensor grouped = weights(bytes);
    grouped.copy_(stored);
    hilnas::GroupQuantRows(grouped);
    std::vector<float> x(tokens * cols);
    for (int64_t i = 0; i < tokens * cols; ++i) x[i] = std::sin(0.1 * i);
    std::vector<uint8_t> xq(tokens * blocks * hilnas::kQ8BlockBytes);
    for (int64_t i = 0; i < tokens; ++i) {
      hilnas::QuantizeActivations(x.data() + i * cols, cols,
                                  xq.data() + i * blocks * hilnas::kQ8BlockBytes);
    }
    std::vector<float> y_stored(tokens * rows), y_grouped(tokens * rows);
    auto by_rows = [&] {
      hilnas::QuantGemm(hilnas::QuantType::kQ4_0, stored.data_ptr<uint8_t>(), blocks, xq.data(),
                        tokens, y_stored.data(), rows, 0, rows);
    };
    auto by_groups = [&] {
      hilnas::QuantGroupsGemm(grouped.data_ptr<uint8_t>(), blocks, xq.data(), tokens,
                              y_grouped.data(), rows, 0, rows / hilnas::kQ4GroupRows);
    };
    by_rows();
    by_groups();
    for (int64_t o = 0; o < tokens * rows; ++o) {
      if (std::fabs(y_stored[o] - y_grouped[o]) > 1e-4 * (std::fabs(y_stored[o]) + 1)) {
        std::fprintf(stderr, "quant_gemv: row %lld: %g stored, %g grouped\n",
                     static_cast<long long>(o), y_stored[o], y_grouped[o]);
        return 1;
      }
    }
    const int passes = static_cast<int>(std::max<int64_t>(1, 64 / mib / tokens));
    auto time = [&](auto&& pass) {
      const auto t0 = Clock::now();
      for (int p = 0; p < passes; ++p) pass();
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / passes;
    };
    const size_t n = candidates.size();
    std::vector<std::vector<double>> ms_rows(n), ms_groups(n);
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < n; ++k) {
        const size_t j = (k + r) % n;  // each candidate first in turn
        hilnas::SetPromptBlocks(candidates[j].first);
        if (r % 2 == 0) {
          ms_rows[j].push_back(time(by_rows));
          ms_groups[j].push_back(time(by_groups));
        } else {
          ms_groups[j].push_back(time(by_groups));
          ms_rows[j].push_back(time(by_rows));
        }
      }
    }
    for (size_t j = 0; j < n; ++j) {
      hilnas::SetPromptBlocks(candidates[j].first);
      const hilnas::PromptBlocks pb = hilnas::QuantPromptBlocks();
      const double a = Median(ms_rows[j]), b = Median(ms_groups[j]);
      std::printf(
          "| %lld | %lld | %s (%lld+%lld KiB) | %.3f | %.3f | %.1f | %.1f | %.2fx |\n",
          static_cast<long long>(mib), static_cast<long long>(rows), candidates[j].second.c_str(),
          static_cast<long long>(pb.act_bytes >> 10), static_cast<long long>(pb.weight_bytes >> 10),
          a, b, static_cast<double>(bytes) / a / 1e6, static_cast<double>(bytes) / b / 1e6, a / b);
    }
    hilnas::SetPromptBlocks(std::nullopt);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace quant_gemv_main
