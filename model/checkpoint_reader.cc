#include "model/checkpoint_reader.h"

#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/checkpoint_files.h"
#include "model/hf_config.h"
#include "util/fnv.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using json = nlohmann::json;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& dir) {
  std::unique_ptr<CheckpointReader> r(new CheckpointReader());
  r->dir_ = dir;
  const std::string config = ConfigFileName(dir);
  HILNAS_RETURN_IF_ERROR(ReadFileToString(config, &r->config_text_));
  HILNAS_ASSIGN_OR_RETURN(r->arch_, ParseConfigJson(r->config_text_, config));
  std::error_code ec;
  r->sharded_ = std::filesystem::exists(ShardIndexFileName(dir), ec);
  if (r->sharded_) {
    HILNAS_RETURN_IF_ERROR(r->ReadIndex());
  } else {
    HILNAS_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(WeightsFileName(dir)));
    r->files_.push_back(std::move(f));
  }
  std::set<std::string> dtypes;
  for (const SafetensorsFile& f : r->files_) {
    for (const auto& e : f.entries()) dtypes.insert(e.dtype);
  }
  if (dtypes.size() == 1 && *dtypes.begin() == "BF16") r->stored_dtype_ = torch::kBFloat16;
  for (const char* name : kTokenizerFiles) {
    if (std::filesystem::is_regular_file(CheckpointFile(dir, name), ec)) {
      r->tokenizer_files_.push_back(name);
    }
  }
  return r;
}

