#include "model/decoder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/checkpoint_reader.h"
#include "model/generate.h"
#include "model/quant.h"
#include "model/safetensors.h"
#include "model/test_archs.h"
#include "model/work_split.h"
#include "search_space/counts.h"
#include "util/mapping_pages.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

torch::Tensor Tokens(int64_t n, int64_t vocab, int64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randint(vocab, {1, n}, gen, torch::kLong);
}

// Float64 so that differences between code paths are rounding-level only.
Decoder MakeDouble(const Arch& a, uint64_t seed = 1) {
  auto d = Decoder::Create(a, seed, torch::kDouble);
  EXPECT_TRUE(d.ok()) << d.status();
  return *std::move(d);
}

TEST(DecoderTest, Llama3RopeScalingStretchesOnlyTheLowFrequencies) {
  Arch a = TinyMixedArch();
  a.head_dim = 64;
  a.rope_theta = 500000;
  const torch::Tensor plain = RopeInverseFrequencies(a);
  a.rope_scaling.kind = RopeScaling::Kind::kLlama3;
  a.rope_scaling.factor = 8;
  a.rope_scaling.low_freq_factor = 1;
  a.rope_scaling.high_freq_factor = 4;
  a.rope_scaling.original_max_position_embeddings = 8192;
  const torch::Tensor scaled = RopeInverseFrequencies(a);
  ASSERT_EQ(scaled.size(0), 32);
  int kept = 0, stretched = 0, blended = 0;
  for (int i = 0; i < 32; ++i) {
    const double f = plain[i].item<double>(), g = scaled[i].item<double>();
    const double wavelen = 2 * M_PI / f;
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(g, f) << i;
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_NEAR(g, f / 8, 1e-15) << i;
      ++stretched;
    } else {
      EXPECT_GT(g, f / 8) << i;
      EXPECT_LT(g, f) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(stretched, 0);
  EXPECT_GT(blended, 0);
  a.rope_scaling.kind = RopeScaling::Kind::kLinear;
  EXPECT_TRUE(torch::allclose(RopeInverseFrequencies(a), plain / 8));
}

// Tensors (address, bytes) back to back in one buffer: each starts at
// most 64 bytes after the one before ends, the first on a 2 MiB boundary.
void ExpectBackToBackFromAHugePage(const std::vector<std::pair<uintptr_t, size_t>>& spans,
                                   const std::string& what) {
  ASSERT_FALSE(spans.empty()) << what;
  ASSERT_GE(spans.back().first + spans.back().second - spans[0].first, size_t{2} << 20)
      << what << ": under one huge page, tensors stay in libtorch's buffers";
  EXPECT_EQ(spans[0].first % (uintptr_t{2} << 20), 0u) << what;
  for (size_t i = 1; i < spans.size(); ++i) {
    const uintptr_t end = spans[i - 1].first + spans[i - 1].second;
    EXPECT_GE(spans[i].first, end) << what << ": tensors " << i - 1 << " and " << i << " overlap";
    EXPECT_LT(spans[i].first, end + 64) << what << ": tensor " << i << " is not in the buffer";
  }
}

// Every parameter in one buffer (PackParameters), in address order; a tied
// head counts once.
void ExpectOneHugePageBuffer(const Decoder& d, const std::string& what) {
  std::vector<std::pair<uintptr_t, size_t>> spans;
  for (const torch::Tensor& t : d.Parameters()) {
    spans.push_back({reinterpret_cast<uintptr_t>(t.data_ptr()), t.nbytes()});
  }
  std::sort(spans.begin(), spans.end());
  spans.erase(std::unique(spans.begin(), spans.end()), spans.end());
  ExpectBackToBackFromAHugePage(spans, what);
}

// Where the kernel has transparent huge pages, the weights' buffer lies on
// them (advised, faulted in at once and collapsed: HugePageBuffer), not
// only where the first touch happened to find free 2 MiB blocks.
TEST(DecoderTest, WeightsLieOnHugePagesWhereTheKernelHasThem) {
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(mode_file, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "no transparent huge pages here (\"" << mode << "\")";
  }
  Arch a = TinyMixedArch();
  a.vocab_size = 16384;  // embedding 16384 x 256: 16 MiB in f32
  a.d_model = 256;
  a.head_dim = 16;
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 3));
  const MappingPages pages = PagesOfMapping(d.Parameters().front().data_ptr());
  EXPECT_GE(pages.rss_bytes, int64_t{16} << 20);
  EXPECT_GT(pages.huge_bytes, 0) << "THP mode " << mode;
}

// A decode step streams every weight once, so all of them, small matrices
// and norms too, share one buffer advised as huge pages, whichever way the
// decoder was made: drawn (f32 or stored as drawn), stored afterwards,
// loaded (f32 or stored as read). Values survive every move.
TEST(DecoderTest, ParametersShareOneHugePageBuffer) {
  Arch a = TinyMixedArch();
  a.vocab_size = 16384;  // embedding 16384 x 256: 16 MiB in f32, 2.25 MiB as Q4_0
  a.d_model = 256;
  a.head_dim = 16;
  for (bool tied : {false, true}) {
    a.tie_embeddings = tied;
    const std::string form = tied ? "tied" : "untied";
    ASSERT_OK_AND_ASSIGN(Decoder drawn, Decoder::Create(a, 3));
    ExpectOneHugePageBuffer(drawn, form + " f32");
    std::map<std::string, torch::Tensor> before;
    for (const auto& [name, t] : drawn.NamedTensors()) {
      if (t.dim() == 2) {
        EXPECT_GT(t.abs().sum().item<double>(), 0) << name << " lost its values";
      }
      before[name] = t.clone();
    }
    ASSERT_OK(drawn.StoreWeightsAs("f16"));
    ExpectOneHugePageBuffer(drawn, form + " stored as f16");
    for (const auto& [name, t] : drawn.NamedTensors()) {
      EXPECT_TRUE(torch::equal(t, before.at(name).to(t.scalar_type()))) << name;
    }
    ASSERT_OK_AND_ASSIGN(Decoder q4, Decoder::Create(a, 3, torch::kFloat, "q4_0"));
    ExpectOneHugePageBuffer(q4, form + " drawn as q4_0");

    const std::string dir =
        (std::filesystem::temp_directory_path() / ("hilnas_pack_" + form)).string();
    std::filesystem::remove_all(dir);
    ASSERT_OK_AND_ASSIGN(Decoder saved, Decoder::Create(a, 3));
    ASSERT_OK(SaveCheckpoint(saved, dir, StorageDtype::kF32));
    for (const char* type : {"f32", "q8_0"}) {
      ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(dir));
      ASSERT_OK_AND_ASSIGN(Decoder loaded, reader->Load(torch::kFloat, type));
      ExpectOneHugePageBuffer(loaded, form + " loaded as " + type);
    }
    // Made for f32 and set as f16: still right, the matrix in a buffer of
    // its own. Made for q8_0, no other storage is taken.
    ASSERT_OK_AND_ASSIGN(Decoder as_q8, Decoder::CreateForLoading(a, torch::kFloat, "q8_0"));
    EXPECT_THAT(as_q8.SetterFor("f16").status(),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already stored")));
    ASSERT_OK_AND_ASSIGN(Decoder made, Decoder::CreateForLoading(a, torch::kFloat));
    ASSERT_OK_AND_ASSIGN(const Decoder::ParameterSetter set, made.SetterFor("f16"));
    torch::Tensor embedding;
    for (const auto& [name, t] : made.NamedTensors()) {
      if (name == "model.embed_tokens.weight") embedding = t;
    }
    ASSERT_TRUE(embedding.defined());
    EXPECT_EQ(embedding.scalar_type(), torch::kFloat);
    const torch::Tensor rows = before.at("model.embed_tokens.weight").to(torch::kBFloat16);
    {
      torch::NoGradGuard no_grad;  // as the loader sets parameters
      set(embedding, rows, 0);
    }
    EXPECT_EQ(embedding.scalar_type(), torch::kHalf);
    EXPECT_TRUE(torch::equal(embedding, rows.to(torch::kHalf)));
    std::filesystem::remove_all(dir);
  }
}

