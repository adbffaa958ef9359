#include "model/decoder.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/internal/decoder_layers.h"
#include "model/quant.h"
#include "util/mapping_pages.h"
#include "util/status_macros.h"

namespace hilnas {

using decoder_internal::CopyRing;
using decoder_internal::DecoderImpl;
using decoder_internal::ToCacheForm;
using decoder_internal::WriteRing;

namespace {

// A decoder's parameters (and its KV caches, HugePageZeros below) live in
// one HugePageBuffer (util/mapping_pages.h): 2 MiB-aligned, advised to be
// backed by transparent huge pages. A decode step streams every weight
// once: with 4 KiB pages a one-thread GEMV over 56 MiB read 25-27 GB/s on
// an AMD EPYC (Zen 4), with 2 MiB pages 36-45 GB/s
// (bench/data/runtime-compare.md). Activations stay where libtorch puts
// them: huge pages for every allocation (glibc.malloc.hugetlb=1) made
// prefill slower by the zeroing of fresh huge pages.
//
// Where a tensor of `bytes` goes after those laid out before it (`total`
// bytes): at the next 64-byte boundary; `total` moves past it.
size_t PlaceNext(size_t& total, size_t bytes) {
  total = (total + 63) / 64 * 64;
  const size_t at = total;
  total += bytes;
  return at;
}

// Zeroed tensors of `shapes` in `dtype`, one after another in one
// HugePageBuffer: the kernel's zero-filled pages, so nothing is written
// here. A KV cache is read whole by every decode step, as the weights are:
// full4's shape with 8 KV heads, f16 cache at 4096 tokens (32 MiB), one
// thread, attention 4.99 -> 4.54 ms a step; full4 at 2048 (4 MiB) 0.72 ->
// 0.68 (medians of 4 alternated pairs, AMD EPYC). Without a buffer,
// torch::zeros each.
std::vector<torch::Tensor> HugePageZeros(const std::vector<std::vector<int64_t>>& shapes,
                                         torch::Dtype dtype) {
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const auto& shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    offsets.push_back(PlaceNext(total, static_cast<size_t>(n) * c10::elementSize(dtype)));
  }
  const std::shared_ptr<char> buf = HugePageBuffer(total);
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    out.push_back(buf ? torch::from_blob(
                            buf.get() + offsets[i], shapes[i], [buf](void*) {},
                            torch::TensorOptions().dtype(dtype))
                      : torch::zeros(shapes[i], dtype));
  }
  return out;
}

}  // namespace

