#include "model/checkpoint.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_archs.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/ckpt_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Read(const std::string& path) {
    std::string s;
    EXPECT_OK(ReadFileToString(path, &s));
    return s;
  }
  void Write(const std::string& path, const std::string& s) {
    ASSERT_OK(WriteFileAtomically(path, s));
  }
  // Returns the header JSON and the data buffer of a safetensors file.
  std::pair<nlohmann::json, std::string> Split(const std::string& path) {
    std::string s = Read(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(s[i]);
    return {nlohmann::json::parse(s.substr(8, n)), s.substr(8 + n)};
  }
  std::string Join(const nlohmann::json& header, const std::string& data) {
    std::string h = header.dump();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    return out + h + data;
  }

  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripIsBitExactInEveryStorageDtype) {
  const std::pair<StorageDtype, torch::Dtype> cases[] = {{StorageDtype::kF32, torch::kFloat},
                                                         {StorageDtype::kF16, torch::kHalf},
                                                         {StorageDtype::kBF16, torch::kBFloat16}};
  for (const auto& [storage, dtype] : cases) {
    ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5, dtype));
    ASSERT_OK(SaveCheckpoint(d, dir_, storage));
    ASSERT_OK_AND_ASSIGN(Decoder back, LoadCheckpoint(dir_, dtype));
    EXPECT_EQ(ArchToProto(back.arch()).SerializeAsString(),
              ArchToProto(d.arch()).SerializeAsString());
    auto a = d.NamedTensors(), b = back.NamedTensors();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
    }
  }
}

TEST_F(CheckpointTest, ConfigUsesHuggingFaceFieldNames) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  auto j = nlohmann::json::parse(Read(dir_ + "/config.json"));
  EXPECT_EQ(j["hidden_size"], 32);
  EXPECT_EQ(j["intermediate_size"], 64);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["layer_types"][1], "sliding_attention");
  EXPECT_EQ(j["layer_types"][2], "skip_attention");
}