// A cache of 2 MiB and more is one zeroed buffer of huge pages, layers in
// order (HugePageZeros); a smaller one is libtorch's zeros. Either way every
// attention layer has its storage and it starts zero.
TEST(DecoderTest, CachesOfAHugePageAndMoreShareOneBuffer) {
  const Arch a = TinyMixedArch();  // 2 KV heads x 8: 64 B a token a tensor (f32)
  for (int64_t capacity : {int64_t{64}, int64_t{8192}}) {
    KvCache cache(a, 1, capacity, torch::kFloat);
    std::vector<std::pair<uintptr_t, size_t>> spans;
    for (int l = 0; l < a.num_layers; ++l) {
      ASSERT_EQ(cache.keys(l).defined(), a.attention[l] != Attention::kSkip) << l;
      if (!cache.keys(l).defined()) continue;
      for (const torch::Tensor* t : {&cache.keys(l), &cache.values(l)}) {
        EXPECT_EQ(t->abs().sum().item<double>(), 0) << "layer " << l << " does not start zero";
        spans.push_back({reinterpret_cast<uintptr_t>(t->data_ptr()), t->nbytes()});
      }
    }
    // Layer order: keys, values, next layer.
    if (cache.bytes() >= (int64_t{2} << 20)) ExpectBackToBackFromAHugePage(spans, "cache");
  }
}

TEST(DecoderTest, ParameterCountEqualsStaticCount) {
  for (bool tied : {true, false}) {
    for (int family : {0, 1, 2}) {  // Qwen3-like, Qwen2 (biases), Gemma 3 (four norms a layer)
      const bool bias = family == 1;
      Arch a = TinyMixedArch();
      a.tie_embeddings = tied;
      a.qkv_bias = bias;
      a.qk_norm = !bias;  // no family has both
      a.gemma = family == 2;
      Decoder d = MakeDouble(a);
      int64_t n = 0;
      for (const auto& p : d.Parameters()) n += p.numel();
      EXPECT_EQ(n, CountParameters(a).model()) << "tied=" << tied << " bias=" << bias;
    }
  }
}

// Qwen2's biases and SmolLM3's NoPE layers change what a layer computes:
// the same weights without them give other logits; and the biases are
// drawn, named after their projections, in the checkpoint order.
TEST(DecoderTest, BiasesAndNoPeLayersChangeTheOutput) {
  Arch base = TinyMixedArch();
  base.qk_norm = false;
  auto tokens = Tokens(9, 50, 5);
  torch::NoGradGuard no_grad;
  Decoder plain = MakeDouble(base);
  const torch::Tensor reference = plain.Forward(tokens);
  Arch biased = base;
  biased.qkv_bias = true;
  Decoder qwen2 = MakeDouble(biased);
  std::vector<std::string> names;
  for (auto& [name, t] : qwen2.NamedTensors()) {
    if (name.find(".bias") != std::string::npos) {
      names.push_back(name);
      EXPECT_GT(t.abs().max().item<double>(), 0) << name << " was not drawn";
    }
  }
  EXPECT_EQ(names.front(), "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(names.size(), 3u * base.num_attention_layers());
  const torch::Tensor with_bias = qwen2.Forward(tokens);
  for (auto& [name, t] : qwen2.NamedTensors()) {
    if (name.find(".bias") != std::string::npos) t.zero_();
  }
  EXPECT_GT((with_bias - qwen2.Forward(tokens)).abs().max().item<double>(), 1e-6);
  Arch nope = base;
  nope.no_rope = {true, false, false, false};
  Decoder smollm3 = MakeDouble(nope);
  EXPECT_GT((smollm3.Forward(tokens) - reference).abs().max().item<double>(), 1e-6);
  nope.no_rope = {false, false, true, false};  // layer 2 skips attention: nothing to rotate
  EXPECT_LT((MakeDouble(nope).Forward(tokens) - reference).abs().max().item<double>(), 1e-12);
}

// Gemma 3: its window layers' RoPE base is theirs alone, and the layout
// (sandwich norms, GeGLU, scaled embedding) round-trips through a
// checkpoint, whose norm tensors hold w where the model holds 1 + w.
TEST(DecoderTest, GemmaLayoutRoundTripsAndRotatesWindowLayersWithTheLocalBase) {
  Arch a = TinyMixedArch();
  a.gemma = true;
  a.local_rope_theta = 10000;  // = rope_theta: the same model as without it
  auto tokens = Tokens(9, 50, 5);
  torch::NoGradGuard no_grad;
  const torch::Tensor same_base = MakeDouble(a).Forward(tokens);
  Arch no_local = a;
  no_local.local_rope_theta = 0;
  EXPECT_LT((MakeDouble(no_local).Forward(tokens) - same_base).abs().max().item<double>(), 1e-12);
  a.local_rope_theta = 50;
  Decoder d = MakeDouble(a);
  EXPECT_GT((d.Forward(tokens) - same_base).abs().max().item<double>(), 1e-6);
  // The norms move off 1 so that the (1 + w) bookkeeping is exercised.
  for (auto& [name, t] : d.NamedTensors()) {
    if (HeldAsOnePlus(a, name)) t.add_(0.1 * torch::randn(t.sizes(), t.options()));
  }
  const std::string dir = ::testing::TempDir() + "/gemma_roundtrip";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(SaveCheckpoint(d, dir, StorageDtype::kF32).ok());
  auto stored = ReadSafetensors(dir + "/model.safetensors");
  ASSERT_TRUE(stored.ok()) << stored.status();
  for (auto& [name, t] : d.NamedTensors()) {
    if (!HeldAsOnePlus(a, name)) continue;
    EXPECT_LT((stored->at(name).to(torch::kDouble) - (t - 1)).abs().max().item<double>(), 1e-6)
        << name << " is stored as w";
  }
  auto back = LoadCheckpoint(dir, torch::kDouble);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->arch().gemma);
  EXPECT_LT((back->Forward(tokens) - d.Forward(tokens)).abs().max().item<double>(), 1e-5);
  std::filesystem::remove_all(dir);
}

