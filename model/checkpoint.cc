#include "model/checkpoint.h"

#include <cmath>
#include <limits>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/files.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using json = nlohmann::json;

struct DtypeInfo {
  const char* name;
  torch::Dtype torch_dtype;
  int64_t bytes;
};

const DtypeInfo* FindDtype(const std::string& name) {
  static const DtypeInfo kInfos[] = {{"F32", torch::kFloat, 4},
                                     {"F16", torch::kHalf, 2},
                                     {"BF16", torch::kBFloat16, 2},
                                     {"F64", torch::kDouble, 8}};
  for (const auto& i : kInfos) {
    if (name == i.name) return &i;
  }
  return nullptr;
}

const char* SafetensorsName(StorageDtype d) {
  switch (d) {
    case StorageDtype::kF32:
      return "F32";
    case StorageDtype::kF16:
      return "F16";
    case StorageDtype::kBF16:
      return "BF16";
  }
  return "F32";
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

torch::Dtype TorchDtypeOf(StorageDtype dtype) {
  return FindDtype(SafetensorsName(dtype))->torch_dtype;
}

absl::StatusOr<StorageDtype> ParseStorageDtype(const std::string& name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "f32" || n == "float32") return StorageDtype::kF32;
  if (n == "f16" || n == "float16") return StorageDtype::kF16;
  if (n == "bf16" || n == "bfloat16") return StorageDtype::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("storage dtype \"", name, "\" is not one of f32, f16, bf16"));
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              StorageDtype dtype) {
  const DtypeInfo* info = FindDtype(SafetensorsName(dtype));
  try {
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}, {"writer", "hilnas"}};
    std::vector<torch::Tensor> data;
    int64_t offset = 0;
    for (const auto& [name, t] : tensors) {
      torch::Tensor c = t.detach().to(torch::kCPU).to(info->torch_dtype).contiguous();
      const int64_t n = c.numel() * info->bytes;
      header[name] = {{"dtype", info->name},
                      {"shape", std::vector<int64_t>(c.sizes().begin(), c.sizes().end())},
                      {"data_offsets", {offset, offset + n}}};
      offset += n;
      data.push_back(std::move(c));
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // align the buffer, as the spec allows
    std::string out;
    out.reserve(8 + text.size() + offset);
    uint64_t len = text.size();
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
    out += text;
    for (const auto& c : data) {
      out.append(static_cast<const char*>(c.data_ptr()), c.numel() * info->bytes);
    }
    return WriteFileAtomically(path, out);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(path, ": ", e.what_without_backtrace()));
  }
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadSafetensors(const std::string& path) {
  std::map<std::string, torch::Tensor> out;
  HILNAS_RETURN_IF_ERROR(ForEachSafetensor(path, [&](const std::string& name, torch::Tensor t) {
    out.emplace(name, std::move(t));
    return absl::OkStatus();
  }));
  return out;
}

namespace {

// A safetensors file's JSON header and where its data buffer lies, every
// size checked before anything is allocated.
struct SafetensorsHeader {
  json header;
  int64_t data_start = 0, data_size = 0;
};
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path,
                                                        std::ifstream& in) {
  HILNAS_RETURN_IF_ERROR(CheckRegularFile(path));
  in.open(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open for reading"));
  in.seekg(0, std::ios::end);
  const int64_t file_size = in.tellg();
  in.seekg(0);
  if (file_size < 8) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", file_size,
                                            " bytes, shorter than the 8-byte header length"));
  }
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  // No real header comes near a gibibyte (the format's own readers stop at 100 MB).
  if (header_len > static_cast<uint64_t>(file_size - 8) || header_len > (uint64_t{1} << 30)) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", header_len,
                                            " exceeds the file's remaining ", file_size - 8,
                                            " bytes (truncated or not safetensors)"));
  }
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  SafetensorsHeader h;
  try {
    h.header = json::parse(text);
  } catch (const json::exception& e) {  // parse errors and number overflow (1e999)
    return absl::DataLossError(absl::StrCat(path, ": header is not valid JSON: ", e.what()));
  }
  if (!h.header.is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": header is not an object"));
  }
  h.data_start = 8 + static_cast<int64_t>(header_len);
  h.data_size = file_size - h.data_start;
  return h;
}

}  // namespace