// RoPE inverse frequencies theta^(-2i/hd), i < hd/2, in double, scaled as
// the checkpoint says (proto/arch.proto's RopeScalingSpec).
torch::Tensor RopeInverseFrequencies(const Arch& a) {
  torch::Tensor inv = torch::pow(a.rope_theta, -torch::arange(0, a.head_dim, 2, torch::kDouble) /
                                                   static_cast<double>(a.head_dim));
  const RopeScaling& r = a.rope_scaling;
  if (r.kind == RopeScaling::Kind::kLinear) return inv / r.factor;
  if (r.kind != RopeScaling::Kind::kLlama3) return inv;
  // Llama 3.1's scaling: wavelengths longer than original/low_freq_factor
  // are stretched by factor, shorter than original/high_freq_factor kept,
  // and those between interpolated by how many fit in the original context.
  const double original = r.original_max_position_embeddings;
  const torch::Tensor wavelen = 2 * M_PI / inv;
  const torch::Tensor smooth =
      (original / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const torch::Tensor blended = (1 - smooth) * inv / r.factor + smooth * inv;
  return torch::where(wavelen > original / r.low_freq_factor, inv / r.factor,
                      torch::where(wavelen < original / r.high_freq_factor, inv, blended));
}

KvCache::KvCache(const Arch& arch, int64_t batch, int64_t capacity, torch::Dtype dtype, int layers)
    : capacity_(capacity), slim_(arch.kv_cache == KvLayout::kSlim) {
  // Every layer's keys and values in one buffer of huge pages
  // (HugePageZeros), in layer order: shapes first, then the buffer.
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::pair<std::vector<torch::Tensor>*, size_t>> into;  // keys_ or values_, layer
  for (Attention at : arch.attention) {
    keys_.emplace_back();
    values_.emplace_back();
    if (at == Attention::kSkip) continue;
    if (layers >= 0 && static_cast<int>(keys_.size()) > layers) continue;
    // A window layer keeps a ring of `window` slots (see WriteRing).
    const int64_t slots = at == Attention::kSlidingWindow
                              ? std::min<int64_t>(capacity, arch.sliding_window)
                              : capacity;
    if (slim_) {
      shapes.push_back({batch, slots, arch.kv_width()});
      into.push_back({&keys_, keys_.size() - 1});
      continue;
    }
    // A byte cache holds each row of head_dim values as Q8_0 blocks.
    const int64_t row =
        dtype == torch::kByte ? arch.head_dim / kQuantBlock * kQ8BlockBytes : arch.head_dim;
    shapes.push_back({batch, arch.num_kv_heads, slots, row});
    into.push_back({&keys_, keys_.size() - 1});
    shapes.push_back({batch, arch.num_kv_heads, slots, row});
    into.push_back({&values_, values_.size() - 1});
  }
  std::vector<torch::Tensor> made = HugePageZeros(shapes, dtype);
  for (size_t i = 0; i < made.size(); ++i) (*into[i].first)[into[i].second] = std::move(made[i]);
}

void KvCache::CopyPositions(const KvCache& from, int64_t begin, int64_t end, int first_layer,
                            int last_layer) {
  TORCH_CHECK(slim_ == from.slim_ && keys_.size() == from.keys_.size() && end <= capacity_ &&
                  end <= from.capacity_,
              "KvCache::CopyPositions between caches of different shapes");
  const int dim = slim_ ? 1 : 2;
  for (int i = first_layer; i < last_layer; ++i) {
    if (!keys_[i].defined()) continue;
    CopyRing(keys_[i], from.keys_[i], dim, begin, end);
    if (values_[i].defined()) CopyRing(values_[i], from.values_[i], dim, begin, end);
  }
}

int64_t KvCache::bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i].defined()) n += keys_[i].nbytes();
    if (values_[i].defined()) n += values_[i].nbytes();
  }
  return n;
}

namespace {

// How --weight-dtype stores one f32 matrix; empty: as it is (f32).
using MatrixStore = std::function<torch::Tensor(const torch::Tensor&)>;

// The storage `name` (f32, bf16, f16, q4_0, q8_0) for every matrix of
// `impl`, checked against all of them before any is changed: an f32
// decoder, no slim cache, matrices still f32 (or, when `loading`, already
// of the stored type: CreateForLoading shaped them so), and for the block
// formats rows of whole blocks (INVALID_ARGUMENT naming the first matrix
// off it).
absl::StatusOr<MatrixStore> StorageFor(const DecoderImpl& impl, absl::string_view name,
                                       bool loading = false) {
  if (name == "f32") return MatrixStore();
  const std::optional<QuantType> quant = ParseQuantType(name);
  if (name != "f16" && name != "bf16" && !quant) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight dtype ", name, " is not one of f32, bf16, f16, q4_0, q8_0"));
  }
  if (impl.dtype_ != torch::kFloat) {
    return absl::FailedPreconditionError(
        absl::StrCat(quant ? "quantized" : "half-precision", " weights need an f32 decoder"));
  }
  if (impl.arch_.kv_cache == KvLayout::kSlim) {
    return absl::UnimplementedError(
        "kv_cache slim multiplies by W_KV outside the projections: its weights stay f32");
  }
  const torch::Dtype stored = quant           ? torch::kByte
                              : name == "f16" ? torch::kHalf
                                              : torch::kBFloat16;
  for (const auto& item : impl.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (p.dim() < 2) continue;  // norm scales stay f32; quantized matrices are 3-D
    if (loading && p.scalar_type() == stored) continue;
    if (p.scalar_type() != torch::kFloat) {
      return absl::FailedPreconditionError(
          absl::StrCat(item.key(), " is already stored as ", c10::toString(p.scalar_type())));
    }
    if (quant && p.size(1) % kQuantBlock != 0) {
      return absl::InvalidArgumentError(absl::StrCat(impl.arch_.name, ": ", item.key(),
                                                     " has rows of ", p.size(1), " values; ", name,
                                                     " stores whole blocks of ", kQuantBlock));
    }
  }
  if (quant) {
    // Widths were checked above: QuantizeMatrix cannot refuse.
    return MatrixStore([t = *quant](const torch::Tensor& w) { return *QuantizeMatrix(w, t); });
  }
  const torch::Dtype half = name == "f16" ? torch::kHalf : torch::kBFloat16;
  return MatrixStore([half](const torch::Tensor& w) { return w.to(half).contiguous(); });
}

