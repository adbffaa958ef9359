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

const char* LayerTypeName(Attention a) {
  switch (a) {
    case Attention::kFull:
      return "full_attention";
    case Attention::kSlidingWindow:
      return "sliding_attention";
    case Attention::kSkip:
      return "skip_attention";
  }
  return "full_attention";
}

// Typed field access that names the file and field on a mismatch.
template <typename T>
absl::StatusOr<T> Field(const json& j, const std::string& path, const char* key,
                        std::optional<T> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing field \"", key, "\""));
  }
  const bool ok = std::is_same_v<T, bool> ? it->is_boolean()
                  : std::is_integral_v<T> ? it->is_number_integer()
                                          : it->is_number();
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": field \"", key, "\" has the wrong type: ", it->dump()));
  }
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Range-checked before narrowing: 4294967552 must not become 256.
    const bool fits =
        it->is_number_unsigned()
            ? it->template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
            : it->template get<int64_t>() >= std::numeric_limits<T>::min() &&
                  it->template get<int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": field \"", key, "\" ", it->dump(),
                                                     " is out of range (at most ",
                                                     std::numeric_limits<T>::max(), ")"));
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(it->template get<double>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field \"", key, "\" ", it->dump(), " is not finite"));
    }
  }
  return it->template get<T>();
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

absl::Status WriteConfigJson(const Arch& a, const std::string& path) {
  // QK-norm is Qwen3's layout; everything else Llama's (docs/checkpoints.md).
  json j = {{"architectures", {a.qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
            {"model_type", a.qk_norm ? "qwen3" : "llama"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"hidden_size", a.d_model},
            {"intermediate_size", a.d_ffn},
            {"num_hidden_layers", a.num_layers},
            {"num_attention_heads", a.num_heads},
            {"num_key_value_heads", a.num_kv_heads},
            {"head_dim", a.head_dim},
            {"vocab_size", a.vocab_size},
            {"rms_norm_eps", a.norm_eps},
            {"rope_theta", a.rope_theta},
            {"tie_word_embeddings", a.tie_embeddings},
            {"hidden_act", "silu"},
            {"qk_norm", a.qk_norm},
            {"sliding_window", a.sliding_window},
            {"kv_cache", a.kv_cache == KvLayout::kSlim ? "slim" : "standard"},
            {"hilnas_name", a.name}};
  json types = json::array();
  for (Attention at : a.attention) types.push_back(LayerTypeName(at));
  j["layer_types"] = types;
  if (const RopeScaling& r = a.rope_scaling; r.kind == RopeScaling::Kind::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", r.factor}};
  } else if (r.kind == RopeScaling::Kind::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
  }
  // KV Prediction: the auxiliary model of a canonical (KVP-C) pair is the
  // checkpoint in the auxiliary/ folder beside this file.
  const KvPredictionSpec& kvp = a.kv_prediction;
  if (kvp.kind == KvPredictionSpec::Kind::kLayerPruned) {
    j["kv_prediction"] = {{"type", "layer_pruned"}, {"ratio", kvp.layer_pruned_ratio}};
  } else if (kvp.kind == KvPredictionSpec::Kind::kCanonical) {
    j["kv_prediction"] = {{"type", "canonical"}, {"auxiliary", "auxiliary"}};
  }
  if (j.contains("kv_prediction") && !kvp.layer_map.empty()) {
    j["kv_prediction"]["layer_map"] = kvp.layer_map;
  }
  return WriteFileAtomically(path, j.dump(2) + "\n");
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

namespace {

// Hugging Face `rope_scaling`: null, "default", "linear" or "llama3" (the
// name in `rope_type`, or `type` in older configs).
absl::StatusOr<RopeScaling> ReadRopeScaling(const json& j, const std::string& path) {
  RopeScaling r;
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return r;
  const json& s = j["rope_scaling"];
  if (!s.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": rope_scaling ", s.dump(), " is not an object"));
  }
  const json type = s.contains("rope_type") ? s["rope_type"] : s.value("type", json("default"));
  const std::string where = absl::StrCat(path, " rope_scaling");
  if (type == "default") return r;
  if (type == "linear") {
    r.kind = RopeScaling::Kind::kLinear;
  } else if (type == "llama3") {
    r.kind = RopeScaling::Kind::kLlama3;
    HILNAS_ASSIGN_OR_RETURN(r.low_freq_factor,
                            Field<double>(s, where, "low_freq_factor", std::nullopt));
    HILNAS_ASSIGN_OR_RETURN(r.high_freq_factor,
                            Field<double>(s, where, "high_freq_factor", std::nullopt));
    // Inside rope_scaling where Hugging Face puts it, else at the top.
    HILNAS_ASSIGN_OR_RETURN(const int top,
                            Field<int>(j, path, "original_max_position_embeddings", 8192));
    HILNAS_ASSIGN_OR_RETURN(r.original_max_position_embeddings,
                            Field<int>(s, where, "original_max_position_embeddings", top));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path, ": rope_scaling.rope_type ", type.dump(),
                                                   " is not supported (llama3, linear)"));
  }
  HILNAS_ASSIGN_OR_RETURN(r.factor, Field<double>(s, where, "factor", std::nullopt));
  return r;
}

}  // namespace

