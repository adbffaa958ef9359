// One checkpoint reader (issue 34): `hilnas prune` and `hilnas export
// --format gguf` of a sharded checkpoint open config.json, the shard index
// and each shard exactly once. The commands run in this process, and every
// open(2)/openat(2)/fopen(3) the process makes is counted here by path:
// these definitions take the place of libc's (the executable's symbols come
// first) and forward to it. Also: a slim target pruned through the command
// line, with the backbone's tokenizer files carried along.
#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/checkpoint_reader.h"
#include "model/decoder.h"
#include "model/test_archs.h"
#include "pruner/metrics.h"
#include "tools/cli.h"
#include "util/files.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace {

std::mutex& CountMutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, int>& Counts() {
  static auto* counts = new std::map<std::string, int>();
  return *counts;
}
void Count(const char* path) {
  if (path == nullptr) return;
  std::lock_guard<std::mutex> lock(CountMutex());
  ++Counts()[path];
}
template <typename F>
F Real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

FILE* fopen(const char* path, const char* mode) {
  Count(path);
  static auto real = Real<FILE* (*)(const char*, const char*)>("fopen");
  return real(path, mode);
}
FILE* fopen64(const char* path, const char* mode) {
  Count(path);
  static auto real = Real<FILE* (*)(const char*, const char*)>("fopen64");
  return real(path, mode);
}
int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const unsigned mode = va_arg(ap, unsigned);
  va_end(ap);
  Count(path);
  static auto real = Real<int (*)(const char*, int, ...)>("open");
  return real(path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const unsigned mode = va_arg(ap, unsigned);
  va_end(ap);
  Count(path);
  static auto real = Real<int (*)(const char*, int, ...)>("open64");
  return real(path, flags, mode);
}
int openat(int dir, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const unsigned mode = va_arg(ap, unsigned);
  va_end(ap);
  Count(path);
  static auto real = Real<int (*)(int, const char*, int, ...)>("openat");
  return real(dir, path, flags, mode);
}
int openat64(int dir, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const unsigned mode = va_arg(ap, unsigned);
  va_end(ap);
  Count(path);
  static auto real = Real<int (*)(int, const char*, int, ...)>("openat64");
  return real(dir, path, flags, mode);
}

}  // extern "C"

namespace hilnas::tools {
namespace {

using ::testing::HasSubstr;

// Opens of each path since the last call, then the count starts again.
std::map<std::string, int> TakeCounts() {
  std::lock_guard<std::mutex> lock(CountMutex());
  std::map<std::string, int> out;
  out.swap(Counts());
  return out;
}

// `hilnas ARGS...` in this process; its exit code.
int Hilnas(std::vector<std::string> args) {
  args.insert(args.begin(), "hilnas");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Cli cli("hilnas", "test");
  AddAllCommands(cli);
  return cli.Main(static_cast<int>(argv.size()), argv.data());
}

// A multi-head, all-full backbone (GGUF can express it; slim applies to it).
Arch Backbone() {
  Arch a = TinyMhaArch();
  a.name = "sharded-mha";
  a.vocab_size = 64;
  a.qk_norm = false;
  a.attention.assign(4, Attention::kFull);
  return a;
}

class FileOpensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hilnas_file_opens";
    std::filesystem::remove_all(dir_);
    base_ = dir_ + "/base";
    ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(Backbone(), 7));
    ASSERT_OK(SaveCheckpoint(d, base_, StorageDtype::kF32));
    // Three shards and an index, as published backbones ship.
    ASSERT_OK_AND_ASSIGN(auto all, ReadSafetensors(base_ + "/model.safetensors"));
    std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(3);
    nlohmann::json map;
    int i = 0;
    for (const auto& [name, t] : all) {
      const int s = i++ % 3;
      shards[s].emplace_back(name, t);
      map[name] = ShardName(s);
    }
    for (int s = 0; s < 3; ++s) {
      ASSERT_OK(WriteSafetensors(base_ + "/" + ShardName(s), shards[s], StorageDtype::kF32));
    }
    std::filesystem::remove(base_ + "/model.safetensors");
    ASSERT_OK(WriteFileAtomically(base_ + "/" + kShardIndexFile,
                                  nlohmann::json({{"weight_map", map}}).dump()));
    // A real (tiny, SentencePiece-style) tokenizer: GGUF export reads it.
    ASSERT_OK(WriteFileAtomically(
        base_ + "/tokenizer.json",
        R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})"));
    // Metrics of this backbone (random tokens: only their shape matters here).
    ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(base_));
    ASSERT_OK_AND_ASSIGN(Decoder loaded, reader->Load());
    std::vector<int32_t> tokens(256);
    for (size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<int32_t>(t * 7 % 64);
    CalibrationOptions co;
    co.seq_len = 32;
    co.batch_size = 2;
    ASSERT_OK_AND_ASSIGN(ActivationMetrics m, Calibrate(loaded, tokens, co));
    ASSERT_OK_AND_ASSIGN(m.backbone_fingerprint, reader->Fingerprint());
    ASSERT_OK(SaveMetrics(m, MetricsFileName(base_)));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string ShardName(int s) {
    return "model-0000" + std::to_string(s + 1) + "-of-00003.safetensors";
  }
  // Opens of the backbone's config, index and shards in `counts`.
  void ExpectEachOpenedOnce(const std::map<std::string, int>& counts, const std::string& what) {
    std::vector<std::string> files = {kConfigFile, kShardIndexFile};
    for (int s = 0; s < 3; ++s) files.push_back(ShardName(s));
    for (const std::string& f : files) {
      const std::string path = base_ + "/" + f;
      EXPECT_EQ(counts.count(path) ? counts.at(path) : 0, 1) << what << " opened " << path;
    }
  }

  std::string dir_, base_;
};