// A matrix's stored form in place of its values (the parameter keeps its
// name).
void SetStored(torch::Tensor& p, const torch::Tensor& stored) {
  if (stored.scalar_type() == torch::kByte) p.set_requires_grad(false);  // no gradient
  p.set_data(stored);
}

// Every parameter of `module` moves into one HugePageBuffer, each at a
// 64-byte boundary in the order the module lists them (the order a decode
// step reads them). Matrices under 2 MiB (a full4 layer's q,
// k, v and o; the 1 MiB tails of its MLP matrices) sat in small pages when
// each large one had a buffer of its own: 22 of full4's 57 MB, and a
// one-thread f32 GEMV over its 57 MB read 1.9-2.8 ms; over one buffer of
// huge pages 1.4-1.6 ms (AMD EPYC; bench/data/runtime-compare.md). A tied
// head is the embedding's own tensor: moved once.
//
// With `store`, each f32 matrix takes its stored form (the shape and type
// of one stored row's) in the buffer. What moves with them:
enum class PackValues {
  kNone,      // nothing: the buffer is uninitialised (a loader fills it)
  kUnstored,  // every parameter's values but the matrices taking a stored
              // form, which are left uninitialised (Create draws them)
  kAll,       // every value, stored matrices stored
};
// Values move one parameter at a time, so the peak is the old buffers and
// the new one plus one stored matrix. Below one huge page, or when the
// buffer cannot be had, each parameter keeps (or gets) a buffer of its own.
void PackParameters(torch::nn::Module& module, PackValues values,
                    const MatrixStore& store = nullptr) {
  struct Slot {
    torch::Tensor param;
    std::vector<int64_t> shape;
    torch::TensorOptions options;
    bool stored;
    size_t offset;
  };
  std::vector<Slot> slots;
  std::unordered_set<const c10::TensorImpl*> seen;
  size_t total = 0;
  for (torch::Tensor& p : module.parameters()) {
    if (!p.is_contiguous() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    Slot s{p, p.sizes().vec(), p.options(), false, 0};
    if (store && p.dim() == 2 && p.scalar_type() == torch::kFloat) {
      const torch::Tensor row = store(torch::zeros({1, p.size(1)}));
      s.shape = row.sizes().vec();
      s.shape[0] = p.size(0);
      s.options = row.options();
      s.stored = true;
    }
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    s.offset = PlaceNext(total, static_cast<size_t>(n) * s.options.dtype().itemsize());
    slots.push_back(std::move(s));
  }
  const std::shared_ptr<char> buf = HugePageBuffer(total, /*populate=*/true);
  if (!buf) {
    for (Slot& s : slots) {
      if (!s.stored) continue;
      SetStored(s.param,
                values == PackValues::kAll ? store(s.param) : torch::empty(s.shape, s.options));
    }
    return;
  }
  for (Slot& s : slots) {
    torch::Tensor moved = torch::from_blob(
        buf.get() + s.offset, s.shape, [buf](void*) {}, s.options);
    if (values == PackValues::kAll) {
      moved.copy_(s.stored ? store(s.param) : s.param);
    } else if (values == PackValues::kUnstored && !s.stored) {
      moved.copy_(s.param);
    }
    if (s.stored) {
      SetStored(s.param, moved);
    } else {
      s.param.set_data(moved);
    }
  }
}

// Each Q4_0 matrix of `module` in the grouped form (model/quant.h), in
// place, where this CPU's kernels read that form: the same bytes in the
// same buffer. A tied head is the embedding's own tensor: grouped once.
void GroupQuantizedMatrices(torch::nn::Module& module) {
  if (!QuantGroupsRowsHere()) return;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (torch::Tensor& p : module.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) GroupQuantRows(p);
  }
}