// Llama 4: the QK-norm of RoPE layers matters; the file holds the MLP as
// feed_forward and q/k rows in interleaved pairs, and reads back to the
// same model; chunked layers attend within their chunk of attention_chunk
// positions, past the first chunk too.
TEST(DecoderTest, Llama4FileFormRoundTripsAndChunksStartAfresh) {
  Arch a = TinyLlama4Arch();
  auto tokens = Tokens(9, 50, 5);
  torch::NoGradGuard no_grad;
  Decoder d = MakeDouble(a);
  Arch unnormed = a;
  unnormed.qk_l2_norm = false;
  EXPECT_GT((MakeDouble(unnormed).Forward(tokens) - d.Forward(tokens)).abs().max().item<double>(),
            1e-3);
  const std::string dir = ::testing::TempDir() + "/llama4_roundtrip";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(SaveCheckpoint(d, dir, StorageDtype::kF32).ok());
  auto stored = ReadSafetensors(dir + "/model.safetensors");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->count("model.layers.0.feed_forward.gate_proj.weight"));
  EXPECT_FALSE(stored->count("model.layers.0.mlp.gate_proj.weight"));
  std::map<std::string, torch::Tensor> params;
  for (auto& [name, t] : d.NamedTensors()) params.emplace(name, t);
  const torch::Tensor q = params.at("model.layers.1.self_attn.q_proj.weight");
  const torch::Tensor file_q =
      stored->at("model.layers.1.self_attn.q_proj.weight").to(torch::kDouble);
  // Row 2i of a head in the file is the decoder's row i, row 2i+1 its i + d/2.
  for (int64_t i = 0; i < a.head_dim / 2; ++i) {
    EXPECT_TRUE(torch::allclose(file_q[8 + 2 * i], q[8 + i], 1e-6, 1e-6)) << i;
    EXPECT_TRUE(torch::allclose(file_q[8 + 2 * i + 1], q[8 + a.head_dim / 2 + i], 1e-6, 1e-6));
  }
  EXPECT_TRUE(torch::equal(HalfSplitRopeRows(InterleaveRopeRows(q, 8), 8), q));
  auto back = LoadCheckpoint(dir, torch::kDouble);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->arch().llama4);
  EXPECT_LT((back->Forward(tokens) - d.Forward(tokens)).abs().max().item<double>(), 1e-5);
  std::filesystem::remove_all(dir);

  Arch chunked = a;
  chunked.attention_chunk = 8;
  Decoder c = MakeDouble(chunked);
  EXPECT_LT((c.Forward(Tokens(8, 50, 5)) - d.Forward(Tokens(8, 50, 5))).abs().max().item<double>(),
            1e-12);  // within the chunk: causal attention
  const torch::Tensor long_tokens = Tokens(19, 50, 6);
  const torch::Tensor whole = c.Forward(long_tokens);
  // Past it the chunk matters (the NoPE layer still sees every token).
  EXPECT_GT((whole - d.Forward(long_tokens)).abs().narrow(1, 8, 11).max().item<double>(), 1e-3);
  // A prompt fed in pieces that straddle chunk boundaries, through the
  // cache, computes what one forward does.
  KvCache cache = c.NewCache(1, 19);
  std::vector<torch::Tensor> parts;
  for (int64_t p = 0; p < 19; p += 5) {
    parts.push_back(c.ForwardCached(long_tokens.narrow(1, p, std::min<int64_t>(5, 19 - p)), cache,
                                    /*last_only=*/false));
  }
  EXPECT_LT((torch::cat(parts, 1) - whole).abs().max().item<double>(), 1e-12);
  // With every layer chunked, a chunk starts afresh: RoPE is relative, so
  // positions 8..15 give what the same tokens give at 0..7 on their own.
  Arch all_chunked = chunked;
  all_chunked.no_rope.clear();
  Decoder e = MakeDouble(all_chunked);
  const torch::Tensor second = e.Forward(long_tokens).narrow(1, 8, 8);
  EXPECT_LT((second - e.Forward(long_tokens.narrow(1, 8, 8))).abs().max().item<double>(), 1e-9);

  // Temperature tuning: the NoPE layer's queries at position p times
  // log(floor((p + 1) / 4) + 1) * 0.5 + 1, so positions 0..2 are as
  // before and later ones are not; a prompt in pieces through the cache
  // still computes one forward; the checkpoint carries it.
  Arch tuned = chunked;
  tuned.temperature_floor_scale = 4;
  tuned.temperature_attn_scale = 0.5;
  Decoder t = MakeDouble(tuned);
  const torch::Tensor tuned_whole = t.Forward(long_tokens);
  EXPECT_LT((tuned_whole - whole).abs().narrow(1, 0, 3).max().item<double>(), 1e-12);
  EXPECT_GT((tuned_whole - whole).abs().narrow(1, 3, 16).max().item<double>(), 1e-4);
  KvCache tuned_cache = t.NewCache(1, 19);
  parts.clear();
  for (int64_t p = 0; p < 19; p += 5) {
    parts.push_back(t.ForwardCached(long_tokens.narrow(1, p, std::min<int64_t>(5, 19 - p)),
                                    tuned_cache, /*last_only=*/false));
  }
  EXPECT_LT((torch::cat(parts, 1) - tuned_whole).abs().max().item<double>(), 1e-12);
  ASSERT_TRUE(SaveCheckpoint(t, dir, StorageDtype::kF32).ok());
  auto tuned_back = LoadCheckpoint(dir, torch::kDouble);
  ASSERT_TRUE(tuned_back.ok()) << tuned_back.status();
  EXPECT_EQ(tuned_back->arch().temperature_floor_scale, 4);
  EXPECT_LT((tuned_back->Forward(long_tokens) - tuned_whole).abs().max().item<double>(), 1e-5);
  std::filesystem::remove_all(dir);
}