// model.safetensors.index.json: its shards in reading order (sorted), each
// name checked to stay beside the index, each header checked against it.
absl::Status CheckpointReader::ReadIndex() {
  const std::string index_path = ShardIndexFileName(dir_);
  HILNAS_RETURN_IF_ERROR(ReadFileToString(index_path, &index_text_));
  const json index = json::parse(index_text_, nullptr, /*allow_exceptions=*/false);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": want an object with a \"weight_map\" object"));
  }
  std::set<std::string> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    const std::string file = it.value().is_string() ? it.value().get<std::string>() : "";
    // A shard is a file beside the index, never a path elsewhere.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map[\"", it.key(),
                                                     "\"] ", it.value().dump(),
                                                     " is not a file name beside the index"));
    }
    shard_of_[it.key()] = file;
    shards.insert(file);
  }
  std::set<std::string> seen;
  for (const std::string& shard : shards) {
    const std::string shard_path = dir_ + "/" + shard;
    HILNAS_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(shard_path));
    for (const auto& e : f.entries()) {
      auto it = shard_of_.find(e.name);
      if (it == shard_of_.end() || it->second != shard) {
        return absl::InvalidArgumentError(
            absl::StrCat(shard_path, ": tensor ", e.name,
                         it == shard_of_.end() ? " is not in the index's weight_map"
                                               : " is indexed in " + it->second + " instead"));
      }
      seen.insert(e.name);
    }
    files_.push_back(std::move(f));
  }
  for (const auto& [name, shard] : shard_of_) {
    if (!seen.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir_, "/", shard, ": missing tensor ", name, " (the index names it there)"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> CheckpointReader::weight_files() const {
  std::vector<std::string> out;
  for (const SafetensorsFile& f : files_) {
    out.push_back(std::filesystem::path(f.path()).filename().string());
  }
  return out;
}

int64_t CheckpointReader::WeightBytes(torch::Dtype dtype) const {
  const int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t total = 0;
  for (const SafetensorsFile& f : files_) {
    for (const auto& e : f.entries()) {
      int64_t n = bytes;
      for (int64_t d : e.shape) n *= d;
      total += n;
    }
  }
  return total;
}

// The fingerprint's hash starts with the config and the shard index, then
// goes on over every weights file's bytes in order.
uint64_t CheckpointReader::MetadataHash() const {
  uint64_t h = Fnv1a(config_text_.data(), config_text_.size());
  if (sharded_) h = Fnv1a(index_text_.data(), index_text_.size(), h);
  return h;
}

absl::Status CheckpointReader::ForEachTensor(const TensorSink& sink) {
  return ForEachTensorRows([&](const std::string& name, const std::vector<int64_t>&, int64_t,
                               torch::Tensor t) { return sink(name, std::move(t)); },
                           std::numeric_limits<int64_t>::max());
}

absl::Status CheckpointReader::ForEachTensorRows(const RowBlockSink& sink, int64_t block_bytes) {
  uint64_t h = MetadataHash();
  // Tensors leave in the decoder's form (decoder.h, FileTensorName): a
  // Llama 4 file's names mapped, and its q/k rows, gathered whole (one
  // projection matrix), reordered per head.
  std::map<std::string, std::vector<torch::Tensor>> gathering;
  const RowBlockSink to_decoder = [&](const std::string& file_name,
                                      const std::vector<int64_t>& shape, int64_t row0,
                                      torch::Tensor rows) -> absl::Status {
    const std::string name = DecoderTensorName(arch_, file_name);
    const bool reorder = RopeRowsInterleavedInFile(arch_, name) && shape.size() == 2 &&
                         arch_.head_dim > 0 && shape[0] % arch_.head_dim == 0;
    if (!reorder) return sink(name, shape, row0, std::move(rows));
    std::vector<torch::Tensor>& parts = gathering[name];
    parts.push_back(std::move(rows));
    if (row0 + parts.back().size(0) < shape[0]) return absl::OkStatus();
    torch::Tensor whole = torch::cat(parts, 0);
    gathering.erase(name);
    return sink(name, shape, 0, HalfSplitRopeRows(whole, arch_.head_dim));
  };
  for (SafetensorsFile& f : files_) {
    HILNAS_RETURN_IF_ERROR(f.ForEachRows(to_decoder, block_bytes, &h));
  }
  fingerprint_ = absl::StrFormat("%016x", h);  // every byte was read, in order
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, torch::Tensor>> CheckpointReader::ReadTensors() {
  std::map<std::string, torch::Tensor> all;
  HILNAS_RETURN_IF_ERROR(ForEachTensor([&](const std::string& name, torch::Tensor t) {
    all.emplace(name, std::move(t));
    return absl::OkStatus();
  }));
  return all;
}

absl::StatusOr<std::string> CheckpointReader::Fingerprint() {
  if (fingerprint_.has_value()) return *fingerprint_;
  uint64_t h = MetadataHash();
  for (SafetensorsFile& f : files_) HILNAS_RETURN_IF_ERROR(f.Hash(&h));
  fingerprint_ = absl::StrFormat("%016x", h);
  return *fingerprint_;
}

namespace {

// Blocks of rows a loader reads at a time: one f32 matrix of a 128K-token
// vocabulary is 1 GB, its Q4_0 form 0.14 GB.
constexpr int64_t kLoadBlockBytes = int64_t{16} << 20;

// `h` continued over a block's bits in `dtype`: a tied checkpoint's stored
// head is compared with its embedding this way, block by block (both split
// alike: RowsPerBlock), so neither is held (the embedding is quantized as
// it arrives).
size_t BitsHash(size_t h, const torch::Tensor& rows, torch::Dtype dtype) {
  const torch::Tensor c = rows.to(dtype).contiguous();
  const size_t block = std::hash<std::string_view>{}(
      std::string_view(static_cast<const char*>(c.data_ptr()), c.nbytes()));
  return h * 1000003 ^ block;
}

}  // namespace

absl::StatusOr<Decoder> CheckpointReader::Load(torch::Dtype dtype, absl::string_view weight_dtype) {
  const Arch& arch = arch_;
  const std::string st_path = sharded_ ? dir_ : WeightsFileName(dir_);
  const auto expected_list = ExpectedTensorShapes(arch);
  const std::map<std::string, std::vector<int64_t>> expected(expected_list.begin(),
                                                             expected_list.end());
  // Tensors stream from the file(s) into the model a block of rows at a
  // time: the peak is the model in `dtype` (or as `weight_dtype` stores
  // it) plus one block, not the file and the model side by side.
  HILNAS_ASSIGN_OR_RETURN(Decoder decoder, Decoder::CreateForLoading(arch, dtype, weight_dtype));
  HILNAS_ASSIGN_OR_RETURN(const Decoder::ParameterSetter set, decoder.SetterFor(weight_dtype));
  std::map<std::string, torch::Tensor> params;
  for (auto& [name, param] : decoder.NamedTensors()) params.emplace(name, param);
  std::set<std::string> loaded;
  // Some writers store a tied head too: its bits and the embedding's.
  bool tied_head = false;
  for (const SafetensorsFile& f : files_) {
    for (const auto& e : f.entries())
      tied_head |= arch.tie_embeddings && e.name == "lm_head.weight";
  }
  size_t head_bits = 0, embedding_bits = 0;
  try {
    torch::NoGradGuard no_grad;
    HILNAS_RETURN_IF_ERROR(ForEachTensorRows(
        [&](const std::string& name, const std::vector<int64_t>& got, int64_t row0,
            torch::Tensor rows) -> absl::Status {
          if (tied_head && name == "lm_head.weight") {
            head_bits = BitsHash(head_bits, rows, dtype);
            return absl::OkStatus();
          }
          auto it = expected.find(name);
          if (it == expected.end()) {
            return absl::InvalidArgumentError(absl::StrCat(st_path, ": unexpected tensor ", name,
                                                           " (not implied by config.json)"));
          }
          if (got != it->second) {
            return absl::InvalidArgumentError(
                absl::StrCat(st_path, ": tensor ", name, " has shape ", ShapeString(got),
                             ", config.json implies ", ShapeString(it->second)));
          }
          if (tied_head && name == "model.embed_tokens.weight") {
            embedding_bits = BitsHash(embedding_bits, rows, dtype);
          }
          if (HeldAsOnePlus(arch, name)) rows = rows.to(torch::kFloat) + 1;  // Gemma's 1 + w
          set(params.at(name), rows, row0);
          loaded.insert(name);
          return absl::OkStatus();
        },
        kLoadBlockBytes));
    for (const auto& [name, shape] : expected_list) {
      if (!loaded.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat(st_path, ": missing tensor ", name));
      }
    }
    // Accept a stored tied head only when it is the embedding, bit for bit.
    if (tied_head && head_bits != embedding_bits) {
      return absl::InvalidArgumentError(
          absl::StrCat(st_path,
                       ": lm_head.weight differs from model.embed_tokens.weight but config.json "
                       "says tie_word_embeddings"));
    }
    decoder.FinishLoading();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(st_path, ": ", e.what_without_backtrace()));
  }
  return decoder;
}

}  // namespace hilnas