// A rows x cols matrix of N(0, std) draws from `gen`, handed to `store` a
// block of rows at a time (at most 16 MiB of f32) and written into `out`
// (the matrix's stored form, where the decoder keeps it), so the f32 matrix
// is never whole: a 128K-token embedding is 1 GB of f32 at d 2048, 0.14 GB
// as Q4_0. The draws are those of one normal_ over the whole matrix:
// libtorch fills uniforms in order and transforms them 16 at a time, so
// blocks of a multiple of 16 values continue the same sequence (a row
// width that is not one is drawn whole).
void DrawStored(int64_t rows, int64_t cols, double std, at::Generator& gen,
                const MatrixStore& store, torch::Tensor& out) {
  constexpr int64_t kBlockBytes = int64_t{16} << 20;
  const int64_t step =
      cols % 16 == 0 ? std::clamp<int64_t>(kBlockBytes / (cols * 4), 1, rows) : rows;
  torch::Tensor drawn = torch::empty({step, cols});
  for (int64_t r0 = 0; r0 < rows; r0 += step) {
    const int64_t n = std::min(step, rows - r0);
    torch::Tensor part = drawn.narrow(0, 0, n);
    part.normal_(0.0, std, gen);
    out.narrow(0, r0, n).copy_(store(part));
  }
}

}  // namespace

absl::StatusOr<Decoder> Decoder::Create(const Arch& arch, uint64_t seed, torch::Dtype dtype,
                                        absl::string_view weight_dtype) {
  return CreateImpl(arch, seed, dtype, /*initialize=*/true, weight_dtype);
}

absl::StatusOr<Decoder> Decoder::CreateForLoading(const Arch& arch, torch::Dtype dtype,
                                                  absl::string_view weight_dtype) {
  return CreateImpl(arch, 0, dtype, /*initialize=*/false, weight_dtype);
}