TEST(DecoderTest, ChunkedPrefillEqualsOneFullForward) {
  Decoder d = MakeDouble(TinyMixedArch());
  torch::NoGradGuard no_grad;
  auto tokens = Tokens(11, 50, 3);
  auto full = d.Forward(tokens);
  for (int64_t chunk : {1, 2, 4, 11}) {
    KvCache cache = d.NewCache(1, 11);
    std::vector<torch::Tensor> parts;
    for (int64_t p = 0; p < 11; p += chunk) {
      parts.push_back(d.ForwardCached(tokens.narrow(1, p, std::min<int64_t>(chunk, 11 - p)), cache,
                                      /*last_only=*/false));
    }
    auto chunked = torch::cat(parts, 1);
    EXPECT_TRUE(torch::allclose(chunked, full, /*rtol=*/0, /*atol=*/1e-12)) << "chunk " << chunk;
  }
}

TEST(DecoderTest, DecodeAfterPrefillEqualsFullForwardOverLongerSequence) {
  Decoder d = MakeDouble(TinyMixedArch());
  torch::NoGradGuard no_grad;
  auto tokens = Tokens(12, 50, 4);
  auto full = d.Forward(tokens);
  KvCache cache = d.NewCache(1, 12);
  d.ForwardCached(tokens.narrow(1, 0, 7), cache, /*last_only=*/true);
  for (int64_t p = 7; p < 12; ++p) {
    auto step = d.ForwardCached(tokens.narrow(1, p, 1), cache, /*last_only=*/true);
    EXPECT_TRUE(torch::allclose(step[0][0], full[0][p], 0, 1e-12)) << "position " << p;
  }
  EXPECT_EQ(cache.length(), 12);
}

// A decode step split over the spin pool's threads gives the bits it gives
// on OpenMP's (model/work_split.h): widths whose products and attention
// both split on 2 threads (rows past twice the grain; 8 heads x 300 keys x
// 64 past kDecodeParallelWork), f32 and f16 weights.
TEST(DecoderTest, DecodeOnTheSpinPoolGivesOpenMpsBits) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  Arch a = TinyMixedArch();
  a.num_layers = 2;
  a.d_model = 512;
  a.d_ffn = 1024;
  a.num_heads = 8;
  a.num_kv_heads = 2;
  a.head_dim = 64;
  a.vocab_size = 300;
  a.attention = {Attention::kFull, Attention::kSlidingWindow};
  a.sliding_window = 128;
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = Tokens(305, 300, 6);
  for (bool half : {false, true}) {
    auto d = Decoder::Create(a, 5, torch::kFloat);
    ASSERT_TRUE(d.ok());
    if (half) {
      ASSERT_TRUE(d->StoreWeightsAs(torch::kHalf).ok());
    }
    std::vector<torch::Tensor> steps[2];
    for (ThreadPool pool : {ThreadPool::kOpenMp, ThreadPool::kSpin}) {
      SetThreadPool(pool);
      KvCache cache = d->NewCache(1, 305);
      d->ForwardCached(tokens.narrow(1, 0, 300), cache, /*last_only=*/true);
      for (int64_t p = 300; p < 305; ++p) {
        steps[pool == ThreadPool::kSpin].push_back(
            d->ForwardCached(tokens.narrow(1, p, 1), cache, /*last_only=*/true));
      }
    }
    SetThreadPool(ThreadPool::kOpenMp);
    for (size_t i = 0; i < steps[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(steps[0][i], steps[1][i]))
          << (half ? "f16" : "f32") << " step " << i;
    }
  }
  at::set_num_threads(threads);
}

// The pool is tuned on the model's own decode step, which leaves the cache
// as it found it (the step's length set back each time); a generation
// after it ends in the same logits, bit for bit, as one before it.
TEST(DecoderTest, TheThreadPoolIsTunedOnTheModelsDecodeStep) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  Arch a = TinyMixedArch();
  a.num_layers = 2;
  a.attention = {Attention::kFull, Attention::kSlidingWindow};
  torch::NoGradGuard no_grad;
  auto d = Decoder::Create(a, 5, torch::kFloat);
  ASSERT_TRUE(d.ok()) << d.status();
  const torch::Tensor tokens = Tokens(40, a.vocab_size, 7);
  auto last_logits = [&] {
    KvCache cache = d->NewCache(1, 40);
    d->ForwardCached(tokens.narrow(1, 0, 36), cache, /*last_only=*/true);
    torch::Tensor out;
    for (int64_t p = 36; p < 40; ++p) {
      out = d->ForwardCached(tokens.narrow(1, p, 1), cache, /*last_only=*/true);
    }
    return out;
  };
  SetThreadPool(ThreadPool::kOpenMp);
  const torch::Tensor before = last_logits();
  absl::StatusOr<ThreadPoolTuning> t = TuneDecodeThreadPool(*d, 64);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->fixed.empty()) << t->Describe();
  EXPECT_EQ(CurrentThreadPool(), t->chosen);
  EXPECT_GE(t->rounds, 5);
  EXPECT_GT(t->openmp_ms, 0);
  EXPECT_GT(t->spin_ms, 0);
  EXPECT_TRUE(torch::equal(last_logits(), before));
  EXPECT_FALSE(TuneDecodeThreadPool(*d, -1).ok());
  SetThreadPool(ThreadPool::kOpenMp);
  at::set_num_threads(threads);
}

TEST(DecoderTest, SlidingWindowIgnoresTokensOutsideTheWindow) {
  Arch a = TinyMixedArch();
  a.num_layers = 1;
  a.attention = {Attention::kSlidingWindow};
  Decoder d = MakeDouble(a);
  torch::NoGradGuard no_grad;
  auto tokens = Tokens(8, 50, 5);
  auto changed = tokens.clone();
  changed[0][0] = (tokens[0][0].item<int64_t>() + 1) % 50;  // 7 positions back, window 3
  auto l1 = d.Forward(tokens), l2 = d.Forward(changed);
  EXPECT_TRUE(torch::equal(l1[0][7], l2[0][7]));
  EXPECT_FALSE(torch::allclose(l1[0][2], l2[0][2]));  // inside the window it matters
}