TEST_F(FileOpensTest, PruneOfAShardedCheckpointOpensEachFileOnce) {
  TakeCounts();
  ASSERT_EQ(Hilnas({"prune", "--base", base_, "--out", dir_ + "/small", "--layers", "3", "--d-ffn",
                    "32", "--block-size", "8"}),
            0);
  ExpectEachOpenedOnce(TakeCounts(), "prune");
  ASSERT_OK_AND_ASSIGN(auto small, CheckpointReader::Open(dir_ + "/small"));
  EXPECT_EQ(small->arch().num_layers, 3);
  EXPECT_EQ(small->arch().d_ffn, 32);
  EXPECT_THAT(small->tokenizer_files(), ::testing::ElementsAre("tokenizer.json"));
}

TEST_F(FileOpensTest, GgufExportOfAShardedCheckpointOpensEachFileOnce) {
  TakeCounts();
  ASSERT_EQ(Hilnas({"export", "--format", "gguf", "--ckpt", base_, "--out", dir_ + "/m.gguf"}), 0);
  ExpectEachOpenedOnce(TakeCounts(), "export --format gguf");
  EXPECT_GT(std::filesystem::file_size(dir_ + "/m.gguf"), 0u);
}

TEST_F(FileOpensTest, CountingSeesASecondOpen) {
  // The counter itself: two opens of the config read as two.
  TakeCounts();
  ASSERT_OK(CheckpointReader::Open(base_).status());
  ASSERT_OK(CheckpointReader::Open(base_).status());
  EXPECT_EQ(TakeCounts()[base_ + "/" + kConfigFile], 2);
}

// Slim Attention Eq. 4 through the one prune path: the target names a slim
// cache, the candidate stores W_KV and keys only, and its tokenizer comes along.
TEST_F(FileOpensTest, ASlimTargetPrunesThroughTheCommandLine) {
  ASSERT_OK(WriteFileAtomically(dir_ + "/slim.textproto", R"pb(
    name: "slim-target"
    num_layers: 3
    d_model: 32
    d_ffn: 32
    num_heads: 4
    num_kv_heads: 4
    head_dim: 8
    vocab_size: 64
    rope_theta: 10000
    norm_eps: 1e-5
    attention: [ FULL, FULL, FULL ]
    kv_cache: SLIM)pb"));
  ASSERT_EQ(Hilnas({"prune", "--base", base_, "--arch", dir_ + "/slim.textproto", "--out",
                    dir_ + "/slim", "--block-size", "8"}),
            0);
  ASSERT_OK_AND_ASSIGN(auto slim, CheckpointReader::Open(dir_ + "/slim"));
  EXPECT_EQ(slim->arch().kv_cache, KvLayout::kSlim);
  EXPECT_EQ(slim->arch().num_layers, 3);
  EXPECT_THAT(slim->tokenizer_files(), ::testing::ElementsAre("tokenizer.json"));
  ASSERT_OK_AND_ASSIGN(auto tensors, slim->ReadTensors());
  EXPECT_EQ(tensors.count("model.layers.0.self_attn.kv_proj.weight"), 1u);
  EXPECT_EQ(tensors.count("model.layers.0.self_attn.v_proj.weight"), 0u);
  ASSERT_OK_AND_ASSIGN(Decoder d, slim->Load());
  KvCache cache = d.NewCache(1, 8);
  EXPECT_TRUE(cache.slim());
  // A slim target of a GQA backbone is refused by name (Slim Attention needs MHA).
  ASSERT_OK(WriteFileAtomically(dir_ + "/gqa.textproto", R"pb(
    name: "gqa-slim"
    num_layers: 3
    d_model: 32
    d_ffn: 32
    num_heads: 4
    num_kv_heads: 2
    head_dim: 8
    vocab_size: 64
    rope_theta: 10000
    norm_eps: 1e-5
    attention: [ FULL, FULL, FULL ]
    kv_cache: SLIM)pb"));
  EXPECT_EQ(Hilnas({"prune", "--base", base_, "--arch", dir_ + "/gqa.textproto", "--out",
                    dir_ + "/gqa", "--block-size", "8"}),
            1);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/gqa"));
}

}  // namespace
}  // namespace hilnas::tools
