// `hilnas agent --compare-llama-bench PATH`: the built-in runtime against
// llama.cpp's llama-bench on this device, same weights, runs alternating
// (device_agent/runtime_compare.h). No coordinator. On a phone,
// `scripts/phone-agent SERIAL compare --llama-bench DIR` runs this there.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "device_agent/environment.h"
#include "device_agent/external_runtime.h"
#include "device_agent/libtorch_runtime.h"
#include "device_agent/runtime_compare.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "tools/arch_file.h"
#include "tools/cli.h"
#include "tools/commands/agent.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

// A comma list of numbers in [1, max], `flag` and `what` naming it in errors.
absl::StatusOr<std::vector<int>> Numbers(const std::string& list, const char* flag,
                                         const char* what, int max) {
  std::vector<int> out;
  for (absl::string_view s : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < 1 || v > max) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": \"", s, "\" is not ", what, " in 1..", max));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is empty"));
  return out;
}

// Single quotes for /bin/sh, a quote inside closed, escaped and reopened.
std::string ShellQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

absl::Status Compare(const CompareFlags& f, int threads) {
  if (access(f.llama_bench.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("--compare-llama-bench ", f.llama_bench, ": not an executable file"));
  }
  Arch arch = Full4Arch();  // llama.cpp's qwen3 layout; every layer full, as GGUF models are
  if (!f.arch.empty()) {
    HILNAS_ASSIGN_OR_RETURN(arch, ReadArchFile(f.arch));
  }
  HILNAS_ASSIGN_OR_RETURN(std::vector<int> prompts,
                          Numbers(f.prompts, "--compare-prompts", "a prompt length", kMaxContext));
  std::vector<int> thread_counts = {threads};
  if (!f.threads.empty()) {
    HILNAS_ASSIGN_OR_RETURN(thread_counts,
                            Numbers(f.threads, "--compare-threads", "a thread count", 1024));
  }
  const std::map<std::string, Precision> precisions = {
      {"f32", FP32}, {"f16", FP16}, {"q4_0", Q4_0}, {"q8_0", Q8_0}};
  if (precisions.count(f.dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--compare-dtype ", f.dtype, " is not one of f32, f16, q4_0, q8_0"));
  }
  if (f.kv_dtype != "f16" && f.kv_dtype != "q8_0") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--compare-kv-dtype ", f.kv_dtype, " is not f16 or q8_0 (caches llama-bench also has)"));
  }
  // One checkpoint both runtimes read: the same weights on both sides.
  const std::filesystem::path work =
      std::filesystem::temp_directory_path() / absl::StrCat("hilnas-compare-", getpid());
  std::filesystem::remove_all(work);
  HILNAS_ASSIGN_OR_RETURN(Decoder d, Decoder::Create(arch, /*seed=*/1));
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(d, (work / "ckpt").string(), StorageDtype::kF32));
  BenchmarkRequest req;
  req.set_checkpoint_dir((work / "ckpt").string());
  req.set_threads(threads);
  req.set_precision(precisions.at(f.dtype));
  req.set_kv_dtype(f.kv_dtype);

  LibtorchRuntimeOptions lo;
  std::unique_ptr<Runtime> hilnas = NewLibtorchRuntime(lo);
  ExternalRuntimeOptions eo;
  eo.name = "llama.cpp";
  eo.work_dir = (work / "llama").string();
  eo.export_command = kBuiltinGgufExport;
  const std::string dir = std::filesystem::path(f.llama_bench).parent_path().string();
  // The same cache on both sides; llama.cpp runs a q8_0 V cache only with
  // flash attention.
  eo.bench_command = absl::StrCat(
      "LD_LIBRARY_PATH=", ShellQuoted(dir.empty() ? "." : dir), " ", ShellQuoted(f.llama_bench),
      " -m {model} -p {prompt_tokens} -n {decode_tokens} -d 0,{depth} -t {threads} -r 1 -fa ",
      f.kv_dtype == "q8_0" ? 1 : 0, " -ctk ", f.kv_dtype, " -ctv ", f.kv_dtype, " -o json");
  std::unique_ptr<Runtime> llama = NewExternalRuntime(eo);

  CompareOptions co;
  co.prompts = prompts;
  co.threads = thread_counts;
  co.repeats = f.repeats;
  co.decode_tokens = f.decode_tokens;
  co.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  absl::StatusOr<Comparison> result = CompareRuntimes(*hilnas, *llama, req, co);
  std::filesystem::remove_all(work);
  if (!result.ok()) return result.status();
  const DeviceIdentity device = ProbeDevice();
  std::printf(
      "%s: %s weights, %s KV caches, %s threads, CPU %s, medians of %d alternating runs\n\n",
      arch.name.c_str(), f.dtype.c_str(), f.kv_dtype.c_str(),
      absl::StrJoin(thread_counts, ",").c_str(), device.soc().c_str(), f.repeats);
  std::printf("%s", CompareTable(result->rows, "hilnas", "llama.cpp").c_str());
  if (!result->scaling.empty()) {
    // Issue 35 item 3: does hilnas gain from the threads what llama.cpp does?
    std::printf(
        "\nWhat the threads give each runtime (ms on %d thread%s / ms on more, medians "
        "of %d rounds; the / columns >= 1: hilnas gains at least as much)\n\n%s",
        thread_counts.front(), thread_counts.front() == 1 ? "" : "s", f.repeats,
        ScalingTable(result->scaling, "hilnas", "llama.cpp").c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void AddCompareFlags(CLI::App* app, CompareFlags* f) {
  app->add_option("--compare-llama-bench", f->llama_bench,
                  "time the built-in runtime against this llama-bench binary on this device "
                  "(same weights, runs alternating), print a table and exit (no coordinator)");
  app->add_option("--compare-arch", f->arch,
                  "architecture to compare (.textproto or config.json, all layers full "
                  "attention); default: 4 x d 512, bench/runtime_compare.sh's full4");
  app->add_option("--compare-prompts", f->prompts, "prompt lengths to compare at, e.g. 256,1024");
  app->add_option("--compare-threads", f->threads,
                  "thread counts to compare at, in turn within each round, e.g. 1,4: also "
                  "prints what the threads give each runtime (default: --threads)");
  app->add_option("--compare-kv-dtype", f->kv_dtype,
                  "both runtimes' K/V caches: f16 (llama-bench's default) | q8_0");
  app->add_option("--compare-dtype", f->dtype, "weights to compare at: f32 | f16 | q4_0 | q8_0");
  app->add_option("--compare-repeats", f->repeats, "timed runs per runtime and prompt")
      ->check(CLI::Range(1, 100));
  app->add_option("--compare-decode-tokens", f->decode_tokens, "tokens decoded after each prompt")
      ->check(CLI::Range(1, 4096));
}

int CompareWithLlamaBench(const CompareFlags& flags, int threads) {
  absl::Status s = Compare(flags, threads);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace hilnas::tools