absl::StatusOr<Decoder> Decoder::CreateImpl(const Arch& arch, uint64_t seed, torch::Dtype dtype,
                                            bool initialize, absl::string_view weight_dtype) {
  absl::Status valid = ValidateArch(arch);
  if (!valid.ok()) return valid;
  try {
    // Cheap: no matrix is written yet (MakeLinear).
    auto impl = std::make_shared<DecoderImpl>(arch, dtype);
    torch::NoGradGuard no_grad;
    if (!initialize) {
      impl->to(dtype);
      impl->eval();
      HILNAS_ASSIGN_OR_RETURN(const MatrixStore store, StorageFor(*impl, weight_dtype));
      // Matrices in their stored form already, so the loader writes stored
      // rows into the one buffer and no matrix is allocated twice.
      PackParameters(*impl, PackValues::kNone, store);  // the loader fills them
      return Decoder(impl);
    }
    HILNAS_ASSIGN_OR_RETURN(const MatrixStore store, StorageFor(*impl, weight_dtype));
    // Stored matrices are drawn straight into the packed buffer (below);
    // f32 ones are drawn where they are and packed after.
    if (store) PackParameters(*impl, PackValues::kUnstored, store);
    // Deterministic initialisation in the fixed ExpectedTensorShapes order:
    // N(0, 0.02) for matrices, output projections scaled by 1/sqrt(2 L)
    // (GPT-2), ones for norm scales. Each matrix goes to its storage as
    // soon as it is drawn: the same values as drawing all, then
    // StoreWeightsAs, with one f32 matrix resident at a time.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    Decoder d(impl);
    for (auto& [name, t] : d.NamedTensors()) {
      if (t.dim() == 1) {
        // Norm scales stay ones; biases (Qwen2's q/k/v) are drawn like the
        // matrices, so a random model exercises them.
        if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
          t.copy_(torch::empty(t.sizes(), torch::kFloat).normal_(0.0, 0.02, gen));
        }
        continue;
      }
      const bool residual_out =
          name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
      const double std = 0.02 / (residual_out ? std::sqrt(2.0 * arch.num_layers) : 1.0);
      if (store) {  // f32 (StorageFor checked): drawn and stored a block of rows at a time
        DrawStored(t.size(0), QuantTypeOf(t) ? QuantColumns(t) : t.size(1), std, gen, store, t);
      } else if (t.scalar_type() == torch::kFloat) {
        t.normal_(0.0, std, gen);
      } else {  // drawn in f32 and rounded, as before parts were built in dtype
        t.copy_(torch::empty(t.sizes(), torch::kFloat).normal_(0.0, std, gen));
      }
    }
    impl->eval();
    if (!store) {  // stored matrices are not converted back, and are packed
      impl->to(dtype);
      PackParameters(*impl, PackValues::kAll);
    } else {
      GroupQuantizedMatrices(*impl);
    }
    return d;
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("building ", arch.name, ": ", e.what_without_backtrace()));
  }
}

const Arch& Decoder::arch() const { return impl_->arch_; }
torch::Dtype Decoder::dtype() const { return impl_->dtype_; }

absl::Status Decoder::StoreWeightsAs(torch::Dtype storage) {
  if (storage != torch::kBFloat16 && storage != torch::kHalf) {
    return absl::InvalidArgumentError("weights are stored in half precision: bf16 or f16");
  }
  return StoreWeightsAs(storage == torch::kHalf ? "f16" : "bf16");
}

absl::Status Decoder::QuantizeWeights(QuantType type) {
  return StoreWeightsAs(QuantTypeName(type));
}

absl::StatusOr<Decoder::ParameterSetter> Decoder::SetterFor(absl::string_view weight_dtype) const {
  HILNAS_ASSIGN_OR_RETURN(const MatrixStore store,
                          StorageFor(*impl_, weight_dtype, /*loading=*/true));
  return ParameterSetter([store](torch::Tensor& param, const torch::Tensor& rows, int64_t row0) {
    if (param.dim() < 2) {
      param.copy_(rows);  // a norm scale, whole
      return;
    }
    if (!store) {
      param.narrow(0, row0, rows.size(0)).copy_(rows);  // converts from the file's dtype
      return;
    }
    const torch::Tensor stored = store(rows.to(torch::kFloat).contiguous());
    if (row0 == 0 && (param.scalar_type() != stored.scalar_type() || param.dim() != stored.dim())) {
      // A decoder not created for this storage (CreateForLoading's
      // weight_dtype): the stored matrix in a buffer of its own.
      std::vector<int64_t> shape = stored.sizes().vec();
      shape[0] = param.size(0);
      SetStored(param, torch::empty(shape, stored.options()));
    }
    param.narrow(0, row0, rows.size(0)).copy_(stored);
  });
}

void Decoder::FinishLoading() {
  torch::NoGradGuard no_grad;
  GroupQuantizedMatrices(*impl_);
}