TEST_F(CheckpointTest, RopeScalingAndQkNormWriteAsPublishedAndReadBack) {
  Arch a = TinyMixedArch();
  a.qk_norm = true;
  a.rope_scaling.kind = RopeScaling::Kind::kLlama3;
  a.rope_scaling.factor = 32;
  a.rope_scaling.low_freq_factor = 1;
  a.rope_scaling.high_freq_factor = 4;
  a.rope_scaling.original_max_position_embeddings = 8192;
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  auto j = nlohmann::json::parse(Read(dir_ + "/config.json"));
  EXPECT_EQ(j["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["factor"], 32.0);
  ASSERT_OK_AND_ASSIGN(Decoder back, LoadCheckpoint(dir_));
  EXPECT_TRUE(back.arch().rope_scaling == a.rope_scaling);
  EXPECT_TRUE(back.arch().qk_norm);
  // Older configs say `type`, and keep original_max_position_embeddings at the top.
  j["rope_scaling"] = {
      {"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
  j["original_max_position_embeddings"] = 4096;
  Write(dir_ + "/config.json", j.dump());
  ASSERT_OK_AND_ASSIGN(Arch older, ReadConfigJson(dir_ + "/config.json"));
  EXPECT_EQ(older.rope_scaling.original_max_position_embeddings, 4096);
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  Write(dir_ + "/config.json", j.dump());
  EXPECT_THAT(ReadConfigJson(dir_ + "/config.json").status().message(),
              HasSubstr("low_freq_factor"));
}

TEST_F(CheckpointTest, ShardedCheckpointsLoadAndBadIndexesAreNamed) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  // Split model.safetensors into two shards and an index, as published.
  ASSERT_OK_AND_ASSIGN(auto all, ReadSafetensors(dir_ + "/model.safetensors"));
  std::vector<std::pair<std::string, torch::Tensor>> one, two;
  nlohmann::json map;
  int i = 0;
  for (const auto& [name, t] : all) {
    const bool first = i++ % 2 == 0;
    (first ? one : two).emplace_back(name, t);
    map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  ASSERT_OK(WriteSafetensors(dir_ + "/model-00001-of-00002.safetensors", one, StorageDtype::kBF16));
  ASSERT_OK(WriteSafetensors(dir_ + "/model-00002-of-00002.safetensors", two, StorageDtype::kF32));
  std::filesystem::remove(dir_ + "/model.safetensors");
  const std::string index = dir_ + "/" + kShardIndexFile;
  Write(index, nlohmann::json({{"metadata", {}}, {"weight_map", map}}).dump());
  ASSERT_OK_AND_ASSIGN(Decoder back, LoadCheckpoint(dir_));
  EXPECT_EQ(back.NamedTensors().size(), d.NamedTensors().size());
  EXPECT_OK(CheckFiniteWeights(dir_));

  nlohmann::json bad = map;
  bad[all.begin()->first] = "../elsewhere.safetensors";
  Write(index, nlohmann::json({{"weight_map", bad}}).dump());
  EXPECT_THAT(LoadCheckpoint(dir_).status().message(),
              HasSubstr("not a file name beside the index"));
  bad = map;
  bad["model.layers.99.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors";
  Write(index, nlohmann::json({{"weight_map", bad}}).dump());
  EXPECT_THAT(LoadCheckpoint(dir_).status().message(),
              HasSubstr("missing tensor model.layers.99.mlp.up_proj.weight"));
  bad = map;
  bad.erase(all.begin()->first);
  Write(index, nlohmann::json({{"weight_map", bad}}).dump());
  EXPECT_THAT(LoadCheckpoint(dir_).status().message(), HasSubstr("is not in the index"));
}

TEST_F(CheckpointTest, MobileLlmSharesEmbeddingsAndUnsupportedFieldsAreNamed) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  auto j = nlohmann::json::parse(Read(dir_ + "/config.json"));
  j["architectures"] = {"MobileLLMForCausalLM"};
  j["model_type"] = "mobilellm";
  j["tie_word_embeddings"] = false;
  j["share_embedding"] = true;
  Write(dir_ + "/config.json", j.dump());
  ASSERT_OK_AND_ASSIGN(Arch a, ReadConfigJson(dir_ + "/config.json"));
  EXPECT_TRUE(a.tie_embeddings);
  j["layer_sharing"] = true;
  Write(dir_ + "/config.json", j.dump());
  EXPECT_THAT(ReadConfigJson(dir_ + "/config.json").status().message(), HasSubstr("layer_sharing"));
  j.erase("layer_sharing");
  j["mlp_bias"] = true;
  Write(dir_ + "/config.json", j.dump());
  EXPECT_THAT(ReadConfigJson(dir_ + "/config.json").status().message(), HasSubstr("mlp_bias"));
}

TEST_F(CheckpointTest, TruncatedFileIsDataLoss) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  const std::string path = dir_ + "/model.safetensors";
  const std::string full = Read(path);
  Write(path, full.substr(0, full.size() - 100));
  EXPECT_THAT(LoadCheckpoint(dir_), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
  Write(path, full.substr(0, 5));
  EXPECT_THAT(ReadSafetensors(path),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("shorter than the 8-byte header")));
  Write(path, full.substr(0, 40));
  EXPECT_THAT(ReadSafetensors(path),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("exceeds the file's remaining")));
}

TEST_F(CheckpointTest, HeaderThatLiesAboutSizesIsDataLoss) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  const std::string path = dir_ + "/model.safetensors";
  auto [header, data] = Split(path);
  header["model.norm.weight"]["shape"] = {33};  // 33 floats in a 32-float span
  Write(path, Join(header, data));
  EXPECT_THAT(ReadSafetensors(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("tensor model.norm.weight: data_offsets span 128 bytes but F32 "
                                 "[33] needs 132")));
}

TEST_F(CheckpointTest, OverlappingTensorsAreDataLoss) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  const std::string path = dir_ + "/model.safetensors";
  auto [header, data] = Split(path);
  header["model.norm.weight"]["data_offsets"] = {0, 128};
  Write(path, Join(header, data));
  EXPECT_THAT(ReadSafetensors(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("overlap")));
}

