#include "model/gguf.h"

#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/gguf_export.h"
#include "model/test_archs.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/gguf_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A random-weight checkpoint of `arch` in dir_/ckpt.
  std::string Checkpoint(const Arch& arch) {
    const std::string ckpt = dir_ + "/ckpt";
    absl::StatusOr<Decoder> d = Decoder::Create(arch, 7);
    EXPECT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(SaveCheckpoint(*d, ckpt, StorageDtype::kF32).ok());
    return ckpt;
  }

  torch::Tensor Tensor(const std::string& path, const GgufFile& f, const std::string& name) {
    const GgufTensorInfo* t = f.FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    if (t == nullptr) return {};
    absl::StatusOr<std::string> bytes = ReadGgufTensorData(path, f, *t);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    std::vector<int64_t> shape(t->dims.rbegin(), t->dims.rend());
    const auto dtype = t->type == GgmlType::kF32 ? torch::kFloat : torch::kHalf;
    return torch::from_blob(bytes->data(), shape, dtype).clone().to(torch::kFloat);
  }

  std::string dir_;
};

// Full attention everywhere, GQA, untied head, linear rope scaling: the
// llama layout.
Arch LlamaLike() {
  Arch a = TinyMixedArch();
  a.name = "tiny-llama";
  a.qk_norm = false;
  a.attention = {Attention::kFull, Attention::kFull, Attention::kFull};
  a.num_layers = 3;
  a.sliding_window = 0;
  a.rope_scaling.kind = RopeScaling::Kind::kLinear;
  a.rope_scaling.factor = 2;
  return a;
}

TEST_F(GgufTest, WriterAndReaderRoundTripEveryValueTypeAndAlignTensors) {
  GgufWriter w;
  GgufValue u8;
  u8.type = GgufType::kUint8;
  u8.u = 200;
  GgufValue i64;
  i64.type = GgufType::kInt64;
  i64.i = -5'000'000'000;
  GgufValue f64;
  f64.type = GgufType::kFloat64;
  f64.f = 0.125;
  w.Add("a.u8", u8);
  w.Add("a.i64", i64);
  w.Add("a.f64", f64);
  w.Add("a.u32", GgufValue::U32(7));
  w.Add("a.f32", GgufValue::F32(1.5f));
  w.Add("a.bool", GgufValue::Bool(true));
  w.Add("a.str", GgufValue::Str("héllo"));
  w.Add("a.strs", GgufValue::StrArray({"x", "", "zz"}));
  w.Add("a.ints", GgufValue::I32Array({-1, 2, 3}));
  const std::string three(3 * 4, '\x01'), five(5 * 2, '\x02');
  w.AddTensor("t.three", {3}, GgmlType::kF32,
              [&]() -> absl::StatusOr<std::string> { return three; });
  w.AddTensor("t.five", {5, 1}, GgmlType::kF16,
              [&]() -> absl::StatusOr<std::string> { return five; });
  const std::string path = dir_ + "/x.gguf";
  ASSERT_OK(w.Write(path));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ReadGguf(path));
  EXPECT_EQ(f.version, 3u);
  ASSERT_EQ(f.metadata.size(), 9u);
  EXPECT_EQ(*f.Find("a.u8"), u8);
  EXPECT_EQ(*f.Find("a.i64"), i64);
  EXPECT_EQ(*f.Find("a.f64"), f64);
  EXPECT_EQ(*f.Find("a.str"), GgufValue::Str("héllo"));
  EXPECT_EQ(*f.Find("a.strs"), GgufValue::StrArray({"x", "", "zz"}));
  EXPECT_EQ(*f.Find("a.ints"), GgufValue::I32Array({-1, 2, 3}));
  EXPECT_EQ(*f.Find("a.bool"), GgufValue::Bool(true));
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].offset, 0u);
  EXPECT_EQ(f.tensors[1].offset, 32u);  // 12 bytes, padded to the 32-byte alignment
  EXPECT_EQ(f.data_offset % 32, 0u);
  EXPECT_EQ(*ReadGgufTensorData(path, f, f.tensors[1]), five);
  // Nothing staged is left beside it.
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().string().find(path + ".tmp"), std::string::npos) << e.path();
  }
}