absl::Status Decoder::StoreWeightsAs(absl::string_view name) {
  HILNAS_ASSIGN_OR_RETURN(const MatrixStore store, StorageFor(*impl_, name));
  if (!store) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  try {
    // Stored straight into a new buffer of huge pages, as Create's are (a
    // loaded big12 at Q4_0 decoded at 22.8 ms/token from small pages, 17.4
    // from huge ones).
    PackParameters(*impl_, PackValues::kAll, store);
    GroupQuantizedMatrices(*impl_);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("storing ", impl_->arch_.name, " as ", name, ": ",
                                            e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

torch::nn::Module& Decoder::module() { return *impl_; }

torch::Tensor Decoder::Forward(const torch::Tensor& tokens, ForwardObserver* observer) {
  return impl_->Run(tokens, 0, nullptr, false, observer);
}

namespace {

// Writing positions start..start+t-1 must stay inside the preallocated cache.
void CheckCapacity(const KvCache& cache, int64_t start, int64_t t) {
  TORCH_CHECK(start + t <= cache.capacity(), "KV cache overflow: ", start, " + ", t, " > capacity ",
              cache.capacity());
}

}  // namespace

torch::Tensor Decoder::ForwardCached(const torch::Tensor& tokens, KvCache& cache, bool last_only) {
  const int64_t start = cache.length();
  CheckCapacity(cache, start, tokens.size(1));
  torch::Tensor logits;
  if (impl_->CanDecodeInPlace(tokens, cache)) {
    logits = impl_->DecodeStep(tokens.contiguous().data_ptr<int64_t>()[0], cache);
  } else {
    logits = impl_->Run(tokens, start, &cache, last_only);
  }
  cache.Advance(tokens.size(1));
  return logits;
}

torch::Tensor Decoder::ForwardToken(int64_t token, KvCache& cache) {
  if (!impl_->CanDecodeInPlace(cache)) {
    return ForwardCached(torch::full({1, 1}, token, torch::kLong), cache, /*last_only=*/true);
  }
  CheckCapacity(cache, cache.length(), 1);
  torch::Tensor logits = impl_->DecodeStep(token, cache);
  cache.Advance(1);
  return logits;
}

void Decoder::SetInPlaceDecode(bool on) { impl_->in_place_decode_ = on; }

torch::Tensor Decoder::ForwardWithKv(const torch::Tensor& tokens, const std::vector<LayerKv>& kv,
                                     ForwardObserver* observer) {
  TORCH_CHECK(kv.size() == impl_->model_->typed_layers.size(), "ForwardWithKv: ", kv.size(),
              " layers of keys and values for ", impl_->model_->typed_layers.size(), " layers");
  return impl_->Run(tokens, 0, nullptr, false, observer, &kv);
}

void Decoder::FillCache(KvCache& cache, const std::vector<LayerKv>& kv) {
  auto& layers = impl_->model_->typed_layers;
  TORCH_CHECK(kv.size() == layers.size() && cache.length() == 0, "FillCache: ", kv.size(),
              " layers for ", layers.size(), ", cache length ", cache.length());
  TORCH_CHECK(impl_->arch_.kv_cache != KvLayout::kSlim,
              "FillCache: a SLIM cache cannot take predicted values");
  int64_t t = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i]->self_attn) continue;
    t = kv[i].keys.size(1);
    TORCH_CHECK(t <= cache.capacity(), "FillCache: ", t, " tokens > capacity ", cache.capacity());
    const auto [cos, sin] = impl_->Rope(0, t, impl_->arch_.attention[i]);
    torch::Tensor& keys = cache.keys(static_cast<int>(i));
    torch::Tensor& values = cache.values(static_cast<int>(i));
    WriteRing(
        keys, 2, 0,
        ToCacheForm(layers[i]->self_attn->RotatedKeys(kv[i].keys, cos, sin), keys.scalar_type()));
    WriteRing(values, 2, 0, ToCacheForm(kv[i].values.transpose(1, 2), values.scalar_type()));
  }
  cache.Advance(t);
}

KvCache Decoder::NewCache(int64_t batch, int64_t capacity, int layers) const {
  impl_->ReserveRope(capacity);
  return KvCache(impl_->arch_, batch, capacity,
                 impl_->kv_dtype_set_ ? impl_->kv_dtype_ : impl_->dtype_, layers);
}