absl::Status ForEachSafetensor(const std::string& path, const TensorSink& sink) {
  std::ifstream in;
  HILNAS_ASSIGN_OR_RETURN(SafetensorsHeader parsed, ReadSafetensorsHeader(path, in));
  const json& header = parsed.header;
  const int64_t data_start = parsed.data_start;
  const int64_t data_size = parsed.data_size;

  struct Entry {
    std::string name;
    const DtypeInfo* dtype;
    std::vector<int64_t> shape;
    int64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& v = it.value();
    auto bad = [&](const std::string& why) {
      return absl::DataLossError(absl::StrCat(path, ": tensor ", it.key(), ": ", why));
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      return bad("entry needs dtype, shape and data_offsets");
    }
    if (!v["dtype"].is_string()) return bad("dtype is not a string");
    Entry e{it.key(), FindDtype(v["dtype"].get<std::string>()), {}, 0, 0};
    if (e.dtype == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", it.key(), ": dtype ",
                                                     v["dtype"].dump(),
                                                     " is not supported (F32, F16, BF16, F64)"));
    }
    int64_t numel = 1;
    if (!v["shape"].is_array()) return bad("shape is not an array");
    for (const json& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("shape has a bad dimension");
      e.shape.push_back(d.get<int64_t>());
      numel *= e.shape.back();
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_integer() ||
        !off[1].is_number_integer()) {
      return bad("data_offsets is not [begin, end]");
    }
    e.begin = off[0].get<int64_t>();
    e.end = off[1].get<int64_t>();
    if (e.begin < 0 || e.end < e.begin) return bad("data_offsets are not increasing");
    if (e.end - e.begin != numel * e.dtype->bytes) {
      return bad(absl::StrCat("data_offsets span ", e.end - e.begin, " bytes but ", e.dtype->name,
                              " ", ShapeString(e.shape), " needs ", numel * e.dtype->bytes));
    }
    if (e.end > data_size) {
      return bad(absl::StrCat("data ends at byte ", e.end, " past the ", data_size,
                              "-byte buffer (file truncated)"));
    }
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  int64_t expect = 0;
  for (const Entry& e : entries) {
    if (e.begin != expect) {
      return absl::DataLossError(absl::StrCat(path, ": tensor ", e.name, " starts at byte ",
                                              e.begin, ", expected ", expect,
                                              e.begin < expect ? " (overlap)" : " (hole)"));
    }
    expect = e.end;
  }
  if (expect != data_size) {
    return absl::DataLossError(
        absl::StrCat(path, ": data buffer has ", data_size, " bytes but tensors cover ", expect));
  }
  try {
    for (const Entry& e : entries) {
      torch::Tensor t = torch::empty(e.shape, e.dtype->torch_dtype);
      in.seekg(data_start + e.begin);
      in.read(static_cast<char*>(t.data_ptr()), e.end - e.begin);
      if (!in) return absl::DataLossError(absl::StrCat(path, ": tensor ", e.name, ": read failed"));
      HILNAS_RETURN_IF_ERROR(sink(e.name, std::move(t)));
    }
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status CheckFiniteWeights(const std::string& safetensors_path) {
  HILNAS_ASSIGN_OR_RETURN(auto tensors, std::filesystem::is_directory(safetensors_path)
                                            ? ReadCheckpointTensors(safetensors_path)
                                            : ReadSafetensors(safetensors_path));
  std::vector<std::string> bad;
  int64_t total = 0;
  try {
    for (const auto& [name, t] : tensors) {
      const int64_t n = torch::logical_not(torch::isfinite(t)).sum().item<int64_t>();
      if (n == 0) continue;
      total += n;
      if (bad.size() < 8) bad.push_back(absl::StrCat(name, " (", n, " of ", t.numel(), ")"));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(safetensors_path, ": ", e.what_without_backtrace()));
  }
  if (total == 0) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(safetensors_path, ": ", total, " NaN or Inf weights, in ",
                                          absl::StrJoin(bad, ", "),
                                          bad.size() == 8 ? ", ..." : ""));
}

absl::Status SaveCheckpoint(const Decoder& decoder, const std::string& dir, StorageDtype dtype) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  HILNAS_RETURN_IF_ERROR(
      WriteSafetensors(dir + "/model.safetensors", decoder.NamedTensors(), dtype));
  return WriteConfigJson(decoder.arch(), dir + "/config.json");
}

namespace {

// model.safetensors.index.json: its shard files in reading order and the
// shard each tensor is in, every name checked to stay beside the index.
struct ShardIndex {
  std::vector<std::string> shards;
  std::map<std::string, std::string> shard_of;  // tensor -> shard file
};
absl::StatusOr<ShardIndex> ReadShardIndex(const std::string& index_path) {
  std::string text;
  HILNAS_RETURN_IF_ERROR(ReadFileToString(index_path, &text));
  const json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": want an object with a \"weight_map\" object"));
  }
  ShardIndex out;
  std::set<std::string> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    const std::string file = it.value().is_string() ? it.value().get<std::string>() : "";
    // A shard is a file beside the index, never a path elsewhere.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map[\"", it.key(),
                                                     "\"] ", it.value().dump(),
                                                     " is not a file name beside the index"));
    }
    out.shard_of[it.key()] = file;
    shards.insert(file);
  }
  out.shards.assign(shards.begin(), shards.end());
  return out;
}

}  // namespace