TEST_F(GgufTest, ReaderRefusesHostileAndTruncatedFiles) {
  GgufWriter w;
  w.Add("k", GgufValue::StrArray({"a", "b"}));
  w.AddTensor("t", {4, 4}, GgmlType::kF32,
              []() -> absl::StatusOr<std::string> { return std::string(64, '\0'); });
  const std::string good = dir_ + "/good.gguf";
  ASSERT_OK(w.Write(good));
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& name, const std::string& b) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << b;
    return dir_ + "/" + name;
  };
  EXPECT_THAT(ReadGguf(write("cut.gguf", bytes.substr(0, bytes.size() - 10))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
  EXPECT_THAT(ReadGguf(write("head.gguf", bytes.substr(0, 30))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("head.gguf")));
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_THAT(ReadGguf(write("magic.gguf", magic)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("is not GGUF's")));
  std::string count = bytes;  // metadata count 2^60
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(&count[16], &huge, 8);
  EXPECT_THAT(ReadGguf(write("count.gguf", count)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("metadata pairs")));
  std::string array = bytes;  // the array's length: after magic, version, counts, key, types
  const size_t len_at = 24 + 8 + 1 + 4 + 4;
  std::memcpy(&array[len_at], &huge, 8);
  EXPECT_THAT(ReadGguf(write("array.gguf", array)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("elements")));
  EXPECT_THAT(ReadGguf(dir_ + "/absent.gguf"), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(GgufTest, LlamaLayoutRoundTripsEveryKeyAndTensorWithPermutedQK) {
  const Arch arch = LlamaLike();
  const std::string ckpt = Checkpoint(arch);
  const std::string out = dir_ + "/m.gguf";
  ASSERT_OK(ExportGguf(ckpt, out));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ReadGguf(out));
  EXPECT_EQ(*f.Find("general.architecture"), GgufValue::Str("llama"));
  EXPECT_EQ(*f.Find("general.file_type"), GgufValue::U32(0));
  EXPECT_EQ(*f.Find("llama.block_count"), GgufValue::U32(3));
  EXPECT_EQ(*f.Find("llama.embedding_length"), GgufValue::U32(32));
  EXPECT_EQ(*f.Find("llama.feed_forward_length"), GgufValue::U32(64));
  EXPECT_EQ(*f.Find("llama.attention.head_count"), GgufValue::U32(4));
  EXPECT_EQ(*f.Find("llama.attention.head_count_kv"), GgufValue::U32(2));
  EXPECT_EQ(*f.Find("llama.attention.key_length"), GgufValue::U32(8));
  EXPECT_EQ(*f.Find("llama.rope.dimension_count"), GgufValue::U32(8));
  EXPECT_EQ(*f.Find("llama.rope.freq_base"), GgufValue::F32(10000));
  EXPECT_EQ(*f.Find("llama.attention.layer_norm_rms_epsilon"), GgufValue::F32(1e-5f));
  EXPECT_EQ(*f.Find("llama.rope.scaling.type"), GgufValue::Str("linear"));
  EXPECT_EQ(*f.Find("llama.rope.scaling.factor"), GgufValue::F32(2));
  EXPECT_EQ(*f.Find("llama.vocab_size"), GgufValue::U32(50));
  EXPECT_EQ(*f.Find("tokenizer.ggml.model"), GgufValue::Str("llama"));
  EXPECT_EQ(*f.Find("tokenizer.ggml.tokens"), GgufValue::StrArray(PlaceholderVocabulary(50)));
  EXPECT_EQ(f.Find("tokenizer.ggml.token_type")->array.size(), 50u);

  // llama.cpp's names and shapes (innermost first), and nothing else.
  std::vector<std::string> names;
  for (const GgufTensorInfo& t : f.tensors) names.push_back(t.name);
  std::vector<std::string> expected = {"token_embd.weight"};
  for (int i = 0; i < 3; ++i) {
    for (const char* n : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                          "ffn_gate", "ffn_up", "ffn_down"}) {
      expected.push_back(absl::StrCat("blk.", i, ".", n, ".weight"));
    }
  }
  expected.push_back("output_norm.weight");
  expected.push_back("output.weight");
  EXPECT_EQ(names, expected);
  EXPECT_EQ(f.FindTensor("token_embd.weight")->dims, (std::vector<uint64_t>{32, 50}));
  EXPECT_EQ(f.FindTensor("blk.0.attn_q.weight")->dims, (std::vector<uint64_t>{32, 32}));
  EXPECT_EQ(f.FindTensor("blk.0.attn_k.weight")->dims, (std::vector<uint64_t>{32, 16}));
  EXPECT_EQ(f.FindTensor("blk.0.ffn_down.weight")->dims, (std::vector<uint64_t>{64, 32}));
  EXPECT_EQ(f.FindTensor("blk.0.attn_norm.weight")->dims, (std::vector<uint64_t>{32}));

  // Every value: q and k rows of each head reordered (i, i + 4) -> (2i, 2i + 1).
  ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(ckpt));
  ASSERT_OK_AND_ASSIGN(auto w, reader->ReadTensors());
  for (int i = 0; i < 3; ++i) {
    const std::string hf = absl::StrCat("model.layers.", i, ".");
    const std::string gg = absl::StrCat("blk.", i, ".");
    torch::Tensor q = Tensor(out, f, gg + "attn_q.weight");
    torch::Tensor q_hf = w.at(hf + "self_attn.q_proj.weight");
    for (int h = 0; h < 4; ++h) {
      for (int r = 0; r < 4; ++r) {
        EXPECT_TRUE(q[h * 8 + 2 * r].equal(q_hf[h * 8 + r]));
        EXPECT_TRUE(q[h * 8 + 2 * r + 1].equal(q_hf[h * 8 + 4 + r]));
      }
    }
    torch::Tensor k = Tensor(out, f, gg + "attn_k.weight");
    torch::Tensor k_hf = w.at(hf + "self_attn.k_proj.weight");
    EXPECT_TRUE(k[8 + 1].equal(k_hf[8 + 4]));  // head 1, pair 0, second half
    EXPECT_TRUE(Tensor(out, f, gg + "attn_v.weight").equal(w.at(hf + "self_attn.v_proj.weight")));
    EXPECT_TRUE(Tensor(out, f, gg + "ffn_gate.weight").equal(w.at(hf + "mlp.gate_proj.weight")));
    EXPECT_TRUE(
        Tensor(out, f, gg + "ffn_norm.weight").equal(w.at(hf + "post_attention_layernorm.weight")));
  }
  EXPECT_TRUE(Tensor(out, f, "output.weight").equal(w.at("lm_head.weight")));
}