absl::Status Decoder::SetKvDtype(absl::string_view name) {
  if (name != "f32" && name != "f16" && name != "q8_0") {
    return absl::InvalidArgumentError(
        absl::StrCat("kv dtype ", name, " is not one of f32, f16, q8_0"));
  }
  if (name == "f32") {
    impl_->kv_dtype_set_ = false;
    return absl::OkStatus();
  }
  const Arch& a = impl_->arch_;
  if (impl_->dtype_ != torch::kFloat) {
    return absl::FailedPreconditionError(
        absl::StrCat("a ", name, " KV cache needs an f32 decoder"));
  }
  if (a.kv_cache == KvLayout::kSlim) {
    return absl::UnimplementedError("kv_cache slim keeps raw keys in the compute dtype");
  }
  if (name == "q8_0" && a.head_dim % kQuantBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat(a.name, ": head_dim ", a.head_dim,
                                                   " is not a multiple of ", kQuantBlock,
                                                   ": a q8_0 KV cache stores whole blocks"));
  }
  impl_->kv_dtype_ = name == "f16" ? torch::kHalf : torch::kByte;
  impl_->kv_dtype_set_ = true;
  return absl::OkStatus();
}

const char* Decoder::kv_dtype() const {
  if (!impl_->kv_dtype_set_) return "f32";
  return impl_->kv_dtype_ == torch::kHalf ? "f16" : "q8_0";
}

torch::Tensor Decoder::Embed(const torch::Tensor& tokens) { return impl_->Embed(tokens); }

torch::Tensor Decoder::RunLayers(const torch::Tensor& hidden, KvCache& cache, int64_t start,
                                 int first, int last) {
  TORCH_CHECK(0 <= first && first <= last && last <= impl_->arch_.num_layers, "RunLayers: layers [",
              first, ", ", last, ") of ", impl_->arch_.num_layers);
  CheckCapacity(cache, start, hidden.size(1));
  return impl_->RunLayers(hidden, start, first, last, &cache);
}

torch::Tensor Decoder::Head(const torch::Tensor& hidden) { return impl_->Head(hidden); }

std::vector<std::pair<std::string, torch::Tensor>> Decoder::NamedTensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : impl_->named_parameters(/*recurse=*/true)) {
    out.emplace_back(item.key(), item.value());
  }
  return out;
}

std::vector<torch::Tensor> Decoder::Parameters() const { return impl_->parameters(); }

std::vector<torch::Tensor> Decoder::DecodeMatrices() const {
  std::vector<torch::Tensor> out;
  for (const auto& [name, t] : NamedTensors()) {
    if (t.dim() != 2) continue;  // norms, biases (quantized blocks are 3-D)
    if (name == "model.embed_tokens.weight" && !arch().tie_embeddings) continue;  // rows only
    out.push_back(t);
  }
  return out;
}

absl::StatusOr<ThreadPoolTuning> TuneDecodeThreadPool(Decoder& decoder, int64_t keys) {
  if (keys < 0) return absl::InvalidArgumentError(absl::StrCat("keys ", keys, " < 0"));
  try {
    torch::NoGradGuard no_grad;
    KvCache cache = decoder.NewCache(1, keys + 1);
    cache.SetLength(keys);
    const torch::Tensor token = torch::ones({1, 1}, torch::kLong);
    return TuneThreadPool([&] {
      decoder.ForwardCached(token, cache, /*last_only=*/true);
      cache.SetLength(keys);
    });
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("timing the thread pools on a decode step: ", e.what()));
  }
}