TEST_F(CheckpointTest, GarbageHeaderIsDataLoss) {
  std::filesystem::create_directories(dir_);
  const std::string path = dir_ + "/model.safetensors";
  std::string s(8, '\0');
  s[0] = 4;
  Write(path, s + "{{{x");
  EXPECT_THAT(ReadSafetensors(path),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("header is not valid JSON")));
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  auto named = d.NamedTensors();
  named.erase(named.begin() + 3);  // model.layers.0.self_attn.k_proj.weight
  ASSERT_OK(WriteSafetensors(dir_ + "/model.safetensors", named, StorageDtype::kF32));
  EXPECT_THAT(LoadCheckpoint(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("missing tensor model.layers.0.self_attn.k_proj.weight")));
}

TEST_F(CheckpointTest, ShapeThatDisagreesWithConfigIsNamed) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  auto j = nlohmann::json::parse(Read(dir_ + "/config.json"));
  j["intermediate_size"] = 128;
  Write(dir_ + "/config.json", j.dump());
  EXPECT_THAT(LoadCheckpoint(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor model.layers.0.mlp.gate_proj.weight has shape [64, 32], "
                                 "config.json implies [128, 32]")));
}

TEST_F(CheckpointTest, ExtraTensorIsNamed) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  auto named = d.NamedTensors();
  named.push_back({"model.layers.9.mlp.up_proj.weight", torch::zeros({2, 2})});
  ASSERT_OK(WriteSafetensors(dir_ + "/model.safetensors", named, StorageDtype::kF32));
  EXPECT_THAT(LoadCheckpoint(dir_), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("unexpected tensor model.layers.9")));
}

// Tied, with an embedding of 70000 x 64 (17.9 MB in f32): read in two
// blocks of rows (CheckpointReader::Load reads 16 MiB at a time).
Arch TiedTwoBlockArch() {
  Arch a = TinyMixedArch();
  a.tie_embeddings = true;
  a.vocab_size = 70000;
  a.d_model = 64;
  return a;
}

TEST_F(CheckpointTest, ALoadAtAWeightDtypeStoresEachMatrixAsStoreWeightsAsWould) {
  Arch a = TiedTwoBlockArch();
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kBF16));  // as published checkpoints are
  for (const char* type : {"q4_0", "q8_0", "f16"}) {
    ASSERT_OK_AND_ASSIGN(Decoder after, LoadCheckpoint(dir_));
    ASSERT_OK(after.StoreWeightsAs(type));
    ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(dir_));
    ASSERT_OK_AND_ASSIGN(Decoder as_read, reader->Load(torch::kFloat, type));
    auto x = after.NamedTensors(), y = as_read.NamedTensors();
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].second.scalar_type(), y[i].second.scalar_type()) << type << " " << x[i].first;
      EXPECT_TRUE(torch::equal(x[i].second, y[i].second)) << type << " " << x[i].first;
    }
  }
  // Rows that are not whole blocks are refused by name before a tensor is read.
  a.d_ffn = 48;
  ASSERT_OK_AND_ASSIGN(Decoder odd, Decoder::Create(a, 5));
  ASSERT_OK(SaveCheckpoint(odd, dir_, StorageDtype::kF32));
  ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(dir_));
  EXPECT_THAT(reader->Load(torch::kFloat, "q4_0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("down_proj.weight has rows of 48 values")));
}

TEST_F(CheckpointTest, AStoredTiedHeadLoadsOnlyWhenItIsTheEmbedding) {
  const Arch a = TiedTwoBlockArch();
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  auto named = d.NamedTensors();
  torch::Tensor embedding;
  for (const auto& [name, t] : named) {
    if (name == "model.embed_tokens.weight") embedding = t;
  }
  ASSERT_TRUE(embedding.defined());
  named.push_back({"lm_head.weight", embedding.clone()});
  ASSERT_OK(WriteSafetensors(dir_ + "/model.safetensors", named, StorageDtype::kF32));
  for (const char* type : {"f32", "q4_0"}) {
    ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(dir_));
    EXPECT_OK(reader->Load(torch::kFloat, type).status()) << type;
  }
  named.back().second = embedding.clone();
  named.back().second[69000][3] += 1e-3;  // in the second block
  ASSERT_OK(WriteSafetensors(dir_ + "/model.safetensors", named, StorageDtype::kF32));
  for (const char* type : {"f32", "q4_0"}) {
    ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(dir_));
    EXPECT_THAT(reader->Load(torch::kFloat, type),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("lm_head.weight differs from model.embed_tokens.weight")))
        << type;
  }
}