TEST_F(GgufTest, QkNormMapsToQwen3LayoutInF16WithoutPermutation) {
  Arch arch = LlamaLike();
  arch.qk_norm = true;
  arch.tie_embeddings = true;
  arch.rope_scaling = RopeScaling();
  const std::string ckpt = Checkpoint(arch);
  const std::string out = dir_ + "/q.gguf";
  GgufExportOptions o;
  o.dtype = GgmlType::kF16;
  ASSERT_OK(ExportGguf(ckpt, out, o));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ReadGguf(out));
  EXPECT_EQ(*f.Find("general.architecture"), GgufValue::Str("qwen3"));
  EXPECT_EQ(*f.Find("general.file_type"), GgufValue::U32(1));
  EXPECT_EQ(*f.Find("qwen3.attention.head_count_kv"), GgufValue::U32(2));
  EXPECT_EQ(f.Find("qwen3.rope.scaling.type"), nullptr);
  EXPECT_EQ(f.FindTensor("output.weight"), nullptr);  // tied: llama.cpp reuses token_embd
  EXPECT_EQ(f.FindTensor("blk.2.attn_q_norm.weight")->dims, (std::vector<uint64_t>{8}));
  EXPECT_EQ(f.FindTensor("blk.2.attn_q_norm.weight")->type, GgmlType::kF32);
  EXPECT_EQ(f.FindTensor("blk.2.attn_q.weight")->type, GgmlType::kF16);
  ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(ckpt));
  ASSERT_OK_AND_ASSIGN(auto w, reader->ReadTensors());
  EXPECT_TRUE(torch::allclose(Tensor(out, f, "blk.1.attn_q.weight"),
                              w.at("model.layers.1.self_attn.q_proj.weight"), 0, 1e-3));
  EXPECT_TRUE(Tensor(out, f, "blk.1.attn_k_norm.weight")
                  .equal(w.at("model.layers.1.self_attn.k_norm.weight")));
}

// Llama 4 text without NoPE layers or chunks (MobileLLM-R1): llama.cpp's
// dense llama4, q/k rows in its adjacent pairs, as the Llama 4 file holds them.
TEST_F(GgufTest, Llama4WritesLlamaCppsDenseLlama4WithTheFilesRowOrder) {
  Arch arch = TinyLlama4Arch();
  arch.no_rope.clear();
  arch.tie_embeddings = true;
  const std::string ckpt = Checkpoint(arch);
  const std::string out = dir_ + "/l4.gguf";
  ASSERT_OK(ExportGguf(ckpt, out));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ReadGguf(out));
  EXPECT_EQ(*f.Find("general.architecture"), GgufValue::Str("llama4"));
  EXPECT_EQ(*f.Find("llama4.interleave_moe_layer_step"), GgufValue::U32(0));
  EXPECT_EQ(*f.Find("llama4.attention.sliding_window"), GgufValue::U32(0));
  EXPECT_EQ(*f.Find("llama4.feed_forward_length"), GgufValue::U32(arch.d_ffn));
  EXPECT_EQ(f.FindTensor("blk.0.attn_q_norm.weight"), nullptr);  // the norm has no weight
  ASSERT_OK_AND_ASSIGN(auto file, ReadSafetensors(ckpt + "/model.safetensors"));
  EXPECT_TRUE(torch::allclose(Tensor(out, f, "blk.2.attn_k.weight"),
                              file.at("model.layers.2.self_attn.k_proj.weight"), 0, 1e-6));
  EXPECT_TRUE(torch::allclose(Tensor(out, f, "blk.2.ffn_up.weight"),
                              file.at("model.layers.2.feed_forward.up_proj.weight"), 0, 1e-6));
  arch.no_rope = {false, false, false, true};
  EXPECT_THAT(GgufLayoutFor(arch),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("llama4 with NoPE layers")));
  arch.no_rope.clear();
  arch.attention_chunk = 8192;
  EXPECT_THAT(GgufLayoutFor(arch), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("llama4 with attention_chunk 8192")));
}