TEST(DecoderTest, SkipLayersDoNotMixPositions) {
  Arch a = TinyMixedArch();
  a.attention = {Attention::kSkip, Attention::kSkip, Attention::kSkip, Attention::kSkip};
  Decoder d = MakeDouble(a);
  torch::NoGradGuard no_grad;
  auto tokens = Tokens(6, 50, 6);
  auto changed = tokens.clone();
  changed[0][0] = (tokens[0][0].item<int64_t>() + 1) % 50;
  EXPECT_TRUE(torch::equal(d.Forward(tokens)[0][5], d.Forward(changed)[0][5]));
}

TEST(DecoderTest, InitialisationIsDeterministicInTheSeed) {
  Decoder a = MakeDouble(TinyMixedArch(), 9), b = MakeDouble(TinyMixedArch(), 9);
  Decoder c = MakeDouble(TinyMixedArch(), 10);
  auto ta = a.NamedTensors(), tb = b.NamedTensors(), tc = c.NamedTensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) EXPECT_TRUE(torch::equal(ta[i].second, tb[i].second));
  EXPECT_FALSE(torch::equal(ta[0].second, tc[0].second));
}

TEST(DecoderTest, NamesFollowHuggingFaceLlama) {
  Decoder d = MakeDouble(TinyMixedArch());
  auto named = d.NamedTensors();
  auto expected = ExpectedTensorShapes(TinyMixedArch());
  ASSERT_EQ(named.size(), expected.size());
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].first, expected[i].first);
    EXPECT_EQ(std::vector<int64_t>(named[i].second.sizes().begin(), named[i].second.sizes().end()),
              expected[i].second);
  }
  EXPECT_EQ(named[1].first, "model.layers.0.input_layernorm.weight");
}

TEST(DecoderTest, CreateRejectsInvalidArch) {
  Arch a = TinyMixedArch();
  a.num_kv_heads = 3;
  EXPECT_THAT(Decoder::Create(a, 1), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("num_kv_heads 3 does not divide")));
}

TEST(GenerateTest, GreedyTokensEqualArgmaxOfFullRecomputation) {
  Decoder d = MakeDouble(TinyMixedArch());
  std::vector<int64_t> prompt = {1, 7, 3, 9, 4, 4, 2};
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.prefill_chunk = 3;
  ASSERT_OK_AND_ASSIGN(Generation g, GreedyGenerate(d, prompt, o));
  ASSERT_EQ(g.tokens.size(), 6u);
  torch::NoGradGuard no_grad;
  std::vector<int64_t> seq = prompt;
  for (int64_t tok : g.tokens) {
    auto logits = d.Forward(torch::tensor(seq, torch::kLong).view({1, -1}));
    EXPECT_EQ(logits[0][-1].argmax().item<int64_t>(), tok);
    seq.push_back(tok);
  }
  EXPECT_GT(g.stats.ttft_ms(), 0);
  EXPECT_GE(g.stats.inference_end_ms, g.stats.first_token_ms);
  EXPECT_EQ(g.stats.generated_tokens, 6);
  EXPECT_THAT(g.stats.ToJson(), HasSubstr("\"ttft_ms\""));
}

// GreedyPick reads f32 rows itself, 64 values at a time: it must pick what
// torch.argmax picks, ties (the first), NaNs (the first) and infinities
// included, on each side of a block's edge; and anything not a
// contiguous f32 row through ATen.
TEST(GenerateTest, GreedyPickIsTorchsArgmaxOfTheLastRow) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto expect_same = [](const torch::Tensor& logits, const std::string& what) {
    const int64_t n = logits.size(-1);
    EXPECT_EQ(GreedyPick(logits), logits.reshape({-1, n})[-1].argmax().item<int64_t>()) << what;
  };
  for (int64_t n : {1, 2, 63, 64, 65, 129, 200, 4096}) {
    torch::Tensor row = torch::randn({1, 1, n}, gen);
    expect_same(row, absl::StrCat("random ", n));
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      torch::Tensor tie = row.clone();
      tie.view({-1})[at] = 100;
      tie.view({-1})[n - 1 - (n - 1 - at) / 3] = 100;  // an equal, at or after the first
      expect_same(tie, absl::StrCat("tie ", n, " at ", at));
      torch::Tensor with_nan = tie.clone();
      with_nan.view({-1})[n - 1 - at] = nan;
      expect_same(with_nan, absl::StrCat("NaN ", n, " at ", n - 1 - at));
      torch::Tensor with_inf = row.clone();
      with_inf.view({-1})[at] = inf;
      expect_same(with_inf, absl::StrCat("inf ", n, " at ", at));
    }
    expect_same(torch::full({1, 1, n}, -inf), absl::StrCat("all -inf ", n));
  }
  // A prompt's logits [1, T, V]: the last position's row.
  torch::Tensor rows = torch::randn({1, 5, 300}, gen);
  rows[0][1][7] = 1000;
  expect_same(rows, "last of 5 rows");
  EXPECT_NE(GreedyPick(rows), 7);
  // Through ATen: double, half, a strided row.
  expect_same(torch::randn({1, 1, 100}, gen).to(torch::kDouble), "double");
  expect_same(torch::randn({1, 1, 100}, gen).to(torch::kHalf), "half");
  expect_same(torch::randn({1, 200, 3}, gen).transpose(1, 2), "strided");
}