TEST_F(CheckpointTest, MalformedConfigNamesTheField) {
  std::filesystem::create_directories(dir_);
  const std::string path = dir_ + "/config.json";
  Write(path, R"({"model_type": "llama", "hidden_size": "wide", "intermediate_size": 64})");
  EXPECT_THAT(ReadConfigJson(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("field \"hidden_size\" has the wrong type")));
  Write(path, R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                  "vocab_size": 10, "layer_types": ["full_attention", "linear_attention"]})");
  EXPECT_THAT(ReadConfigJson(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("missing field \"num_hidden_layers\"")));
  Write(path, R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                  "num_hidden_layers": 2, "vocab_size": 10,
                  "layer_types": ["full_attention", "linear_attention"]})");
  EXPECT_THAT(ReadConfigJson(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("layer_types[1] \"linear_attention\"")));
  Write(path, R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                  "num_key_value_heads": 3, "num_hidden_layers": 2, "vocab_size": 10})");
  EXPECT_THAT(ReadConfigJson(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("num_kv_heads 3 does not divide")));
  Write(path, "not json");
  EXPECT_THAT(ReadConfigJson(path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
}

TEST_F(CheckpointTest, IntegersThatDoNotFitAreRefusedNotWrapped) {
  std::filesystem::create_directories(dir_);
  const std::string path = dir_ + "/config.json";
  const std::string rest = R"("model_type": "llama", "intermediate_size": 64, "num_attention_heads": 4,
                              "num_hidden_layers": 2, "hidden_size": 32)";
  // 4294967552 = 2^32 + 256 would wrap to 256; 2^40 to 0.
  for (const char* vocab : {"4294967552", "1099511627776", "-4294967040"}) {
    Write(path, absl::StrCat("{", rest, R"(, "vocab_size": )", vocab, "}"));
    EXPECT_THAT(ReadConfigJson(path),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("\"vocab_size\" "), HasSubstr("out of range"))))
        << vocab;
  }
  Write(path, absl::StrCat("{", rest, R"(, "vocab_size": 256, "rope_theta": 1e999})"));
  // JSON itself cannot hold it: an error naming the number, not an exception.
  EXPECT_THAT(ReadConfigJson(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("number overflow parsing '1e999'")));
}

TEST_F(CheckpointTest, ImpossibleSizesAreRefusedBeforeAnythingIsAllocated) {
  std::filesystem::create_directories(dir_);
  const std::string path = dir_ + "/config.json";
  Write(path, R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                  "num_hidden_layers": 100000, "vocab_size": 256})");
  EXPECT_THAT(ReadConfigJson(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_layers 100000 exceeds the largest accepted, 1024")));
}

TEST_F(CheckpointTest, AFolderOrFifoWhereAFileBelongsIsAnErrorNotACrash) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 5));
  ASSERT_OK(SaveCheckpoint(d, dir_, StorageDtype::kF32));
  std::filesystem::remove(dir_ + "/model.safetensors");
  std::filesystem::create_directory(dir_ + "/model.safetensors");
  EXPECT_THAT(LoadCheckpoint(dir_), StatusIs(absl::StatusCode::kFailedPrecondition,
                                             HasSubstr("model.safetensors is a directory")));
  std::filesystem::remove(dir_ + "/model.safetensors");
  ASSERT_EQ(mkfifo((dir_ + "/model.safetensors").c_str(), 0600), 0);
  // Opening a FIFO for reading would block until a writer comes: never.
  EXPECT_THAT(LoadCheckpoint(dir_), StatusIs(absl::StatusCode::kFailedPrecondition,
                                             HasSubstr("model.safetensors is a FIFO")));
  std::filesystem::remove(dir_ + "/config.json");
  ASSERT_EQ(mkfifo((dir_ + "/config.json").c_str(), 0600), 0);
  EXPECT_THAT(ReadConfigJson(dir_ + "/config.json"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("config.json is a FIFO")));
}

TEST_F(CheckpointTest, MissingFolderIsNotFound) {
  EXPECT_THAT(LoadCheckpoint(dir_ + "/nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("config.json")));
}

}  // namespace
}  // namespace hilnas