TEST_F(GgufTest, Llama3ScalingBecomesRopeFreqFactors) {
  Arch arch = LlamaLike();
  arch.rope_scaling.kind = RopeScaling::Kind::kLlama3;
  arch.rope_scaling.factor = 8;
  arch.rope_scaling.original_max_position_embeddings = 8192;
  arch.rope_theta = 500000;  // wavelengths 6.3 (pair 0) to 118,000 tokens (pair 3)
  const std::string out = dir_ + "/r.gguf";
  ASSERT_OK(ExportGguf(Checkpoint(arch), out));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ReadGguf(out));
  torch::Tensor factors = Tensor(out, f, "rope_freqs.weight");
  ASSERT_EQ(factors.numel(), 4);
  // llama3: wavelengths under 8192 / 4 unscaled (factor 1), over 8192 divided by 8.
  EXPECT_FLOAT_EQ(factors[0].item<float>(), 1.0f);
  EXPECT_NEAR(factors[3].item<float>(), 8.0f, 1e-4);
  EXPECT_EQ(f.Find("llama.rope.scaling.type"), nullptr);
}

TEST_F(GgufTest, ExportFromAModelInMemoryEqualsExportFromItsCheckpoint) {
  const Arch arch = LlamaLike();
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(arch, 7));
  ASSERT_OK(ExportGguf(d, dir_ + "/memory.gguf"));
  ASSERT_OK(ExportGguf(Checkpoint(arch), dir_ + "/disk.gguf"));
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string memory = bytes(dir_ + "/memory.gguf");
  EXPECT_GT(memory.size(), 1000u);
  EXPECT_EQ(memory, bytes(dir_ + "/disk.gguf"));
}

