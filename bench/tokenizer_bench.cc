// Tokenizer throughput, hilnas against Hugging Face's Rust `tokenizers`
// (the Node binding under BUILD/npm) on the same text, thread counts and
// machine, in one run (issue 37: "at least the Rust reference's").
//
//   build/bench/tokenizer_bench --tokenizer T.json --text FILE [--threads 1,2]
//       [--repeats 3] [--batch 1000] [--lines-per-text 1]
//
// Both sides encode the file's lines (each line a text, specials not added);
// hilnas splits the lines across std::threads, Rust's encodeBatch across
// its rayon pool (RAYON_NUM_THREADS). Prints one markdown row per thread
// count: MB/s and tokens/s of each, the ratio, and whether the token counts
// agree. The best of --repeats runs is kept on both sides.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "tokenizer/tokenizer.h"
#include "util/subprocess.h"

using hilnas::bench::Arg;
using hilnas::bench::Die;

int main(int argc, char** argv) {
  std::string tokenizer_path = Arg(argc, argv, "--tokenizer", "");
  std::string text_path = Arg(argc, argv, "--text", "");
  if (tokenizer_path.empty() || text_path.empty()) {
    std::fprintf(stderr, "usage: tokenizer_bench --tokenizer T.json --text FILE [--threads 1,2]\n");
    return 2;
  }
  int repeats = std::stoi(Arg(argc, argv, "--repeats", "3"));
  std::string batch = Arg(argc, argv, "--batch", "1000");
  std::vector<int> threads;
  for (absl::string_view t : absl::StrSplit(Arg(argc, argv, "--threads", "1,2"), ',')) {
    int n = 0;
    if (absl::SimpleAtoi(t, &n) && n > 0) threads.push_back(n);
  }
  auto load_start = std::chrono::steady_clock::now();
  auto tok = hilnas::tokenizer::Tokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) Die(tok.status());
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  std::ifstream in(text_path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  // Texts of --lines-per-text lines each (1: every line its own text; more
  // amortises the binding's per-call cost on the reference side).
  int per_text = std::stoi(Arg(argc, argv, "--lines-per-text", "1"));
  std::vector<absl::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = start;
    for (int k = 0; k < per_text && end < text.size(); ++k) {
      end = text.find('\n', end);
      end = end == std::string::npos ? text.size() : end + 1;
    }
    lines.emplace_back(text.data() + start, end - start);
    start = end;
  }
  std::printf("# %s, %s: %.2f MB, %zu texts of %d line(s); hilnas load %.2f s\n",
              tokenizer_path.c_str(), text_path.c_str(), text.size() / 1e6, lines.size(), per_text,
              load_s);
  std::printf("| threads | hilnas MB/s | Rust MB/s | hilnas / Rust | hilnas tok/s | Rust tok/s | tokens equal |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int n : threads) {
    double best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      std::vector<size_t> counts(n, 0);
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      for (int w = 0; w < n; ++w) {
        pool.emplace_back([&, w] {
          for (size_t i = w; i < lines.size(); i += n) {
            auto ids = tok->Encode(lines[i]);
            if (!ids.ok()) Die(ids.status());
            counts[w] += ids->size();
          }
        });
      }
      for (auto& t : pool) t.join();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      tokens = 0;
      for (size_t c : counts) tokens += c;
    }
    auto ref = hilnas::RunProgram(
        {"node", std::string(HILNAS_SOURCE_DIR) + "/tests/reference/tokenize_ref.js", "bench",
         tokenizer_path, text_path, std::to_string(repeats), batch, std::to_string(per_text)},
        1800,
        {{"NODE_PATH", std::string(HILNAS_BINARY_DIR) + "/npm/node_modules"},
         {"RAYON_NUM_THREADS", std::to_string(n)}});
    if (!ref.ok()) Die(ref.status());
    auto j = nlohmann::json::parse(ref->out);
    double ref_s = j["seconds"].get<double>();
    size_t ref_tokens = j["tokens"].get<size_t>();
    double mb = text.size() / 1e6;
    std::printf("| %d | %.2f | %.2f | %.2fx | %.0f | %.0f | %s |\n", n, mb / best, mb / ref_s,
                ref_s / best, tokens / best, ref_tokens / ref_s,
                tokens == ref_tokens ? "yes" : "NO");
    std::fflush(stdout);
  }
  return 0;
}