absl::StatusOr<Arch> ReadConfigJson(const std::string& path) {
  std::string text;
  HILNAS_RETURN_IF_ERROR(ReadFileToString(path, &text));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse errors and number overflow (1e999)
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  // The families read as published: Llama (Llama 3.x, MobileLLM, SmolLM)
  // and Qwen3 (QK-norm). Anything they would compute differently is refused
  // by name rather than run wrongly.
  auto refuse = [&](const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", field, " ", why));
  };
  bool qwen3 = false, mobilellm = false;
  if (j.contains("architectures") && !j["architectures"].is_null()) {
    const json& archs = j["architectures"];
    if (!archs.is_array() || archs.size() != 1 || !archs[0].is_string()) {
      return refuse("architectures", absl::StrCat(archs.dump(), " is not one class name"));
    }
    const std::string name = archs[0].get<std::string>();
    qwen3 = name == "Qwen3ForCausalLM";
    mobilellm = name == "MobileLLMForCausalLM";
    if (!qwen3 && !mobilellm && name != "LlamaForCausalLM") {
      return refuse("architectures",
                    absl::StrCat("\"", name,
                                 "\" is not supported (LlamaForCausalLM, Qwen3ForCausalLM, "
                                 "MobileLLMForCausalLM)"));
    }
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (j.contains(bias) && !j[bias].is_null() && j[bias] != false) {
      return refuse(bias, absl::StrCat(j[bias].dump(), ": biased projections are not supported"));
    }
  }
  if (j.contains("hidden_act") && !j["hidden_act"].is_null() && j["hidden_act"] != "silu") {
    return refuse("hidden_act",
                  absl::StrCat(j["hidden_act"].dump(), " is not supported (SwiGLU with silu)"));
  }
  // MobileLLM (Liu et al. 2024): `share_embedding` ties the head to the
  // embedding whatever tie_word_embeddings says; its layer sharing repeats
  // blocks, which hilnas does not run.
  if (mobilellm && j.contains("layer_sharing") && j["layer_sharing"] == true) {
    return refuse("layer_sharing", "true: repeated blocks are not supported");
  }
  if (j.contains("use_sliding_window") && j["use_sliding_window"] == true) {
    return refuse("use_sliding_window",
                  "true: Qwen-style window layers are not supported (layer_types and "
                  "sliding_window say which layers use a window)");
  }
  Arch a;
  HILNAS_ASSIGN_OR_RETURN(a.d_model, Field<int>(j, path, "hidden_size", std::nullopt));
  HILNAS_ASSIGN_OR_RETURN(a.d_ffn, Field<int>(j, path, "intermediate_size", std::nullopt));
  HILNAS_ASSIGN_OR_RETURN(a.num_layers, Field<int>(j, path, "num_hidden_layers", std::nullopt));
  HILNAS_ASSIGN_OR_RETURN(a.num_heads, Field<int>(j, path, "num_attention_heads", std::nullopt));
  HILNAS_ASSIGN_OR_RETURN(a.vocab_size, Field<int>(j, path, "vocab_size", std::nullopt));
  HILNAS_ASSIGN_OR_RETURN(a.num_kv_heads, Field<int>(j, path, "num_key_value_heads", a.num_heads));
  const int derived_head_dim = a.num_heads > 0 ? a.d_model / a.num_heads : 0;
  HILNAS_ASSIGN_OR_RETURN(a.head_dim, Field<int>(j, path, "head_dim", derived_head_dim));
  HILNAS_ASSIGN_OR_RETURN(a.norm_eps, Field<double>(j, path, "rms_norm_eps", 1e-6));
  HILNAS_ASSIGN_OR_RETURN(a.rope_theta, Field<double>(j, path, "rope_theta", 10000.0));
  HILNAS_ASSIGN_OR_RETURN(a.tie_embeddings, Field<bool>(j, path, "tie_word_embeddings", false));
  if (mobilellm) {
    HILNAS_ASSIGN_OR_RETURN(a.tie_embeddings, Field<bool>(j, path, "share_embedding", true));
  }
  HILNAS_ASSIGN_OR_RETURN(a.qk_norm, Field<bool>(j, path, "qk_norm", qwen3));
  if (qwen3 && !a.qk_norm) return refuse("qk_norm", "false: Qwen3 normalises queries and keys");
  HILNAS_ASSIGN_OR_RETURN(a.sliding_window, Field<int>(j, path, "sliding_window", 0));
  HILNAS_ASSIGN_OR_RETURN(a.rope_scaling, ReadRopeScaling(j, path));
  if (j.contains("hilnas_name") && j["hilnas_name"].is_string()) a.name = j["hilnas_name"];
  if (j.contains("kv_cache") && j["kv_cache"] == "slim") a.kv_cache = KvLayout::kSlim;
  if (j.contains("layer_types")) {
    if (!j["layer_types"].is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field \"layer_types\" is not an array"));
    }
    for (size_t i = 0; i < j["layer_types"].size(); ++i) {
      const json& t = j["layer_types"][i];
      if (t == "full_attention")
        a.attention.push_back(Attention::kFull);
      else if (t == "sliding_attention")
        a.attention.push_back(Attention::kSlidingWindow);
      else if (t == "skip_attention")
        a.attention.push_back(Attention::kSkip);
      else {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": layer_types[", i, "] ", t.dump(),
                         " is not full_attention, sliding_attention or skip_attention"));
      }
    }
  } else {
    a.attention.assign(std::max(a.num_layers, 0), Attention::kFull);
  }
  // Qwen3 configs carry a window size they do not use (use_sliding_window false).
  if (qwen3 && std::count(a.attention.begin(), a.attention.end(), Attention::kSlidingWindow) == 0) {
    a.sliding_window = 0;
  }
  if (j.contains("kv_prediction")) {
    const json& k = j["kv_prediction"];
    const std::string type = k.is_object() ? k.value("type", "") : "";
    if (type == "layer_pruned" && k.contains("ratio") && k["ratio"].is_number()) {
      a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
      a.kv_prediction.layer_pruned_ratio = k["ratio"].get<double>();
    } else if (type == "canonical") {
      const std::string aux_path = (std::filesystem::path(path).parent_path() /
                                    k.value("auxiliary", "auxiliary") / "config.json")
                                       .string();
      HILNAS_ASSIGN_OR_RETURN(Arch aux, ReadConfigJson(aux_path));
      a.kv_prediction.kind = KvPredictionSpec::Kind::kCanonical;
      a.kv_prediction.canonical = {aux};
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": field \"kv_prediction\" ", k.dump(),
          " is not {\"type\": \"layer_pruned\", \"ratio\": R} or {\"type\": \"canonical\"}"));
    }
    if (k.contains("layer_map") && k["layer_map"].is_array()) {
      for (const json& v : k["layer_map"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > kMaxLayers) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": kv_prediction.layer_map entry ",
                                                         v.dump(), " is not a layer index"));
        }
        a.kv_prediction.layer_map.push_back(static_cast<int>(v.get<int64_t>()));
      }
    }
  }
  absl::Status valid = ValidateArch(a);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", valid.message()));
  return a;
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