// FNV-1a, 64 bits: a fingerprint of a tensor's bytes.
uint64_t Fnv1a(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Weights every machine computes alike: a smooth pattern per parameter,
// with a few blocks all zero and a few with one large value.
Decoder PatternedDecoder() {
  Arch a = TinyMixedArch();
  a.name = "pattern";
  a.attention.assign(a.num_layers, Attention::kFull);
  a.sliding_window = 0;
  Decoder d = Decoder::Create(a, 1).value();
  torch::NoGradGuard no_grad;
  int k = 0;
  for (torch::Tensor& p : d.module().parameters()) {
    const torch::Tensor i = torch::arange(p.numel(), torch::kDouble);
    torch::Tensor v = torch::sin(i * 0.37 + k) * 0.05 + torch::cos(i * 0.011 * (k + 1)) * 0.02;
    v.masked_fill_(i.remainder(997) < 32, 0.0);   // zero blocks
    v.masked_fill_(i.remainder(401) == 5, 0.75);  // outliers
    p.copy_(v.view(p.sizes()).to(torch::kFloat));
    ++k;
  }
  return d;
}

// hilnas's Q4_0 and Q8_0 tensors are llama-quantize's, byte for byte. The
// fingerprints are of the tensors `llama-quantize --pure F.gguf Q.gguf
// Q4_0|Q8_0` (llama.cpp 10e9780) wrote from this test's f32 export
// (bench/quant_exact.sh repeats the check on any model with llama.cpp at
// hand).
TEST_F(GgufTest, QuantizedTensorsAreLlamaQuantizesBytes) {
  const Decoder d = PatternedDecoder();
  ASSERT_OK(ExportGguf(d, dir_ + "/f32.gguf"));
  if (const char* keep = std::getenv("HILNAS_KEEP_PATTERN_GGUF")) {
    std::filesystem::copy_file(dir_ + "/f32.gguf", keep,
                               std::filesystem::copy_options::overwrite_existing);
  }
  const std::map<std::string, std::pair<uint64_t, uint64_t>> want = {
      // name: {q4_0, q8_0}
      {"token_embd.weight", {0xb82b5e681c979dceull, 0xe74c9a8ba362f86eull}},
      {"blk.0.attn_q.weight", {0xeeba774cf98f0f82ull, 0x863f5f0957c3f862ull}},
      {"blk.1.attn_k.weight", {0x0a400419d4af7a9dull, 0x18a66af508549321ull}},
      {"blk.2.attn_output.weight", {0xee0809a9272be083ull, 0xdd0255d077baebc7ull}},
      {"blk.3.ffn_down.weight", {0x6280f8549d1fd23cull, 0x48efc8a0c30b2937ull}},
      {"blk.3.ffn_gate.weight", {0xbd8376774ee550abull, 0x34b557b5bd6fab0bull}},
      {"output.weight", {0xccdc808989edc8dcull, 0x8e537a4eefed3565ull}}};
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0}) {
    GgufExportOptions o;
    o.dtype = type;
    const std::string path = absl::StrCat(dir_, "/", GgmlTypeName(type), ".gguf");
    ASSERT_OK(ExportGguf(d, path, o));
    ASSERT_OK_AND_ASSIGN(GgufFile f, ReadGguf(path));
    EXPECT_EQ(f.Find("general.file_type")->u, type == GgmlType::kQ4_0 ? 2u : 7u);
    EXPECT_EQ(f.Find("general.quantization_version")->u, 2u);
    for (const auto& [name, prints] : want) {
      const GgufTensorInfo* t = f.FindTensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->type, type) << name;
      ASSERT_OK_AND_ASSIGN(std::string bytes, ReadGgufTensorData(path, f, *t));
      EXPECT_EQ(Fnv1a(bytes), type == GgmlType::kQ4_0 ? prints.first : prints.second)
          << name << " as " << GgmlTypeName(type);
    }
    EXPECT_EQ(f.FindTensor("blk.0.attn_norm.weight")->type, GgmlType::kF32);
  }
}

TEST_F(GgufTest, QuantizedExportRefusesRowsOffTheBlock) {
  Arch a = LlamaLike();
  a.d_ffn = 72;  // ffn_down's rows: 72 values
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 1));
  GgufExportOptions o;
  o.dtype = GgmlType::kQ4_0;
  EXPECT_THAT(ExportGguf(d, dir_ + "/no.gguf", o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("blk.0.ffn_down.weight has rows of 72 values: q4_0 stores whole "
                                 "blocks of 32")));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/no.gguf"));
}

TEST_F(GgufTest, RefusesWhatLlamaCppCannotRunNamingTheLayerOrOption) {
  const std::string out = dir_ + "/no.gguf";
  EXPECT_THAT(ExportGguf(Checkpoint(TinyMixedArch()), out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layer 1 has swa attention")));
  EXPECT_FALSE(std::filesystem::exists(out));
  Arch a = LlamaLike();
  a.ppd.k = 2;
  a.ppd.layer = 1;
  EXPECT_THAT(GgufLayoutFor(a), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ppd k 2")));
  a = LlamaLike();
  a.qk_norm = true;
  a.rope_scaling.kind = RopeScaling::Kind::kLlama3;
  EXPECT_THAT(GgufLayoutFor(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("llama3: llama.cpp's qwen3 layout has no rope_freqs")));
  // Qwen2: biases need llama.cpp's n_embd-wide query.
  a = LlamaLike();
  a.qkv_bias = true;
  ASSERT_EQ(a.q_width(), a.d_model);
  EXPECT_EQ(GgufLayoutFor(a).value_or(""), "qwen2");
  a.d_model = a.q_width() + 32;
  EXPECT_THAT(GgufLayoutFor(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("llama.cpp's qwen2 layout needs the query")));
  // SmolLM3: llama.cpp's graph makes exactly every 4th layer NoPE.
  a = LlamaLike();
  a.num_layers = 4;
  a.attention.assign(4, Attention::kFull);
  a.no_rope = {false, false, false, true};
  EXPECT_EQ(GgufLayoutFor(a).value_or(""), "smollm3");
  a.no_rope = {false, false, true, false};
  EXPECT_THAT(GgufLayoutFor(a),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no_rope: layer 2 is NoPE")));
  a = LlamaLike();
  a.kv_cache = KvLayout::kSlim;
  EXPECT_THAT(GgufLayoutFor(a), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slim")));
  EXPECT_THAT(ExportGguf(dir_ + "/absent", out),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

}  // namespace
}  // namespace hilnas