TEST(GenerateTest, RejectsTokensOutsideTheVocabulary) {
  Decoder d = MakeDouble(TinyMixedArch());
  EXPECT_THAT(GreedyGenerate(d, {1, 50}, GenerateOptions{}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("prompt token 1 id 50 is outside vocabulary 0..49")));
  EXPECT_THAT(GreedyGenerate(d, {}, GenerateOptions{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prompt is empty")));
}

TEST(KvCacheTest, PreallocatesOnlyAttentionLayersAndAWindowForWindowLayers) {
  Arch a = TinyMixedArch();  // 2 full layers, 1 window-3 layer, 2 KV heads of 8
  Decoder d = MakeDouble(a);
  KvCache c = d.NewCache(1, 10);
  // (K,V) x heads x dim x f64 x (10 + 10 + 3 tokens)
  EXPECT_EQ(c.bytes(), 2 * 2 * 8 * 8 * (10 + 10 + 3));
  EXPECT_EQ(c.bytes(), KvCacheBytes(a, 10, 8));
  EXPECT_EQ(d.NewCache(1, 2).bytes(), KvCacheBytes(a, 2, 8));  // shorter than the window
}

// The inference path in float (the blocked float kernel, the window layer's
// ring) against one full forward: every chunking, then decode far past the
// window so the ring wraps many times.
TEST(DecoderTest, FloatCachedPathsEqualTheFullForward) {
  auto made = Decoder::Create(TinyMixedArch(), 1, torch::kFloat);
  ASSERT_TRUE(made.ok()) << made.status();
  Decoder& d = *made;
  torch::NoGradGuard no_grad;
  auto tokens = Tokens(40, 50, 6);
  auto full = d.Forward(tokens);
  for (int64_t chunk : {1, 3, 7, 40}) {
    KvCache cache = d.NewCache(1, 40);
    std::vector<torch::Tensor> parts;
    for (int64_t p = 0; p < 40; p += chunk) {
      parts.push_back(d.ForwardCached(tokens.narrow(1, p, std::min<int64_t>(chunk, 40 - p)), cache,
                                      /*last_only=*/false));
    }
    EXPECT_LT((torch::cat(parts, 1) - full).abs().max().item<float>(), 2e-5) << "chunk " << chunk;
  }
}

// The allocation-free decode step against the ATen modules it replaces,
// token for token after a prompt: every attention type (the window-3 ring
// wraps ~12 times), QK-norm on and off, tied and untied heads, f32 and f16
// weights.
TEST(DecoderTest, InPlaceDecodeEqualsTheAtenModules) {
  Arch plain = TinyMixedArch();
  plain.qk_norm = false;
  plain.tie_embeddings = true;
  plain.head_dim = 16;
  plain.num_heads = 2;
  plain.num_kv_heads = 1;
  Arch qwen2 = plain;  // Qwen2's q/k/v biases
  qwen2.name = "tiny-qwen2";
  qwen2.qkv_bias = true;
  Arch smollm3 = plain;  // SmolLM3's NoPE layers, one of them a window layer
  smollm3.name = "tiny-smollm3";
  smollm3.no_rope = {false, true, false, true};
  Arch gemma = TinyMixedArch();  // Gemma 3's layout, window layers on their own RoPE base
  gemma.name = "tiny-gemma";
  gemma.gemma = true;
  gemma.local_rope_theta = 100;
  Arch llama4_chunked = TinyLlama4Arch();  // 45 positions: 6 chunks of 8
  llama4_chunked.name = "tiny-llama4-chunked";
  llama4_chunked.attention_chunk = 8;
  llama4_chunked.temperature_floor_scale = 4;  // and the NoPE layer's queries scaled by position
  llama4_chunked.temperature_attn_scale = 0.5;
  for (const Arch& a :
       {TinyMixedArch(), plain, qwen2, smollm3, gemma, TinyLlama4Arch(), llama4_chunked}) {
    // Quantized weights too: the decode step's GEMVs and the modules'
    // GEMMs quantize activations alike and share the integer kernels.
    // And a half-precision cache: both paths round the same values once.
    for (const auto& [weights, kv] : {std::pair{"f32", "f32"},
                                      {"f16", "f32"},
                                      {"q8_0", "f32"},
                                      {"q4_0", "f32"},
                                      {"f32", "f16"},
                                      {"q4_0", "f16"}}) {
      auto fast = Decoder::Create(a, 7, torch::kFloat);
      auto slow = Decoder::Create(a, 7, torch::kFloat);
      ASSERT_TRUE(fast.ok() && slow.ok());
      ASSERT_TRUE(fast->StoreWeightsAs(weights).ok());
      ASSERT_TRUE(slow->StoreWeightsAs(weights).ok());
      ASSERT_TRUE(fast->SetKvDtype(kv).ok());
      ASSERT_TRUE(slow->SetKvDtype(kv).ok());
      slow->SetInPlaceDecode(false);
      torch::NoGradGuard no_grad;
      KvCache fc = fast->NewCache(1, 45), sc = slow->NewCache(1, 45);
      auto prompt = Tokens(5, a.vocab_size, 8);
      auto lf = fast->ForwardCached(prompt, fc, true), ls = slow->ForwardCached(prompt, sc, true);
      for (int step = 0; step < 40; ++step) {
        auto next = ls.argmax(-1);
        lf = fast->ForwardCached(next, fc, true);
        ls = slow->ForwardCached(next, sc, true);
        ASSERT_EQ(lf.sizes(), ls.sizes());
        ASSERT_LT((lf - ls).abs().max().item<float>(), 1e-5)
            << a.name << " " << weights << " kv " << kv << " step " << step;
      }
      EXPECT_EQ(fc.length(), sc.length());
      // An f16 cache may round values 1e-7 apart to neighbouring halves.
      auto apart = [&](const torch::Tensor& x, const torch::Tensor& y) {
        const double diff = (x.to(torch::kFloat) - y.to(torch::kFloat)).abs().max().item<double>();
        return std::string(kv) == "f16" ? diff / y.abs().max().item<double>() / 1e-3 : diff / 1e-5;
      };
      for (int layer = 0; layer < a.num_layers; ++layer) {
        if (a.attention[layer] == Attention::kSkip) continue;
        EXPECT_LT(apart(fc.keys(layer), sc.keys(layer)), 1) << layer << " kv " << kv;
        EXPECT_LT(apart(fc.values(layer), sc.values(layer)), 1) << layer << " kv " << kv;
      }
    }
  }
}

// Q4_0 matrices of whole groups of eight rows are kept grouped
// (model/quant.h) where this CPU's kernels read them so, however the decoder
// came to hold them: drawn as Q4_0, stored after drawing, or loaded from a
// checkpoint. The three hold the same weights: the same logits, prompt and
// decode.
TEST(DecoderTest, Q4MatricesAreKeptGroupedWhereTheKernelsReadThem) {
  const Arch a = TinyMixedArch();
  const std::string dir = ::testing::TempDir() + "/q4_grouped";
  std::filesystem::remove_all(dir);
  ASSERT_OK_AND_ASSIGN(Decoder f32, Decoder::Create(a, 3));
  ASSERT_OK(SaveCheckpoint(f32, dir, StorageDtype::kF32));
  ASSERT_OK_AND_ASSIGN(Decoder drawn, Decoder::Create(a, 3, torch::kFloat, "q4_0"));
  ASSERT_OK_AND_ASSIGN(Decoder stored, Decoder::Create(a, 3));
  ASSERT_OK(stored.StoreWeightsAs("q4_0"));
  ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(dir));
  ASSERT_OK_AND_ASSIGN(Decoder loaded, reader->Load(torch::kFloat, "q4_0"));
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = Tokens(9, a.vocab_size, 5);
  torch::Tensor want;
  for (auto* d : {&drawn, &stored, &loaded}) {
    int grouped = 0, q4 = 0;
    for (const auto& [name, t] : d->NamedTensors()) {
      if (QuantTypeOf(t) != QuantType::kQ4_0) continue;
      ++q4;
      grouped += QuantGrouped(t);
      EXPECT_EQ(QuantGrouped(t), QuantGroupsRowsHere() && QuantRows(t) % 8 == 0) << name;
    }
    EXPECT_GT(q4, 0);
    EXPECT_EQ(grouped > 0, QuantGroupsRowsHere()) << QuantKernelName();
    KvCache cache = d->NewCache(1, 12);
    torch::Tensor got = d->ForwardCached(tokens, cache, true);
    for (int step = 0; step < 3; ++step) {
      got = torch::cat(
          {got, d->ForwardCached(got.narrow(1, got.size(1) - 1, 1).argmax(-1), cache, true)}, 1);
    }
    if (!want.defined()) want = got;
    EXPECT_TRUE(torch::equal(got, want));
  }
}

// Q8_0 weights move the logits by about their rounding, Q4_0 by more; a
// model whose rows are not whole blocks, or an unknown format, is refused
// by name and left as it was.
TEST(DecoderTest, QuantizedWeightsStayNearF32AndRefuseWhatTheyCannotHold) {
  const Arch a = TinyMixedArch();
  auto f32 = Decoder::Create(a, 3, torch::kFloat);
  ASSERT_TRUE(f32.ok());
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = Tokens(12, a.vocab_size, 4);
  const torch::Tensor want = f32->Forward(tokens);
  const double scale = want.abs().max().item<double>();
  for (const auto& [weights, tolerance] : {std::pair{"q8_0", 0.03}, {"q4_0", 0.3}}) {
    auto q = Decoder::Create(a, 3, torch::kFloat);
    ASSERT_TRUE(q.ok());
    ASSERT_TRUE(q->StoreWeightsAs(weights).ok());
    const torch::Tensor got = q->Forward(tokens);
    const double err = (got - want).abs().max().item<double>() / scale;
    EXPECT_LT(err, tolerance) << weights;
    EXPECT_GT(err, 0) << weights << " changed nothing";
    // The chunked, cached prompt equals the whole forward.
    KvCache cache = q->NewCache(1, 12);
    q->ForwardCached(tokens.narrow(1, 0, 5), cache, false);
    const torch::Tensor tail = q->ForwardCached(tokens.narrow(1, 5, 7), cache, false);
    EXPECT_LT((tail - got.narrow(1, 5, 7)).abs().max().item<double>(), 1e-4 * scale) << weights;
  }
  Arch odd = a;
  odd.d_ffn = 48;
  auto d = Decoder::Create(odd, 3, torch::kFloat);
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(d->StoreWeightsAs("q4_0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mlp.down_proj.weight has rows of 48 values; q4_0 stores whole "
                                 "blocks of 32")));
  EXPECT_LT((d->Forward(tokens) - d->Forward(tokens)).abs().max().item<double>(), 1e-6);
  EXPECT_THAT(d->StoreWeightsAs("q5_k"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("weight dtype q5_k is not one of")));
}

// Storing matrices as they are drawn (Create with a weight dtype, what
// keeps a q4_0 run's peak memory at the quantized model) gives the bytes
// of drawing all, then StoreWeightsAs; what StoreWeightsAs refuses, Create
// refuses before it draws.
TEST(DecoderTest, CreateStoredEqualsCreateThenStore) {
  Arch a = TinyMixedArch();
  // An embedding of 70000 x 64 (17.9 MB of f32) is drawn and stored in two
  // blocks of rows: the same draws as one.
  a.vocab_size = 70000;
  a.d_model = 64;
  for (const char* weights : {"q4_0", "q8_0", "f16", "bf16"}) {
    auto stored = Decoder::Create(a, 4, torch::kFloat, weights);
    auto later = Decoder::Create(a, 4, torch::kFloat);
    ASSERT_TRUE(stored.ok() && later.ok()) << weights;
    ASSERT_TRUE(later->StoreWeightsAs(weights).ok());
    const auto want = later->NamedTensors();
    const auto got = stored->NamedTensors();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      EXPECT_EQ(got[i].second.scalar_type(), want[i].second.scalar_type()) << got[i].first;
      EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << weights << " " << got[i].first;
    }
    EXPECT_THAT(stored->StoreWeightsAs("q4_0"),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already stored")));
  }
  Arch odd = a;
  odd.d_ffn = 48;
  EXPECT_THAT(Decoder::Create(odd, 4, torch::kFloat, "q4_0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mlp.down_proj.weight has rows of 48 values")));
  EXPECT_THAT(Decoder::Create(a, 4, torch::kBFloat16, "q8_0"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("f32 decoder")));
}