absl::Status ForEachCheckpointTensor(const std::string& dir, const TensorSink& sink) {
  const std::string index_path = dir + "/" + kShardIndexFile;
  if (!std::filesystem::exists(index_path)) {
    return ForEachSafetensor(dir + "/model.safetensors", sink);
  }
  HILNAS_ASSIGN_OR_RETURN(const ShardIndex index, ReadShardIndex(index_path));
  const std::map<std::string, std::string>& shard_of = index.shard_of;
  std::set<std::string> seen;
  for (const std::string& shard : index.shards) {
    const std::string shard_path = dir + "/" + shard;
    HILNAS_RETURN_IF_ERROR(ForEachSafetensor(
        shard_path, [&](const std::string& name, torch::Tensor t) -> absl::Status {
          auto it = shard_of.find(name);
          if (it == shard_of.end() || it->second != shard) {
            return absl::InvalidArgumentError(
                absl::StrCat(shard_path, ": tensor ", name,
                             it == shard_of.end() ? " is not in the index's weight_map"
                                                  : " is indexed in " + it->second + " instead"));
          }
          seen.insert(name);
          return sink(name, std::move(t));
        }));
  }
  for (const auto& [name, shard] : shard_of) {
    if (!seen.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/", shard, ": missing tensor ", name, " (the index names it there)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ShardFiles(const std::string& dir) {
  const std::string index_path = dir + "/" + kShardIndexFile;
  if (!std::filesystem::exists(index_path)) return std::vector<std::string>{"model.safetensors"};
  HILNAS_ASSIGN_OR_RETURN(ShardIndex index, ReadShardIndex(index_path));
  return std::move(index.shards);
}

absl::StatusOr<torch::Dtype> CheckpointStoredDtype(const std::string& dir) {
  HILNAS_ASSIGN_OR_RETURN(std::vector<std::string> files, ShardFiles(dir));
  std::set<std::string> dtypes;
  for (const std::string& file : files) {
    std::ifstream in;
    HILNAS_ASSIGN_OR_RETURN(SafetensorsHeader parsed, ReadSafetensorsHeader(dir + "/" + file, in));
    const json& header = parsed.header;
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() != "__metadata__" && it.value().is_object() && it.value().contains("dtype")) {
        dtypes.insert(it.value()["dtype"].dump());
      }
    }
  }
  if (dtypes.size() == 1 && *dtypes.begin() == "\"BF16\"") return torch::kBFloat16;
  return torch::kFloat;
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadCheckpointTensors(const std::string& dir) {
  std::map<std::string, torch::Tensor> all;
  HILNAS_RETURN_IF_ERROR(
      ForEachCheckpointTensor(dir, [&](const std::string& name, torch::Tensor t) {
        all.emplace(name, std::move(t));
        return absl::OkStatus();
      }));
  return all;
}

absl::StatusOr<Decoder> LoadCheckpoint(const std::string& dir, torch::Dtype dtype) {
  HILNAS_ASSIGN_OR_RETURN(Arch arch, ReadConfigJson(dir + "/config.json"));
  const std::string st_path =
      std::filesystem::exists(dir + "/" + kShardIndexFile) ? dir : dir + "/model.safetensors";
  const auto expected_list = ExpectedTensorShapes(arch);
  const std::map<std::string, std::vector<int64_t>> expected(expected_list.begin(),
                                                             expected_list.end());
  // Tensors stream from the file(s) into the model one at a time: the peak
  // is the model in `dtype` plus its largest tensor, not the file and the
  // model side by side.
  HILNAS_ASSIGN_OR_RETURN(Decoder decoder, Decoder::CreateForLoading(arch, dtype));
  std::map<std::string, torch::Tensor> params;
  for (auto& [name, param] : decoder.NamedTensors()) params.emplace(name, param);
  std::set<std::string> loaded;
  torch::Tensor tied_head;  // a tied checkpoint's stored head, checked against the embedding
  try {
    torch::NoGradGuard no_grad;
    HILNAS_RETURN_IF_ERROR(
        ForEachCheckpointTensor(dir, [&](const std::string& name, torch::Tensor t) -> absl::Status {
          if (arch.tie_embeddings && name == "lm_head.weight") {
            tied_head = std::move(t);
            return absl::OkStatus();
          }
          auto it = expected.find(name);
          if (it == expected.end()) {
            return absl::InvalidArgumentError(absl::StrCat(st_path, ": unexpected tensor ", name,
                                                           " (not implied by config.json)"));
          }
          const std::vector<int64_t> got(t.sizes().begin(), t.sizes().end());
          if (got != it->second) {
            return absl::InvalidArgumentError(
                absl::StrCat(st_path, ": tensor ", name, " has shape ", ShapeString(got),
                             ", config.json implies ", ShapeString(it->second)));
          }
          params.at(name).copy_(t);  // converts from the stored dtype
          loaded.insert(name);
          return absl::OkStatus();
        }));
    for (const auto& [name, shape] : expected_list) {
      if (!loaded.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat(st_path, ": missing tensor ", name));
      }
    }
    // Some writers store the tied head too; accept it only when it is the
    // embedding, bit for bit.
    if (tied_head.defined() && !tied_head.to(dtype).equal(params.at("model.embed_tokens.weight"))) {
      return absl::InvalidArgumentError(
          absl::StrCat(st_path,
                       ": lm_head.weight differs from model.embed_tokens.weight but config.json "
                       "says tie_word_embeddings"));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(st_path, ": ", e.what_without_backtrace()));
  }
  return decoder;
}

}  // namespace hilnas
