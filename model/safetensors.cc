#include "model/safetensors.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/files.h"
#include "util/fnv.h"
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

// One header entry, every field checked against the buffer's size.
absl::StatusOr<SafetensorsFile::Entry> ParseEntry(const std::string& path, const std::string& name,
                                                  const json& v, int64_t data_size) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ": tensor ", name, ": ", why));
  };
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
      !v.contains("data_offsets")) {
    return bad("entry needs dtype, shape and data_offsets");
  }
  if (!v["dtype"].is_string()) return bad("dtype is not a string");
  const DtypeInfo* dtype = FindDtype(v["dtype"].get<std::string>());
  if (dtype == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", name, ": dtype ",
                                                   v["dtype"].dump(),
                                                   " is not supported (F32, F16, BF16, F64)"));
  }
  SafetensorsFile::Entry e{name, dtype->name, dtype->torch_dtype, {}, 0, 0};
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
  if (e.end - e.begin != numel * dtype->bytes) {
    return bad(absl::StrCat("data_offsets span ", e.end - e.begin, " bytes but ", dtype->name, " ",
                            ShapeString(e.shape), " needs ", numel * dtype->bytes));
  }
  if (e.end > data_size) {
    return bad(absl::StrCat("data ends at byte ", e.end, " past the ", data_size,
                            "-byte buffer (file truncated)"));
  }
  return e;
}

// The entries in file order, covering the data buffer with no hole and no
// overlap.
absl::Status CheckCoverage(const std::string& path, std::vector<SafetensorsFile::Entry>& entries,
                           int64_t data_size) {
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  int64_t expect = 0;
  for (const auto& e : entries) {
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
  return absl::OkStatus();
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

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  HILNAS_RETURN_IF_ERROR(CheckRegularFile(path));
  SafetensorsFile f;
  f.path_ = path;
  std::ifstream& in = f.in_;
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
  f.head_.assign(reinterpret_cast<const char*>(len_bytes), 8);
  f.head_.resize(8 + header_len);
  in.read(f.head_.data() + 8, static_cast<std::streamsize>(header_len));
  json header;
  try {
    header = json::parse(f.head_.begin() + 8, f.head_.end());
  } catch (const json::exception& e) {  // parse errors and number overflow (1e999)
    return absl::DataLossError(absl::StrCat(path, ": header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": header is not an object"));
  }
  f.data_start_ = 8 + static_cast<int64_t>(header_len);
  f.data_size_ = file_size - f.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    HILNAS_ASSIGN_OR_RETURN(Entry e, ParseEntry(path, it.key(), it.value(), f.data_size_));
    f.entries_.push_back(std::move(e));
  }
  HILNAS_RETURN_IF_ERROR(CheckCoverage(path, f.entries_, f.data_size_));
  return f;
}

int64_t RowsPerBlock(const std::vector<int64_t>& shape, int64_t block_bytes) {
  if (shape.size() < 2) return 1;
  int64_t row = 4;  // bytes of one row in f32 (Open checked the sizes)
  for (size_t i = 1; i < shape.size(); ++i) row *= shape[i];
  return std::max<int64_t>(1, block_bytes / std::max<int64_t>(row, 1));
}

absl::Status SafetensorsFile::ForEach(const TensorSink& sink, uint64_t* hash) {
  return ForEachRows([&](const std::string& name, const std::vector<int64_t>&, int64_t,
                         torch::Tensor t) { return sink(name, std::move(t)); },
                     std::numeric_limits<int64_t>::max(), hash);
}

absl::Status SafetensorsFile::ForEachRows(const RowBlockSink& sink, int64_t block_bytes,
                                          uint64_t* hash) {
  if (hash != nullptr) *hash = Fnv1a(head_.data(), head_.size(), *hash);
  in_.clear();
  try {
    for (const Entry& e : entries_) {
      // A matrix (or more) in blocks of rows, anything else whole; a
      // tensor of 0 rows is one empty block.
      const bool blocked = e.shape.size() >= 2;
      const int64_t rows = blocked ? e.shape[0] : 1;
      const int64_t step = blocked ? std::min(rows, RowsPerBlock(e.shape, block_bytes)) : 1;
      const int64_t row_bytes = rows > 0 ? (e.end - e.begin) / rows : 0;
      in_.seekg(data_start_ + e.begin);
      int64_t r0 = 0;
      do {
        std::vector<int64_t> shape = e.shape;
        if (blocked) shape[0] = std::min(step, rows - r0);
        const int64_t n = blocked ? shape[0] * row_bytes : e.end - e.begin;
        torch::Tensor t = torch::empty(shape, e.torch_dtype);
        in_.read(static_cast<char*>(t.data_ptr()), n);
        if (!in_) {
          return absl::DataLossError(absl::StrCat(path_, ": tensor ", e.name, ": read failed"));
        }
        if (hash != nullptr) *hash = Fnv1a(t.data_ptr(), static_cast<size_t>(n), *hash);
        HILNAS_RETURN_IF_ERROR(sink(e.name, e.shape, r0, std::move(t)));
        r0 += step;
      } while (r0 < rows);
    }
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat(path_, ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status SafetensorsFile::Hash(uint64_t* hash) {
  in_.clear();
  in_.seekg(0);
  std::vector<char> buf(1 << 20);
  int64_t left = data_start_ + data_size_;
  while (left > 0) {
    const int64_t n = std::min<int64_t>(left, static_cast<int64_t>(buf.size()));
    in_.read(buf.data(), n);
    if (!in_) return absl::DataLossError(absl::StrCat(path_, ": read failed while hashing"));
    *hash = Fnv1a(buf.data(), static_cast<size_t>(n), *hash);
    left -= n;
  }
  return absl::OkStatus();
}

absl::Status ForEachSafetensor(const std::string& path, const TensorSink& sink) {
  HILNAS_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  return file.ForEach(sink);
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadSafetensors(const std::string& path) {
  std::map<std::string, torch::Tensor> out;
  HILNAS_RETURN_IF_ERROR(ForEachSafetensor(path, [&](const std::string& name, torch::Tensor t) {
    out.emplace(name, std::move(t));
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace hilnas