std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedTensorShapes(const Arch& a) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({"model.embed_tokens.weight", {a.vocab_size, a.d_model}});
  for (int i = 0; i < a.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    if (a.attention[i] != Attention::kSkip) {
      out.push_back({p + "input_layernorm.weight", {a.d_model}});
      // Qwen2's biases follow their matrices (the modules' parameter order).
      out.push_back({p + "self_attn.q_proj.weight", {a.q_width(), a.d_model}});
      if (a.qkv_bias) out.push_back({p + "self_attn.q_proj.bias", {a.q_width()}});
      out.push_back({p + "self_attn.k_proj.weight", {a.kv_width(), a.d_model}});
      if (a.qkv_bias) out.push_back({p + "self_attn.k_proj.bias", {a.kv_width()}});
      if (a.kv_cache == KvLayout::kSlim) {
        out.push_back({p + "self_attn.kv_proj.weight", {a.kv_width(), a.kv_width()}});
      } else {
        out.push_back({p + "self_attn.v_proj.weight", {a.kv_width(), a.d_model}});
        if (a.qkv_bias) out.push_back({p + "self_attn.v_proj.bias", {a.kv_width()}});
      }
      out.push_back({p + "self_attn.o_proj.weight", {a.d_model, a.q_width()}});
      if (a.qk_norm) {
        out.push_back({p + "self_attn.q_norm.weight", {a.head_dim}});
        out.push_back({p + "self_attn.k_norm.weight", {a.head_dim}});
      }
    }
    // Llama: post_attention_layernorm is the MLP's input norm. Gemma: it
    // normalises attention's output (absent without attention), and the
    // MLP has its own norms before and after.
    if (a.gemma && a.attention[i] != Attention::kSkip) {
      out.push_back({p + "post_attention_layernorm.weight", {a.d_model}});
    }
    out.push_back(
        {p + (a.gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"),
         {a.d_model}});
    out.push_back({p + "mlp.gate_proj.weight", {a.d_ffn, a.d_model}});
    out.push_back({p + "mlp.up_proj.weight", {a.d_ffn, a.d_model}});
    out.push_back({p + "mlp.down_proj.weight", {a.d_model, a.d_ffn}});
    if (a.gemma) out.push_back({p + "post_feedforward_layernorm.weight", {a.d_model}});
  }
  out.push_back({"model.norm.weight", {a.d_model}});
  if (!a.tie_embeddings) out.push_back({"lm_head.weight", {a.vocab_size, a.d_model}});
  return out;
}

namespace {

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "model.layers.N.<from>..." -> "model.layers.N.<to>..."; others unchanged.
std::string ReplaceLayerPart(const std::string& name, std::string_view from, std::string_view to) {
  constexpr std::string_view kLayers = "model.layers.";
  if (name.compare(0, kLayers.size(), kLayers) != 0) return name;
  const size_t dot = name.find('.', kLayers.size());
  if (dot == std::string::npos || name.compare(dot + 1, from.size(), from) != 0) return name;
  return name.substr(0, dot + 1) + std::string(to) + name.substr(dot + 1 + from.size());
}

}  // namespace

std::string FileTensorName(const Arch& arch, const std::string& name) {
  return arch.llama4 ? ReplaceLayerPart(name, "mlp.", "feed_forward.") : name;
}

std::string DecoderTensorName(const Arch& arch, const std::string& name) {
  return arch.llama4 ? ReplaceLayerPart(name, "feed_forward.", "mlp.") : name;
}

bool RopeRowsInterleavedInFile(const Arch& arch, const std::string& name) {
  return arch.llama4 &&
         (EndsWith(name, "self_attn.q_proj.weight") || EndsWith(name, "self_attn.k_proj.weight"));
}

torch::Tensor InterleaveRopeRows(const torch::Tensor& w, int64_t head_dim) {
  const int64_t rows = w.size(0), cols = w.size(1);
  return w.reshape({rows / head_dim, 2, head_dim / 2, cols}).transpose(1, 2).reshape({rows, cols});
}

torch::Tensor HalfSplitRopeRows(const torch::Tensor& w, int64_t head_dim) {
  const int64_t rows = w.size(0), cols = w.size(1);
  return w.reshape({rows / head_dim, head_dim / 2, 2, cols}).transpose(1, 2).reshape({rows, cols});
}

bool HeldAsOnePlus(const Arch& arch, const std::string& name) {
  constexpr std::string_view kSuffix = "norm.weight";
  return arch.gemma && name.size() >= kSuffix.size() &&
         name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

}  // namespace hilnas