// An f16 cache stores half the bytes and moves the logits by its rounding
// only; what it cannot hold is refused.
TEST(DecoderTest, HalfPrecisionCacheHalvesTheBytesAndStaysNearF32) {
  const Arch a = TinyMixedArch();
  auto f32 = Decoder::Create(a, 5, torch::kFloat);
  auto f16 = Decoder::Create(a, 5, torch::kFloat);
  ASSERT_TRUE(f32.ok() && f16.ok());
  ASSERT_TRUE(f16->SetKvDtype("f16").ok());
  torch::NoGradGuard no_grad;
  KvCache c32 = f32->NewCache(1, 40), c16 = f16->NewCache(1, 40);
  EXPECT_EQ(c16.bytes() * 2, c32.bytes());
  const torch::Tensor prompt = Tokens(9, a.vocab_size, 2);
  torch::Tensor l32 = f32->ForwardCached(prompt, c32, true);
  torch::Tensor l16 = f16->ForwardCached(prompt, c16, true);
  for (int step = 0; step < 20; ++step) {
    const torch::Tensor next = l32.argmax(-1);
    l32 = f32->ForwardCached(next, c32, true);
    l16 = f16->ForwardCached(next, c16, true);
    const double err = (l16 - l32).abs().max().item<double>() / l32.abs().max().item<double>();
    EXPECT_LT(err, 5e-3) << "step " << step;
  }
  EXPECT_THAT(f16->SetKvDtype("q4_0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kv dtype q4_0")));
  auto bf16 = Decoder::Create(a, 5, torch::kBFloat16);
  ASSERT_TRUE(bf16.ok());
  EXPECT_THAT(bf16->SetKvDtype("f16"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("f32 decoder")));
}

// A q8_0 cache (MobileLLM-Flash Sec. 4.2's quantized cache): 34 bytes per
// 32 values; the decode step (integer scores) and the ATen modules
// (dequantized keys) agree within the query's quantization and store the
// same blocks, ring layers included (window 3 wraps); both stay near an f32
// cache (the kernel's exact semantics: attention_test). A head_dim off the
// block is refused, naming it.
TEST(DecoderTest, Q8CacheDecodeStepMatchesTheModulesAndStaysNearF32) {
  Arch a = TinyMixedArch();
  a.d_model = 64;
  a.num_heads = 2;
  a.num_kv_heads = 1;
  a.head_dim = 32;
  torch::NoGradGuard no_grad;
  auto dequantized = [](const torch::Tensor& cache) {
    return DequantizeMatrix(cache.reshape({-1, cache.size(-1) / kQ8BlockBytes, kQ8BlockBytes}));
  };
  for (const char* weights : {"f32", "q4_0"}) {
    auto fast = Decoder::Create(a, 9, torch::kFloat);
    auto slow = Decoder::Create(a, 9, torch::kFloat);
    auto ref = Decoder::Create(a, 9, torch::kFloat);
    ASSERT_TRUE(fast.ok() && slow.ok() && ref.ok());
    for (Decoder* d : {&*fast, &*slow, &*ref}) ASSERT_TRUE(d->StoreWeightsAs(weights).ok());
    ASSERT_TRUE(fast->SetKvDtype("q8_0").ok());
    ASSERT_TRUE(slow->SetKvDtype("q8_0").ok());
    EXPECT_STREQ(fast->kv_dtype(), "q8_0");
    slow->SetInPlaceDecode(false);
    KvCache fc = fast->NewCache(1, 40), sc = slow->NewCache(1, 40), rc = ref->NewCache(1, 40);
    EXPECT_EQ(fc.bytes() * 128, rc.bytes() * 34);
    const torch::Tensor prompt = Tokens(9, a.vocab_size, 2);
    torch::Tensor lf = fast->ForwardCached(prompt, fc, true);
    torch::Tensor ls = slow->ForwardCached(prompt, sc, true);
    torch::Tensor lr = ref->ForwardCached(prompt, rc, true);
    for (int step = 0; step < 30; ++step) {
      const torch::Tensor next = lr.argmax(-1);
      lf = fast->ForwardCached(next, fc, true);
      ls = slow->ForwardCached(next, sc, true);
      lr = ref->ForwardCached(next, rc, true);
      const double scale = lr.abs().max().item<double>();
      EXPECT_LT((lf - ls).abs().max().item<double>() / scale, 3e-2) << weights << " " << step;
      EXPECT_LT((lf - lr).abs().max().item<double>() / scale, 3e-2) << weights << " " << step;
    }
    for (int layer = 0; layer < a.num_layers; ++layer) {
      if (a.attention[layer] == Attention::kSkip) continue;
      ASSERT_EQ(fc.keys(layer).scalar_type(), torch::kByte);
      const torch::Tensor k = dequantized(fc.keys(layer)), want = dequantized(sc.keys(layer));
      EXPECT_LT((k - want).abs().max().item<double>(), 2e-2 * want.abs().max().item<double>())
          << weights << " layer " << layer;
    }
  }
  auto off = Decoder::Create(TinyMixedArch(), 9, torch::kFloat);
  ASSERT_TRUE(off.ok());
  EXPECT_THAT(off->SetKvDtype("q8_0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("head_dim 8")));
  EXPECT_STREQ(off->kv_dtype(), "f32");
}

// A token outside the vocabulary is refused, not read past the table.
TEST(DecoderTest, InPlaceDecodeRefusesATokenOutsideTheVocabulary) {
  auto d = Decoder::Create(TinyMixedArch(), 1, torch::kFloat);
  ASSERT_TRUE(d.ok());
  torch::NoGradGuard no_grad;
  KvCache cache = d->NewCache(1, 4);
  EXPECT_THROW(d->ForwardCached(torch::full({1, 1}, 50, torch::kLong), cache, true), c10::Error);
  EXPECT_THROW(d->ForwardCached(torch::full({1, 1}, -1, torch::kLong), cache, true), c10::Error);
  EXPECT_THROW(d->ForwardToken(50, cache), c10::Error);
  EXPECT_THROW(d->ForwardToken(-1, cache), c10::Error);
  EXPECT_EQ(cache.length(), 0);
}

// ForwardToken is ForwardCached of a [1, 1] tensor, bit for bit, on the
// in-place step (f32) and on the modules (a double decoder, which the
// in-place step does not take), and refuses a full cache as it does.
TEST(DecoderTest, ForwardTokenIsForwardCachedOfOneToken) {
  for (const torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
    auto a = Decoder::Create(TinyMixedArch(), 5, dtype);
    auto b = Decoder::Create(TinyMixedArch(), 5, dtype);
    ASSERT_TRUE(a.ok() && b.ok());
    torch::NoGradGuard no_grad;
    KvCache ca = a->NewCache(1, 12), cb = b->NewCache(1, 12);
    const torch::Tensor prompt = Tokens(4, 50, 2);
    a->ForwardCached(prompt, ca, true);
    torch::Tensor lb = b->ForwardCached(prompt, cb, true);
    for (int step = 0; step < 8; ++step) {
      const int64_t next = GreedyPick(lb);
      const torch::Tensor la = a->ForwardToken(next, ca);
      lb = b->ForwardCached(torch::full({1, 1}, next, torch::kLong), cb, true);
      ASSERT_EQ(la.sizes(), lb.sizes());
      ASSERT_TRUE(torch::equal(la, lb)) << dtype << " step " << step;
      ASSERT_EQ(ca.length(), cb.length());
    }
    EXPECT_THROW(a->ForwardToken(1, ca), c10::Error) << "a full cache";
    EXPECT_EQ(ca.length(), 12);
  }
}

}  // namespace
}  // namespace hilnas
