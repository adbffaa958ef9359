#include "model/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/files.h"

namespace hilnas {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kVersion = 3;
// Bounds no real model comes near; they keep a hostile header from making
// the reader loop or allocate without end before the file-size checks bite.
constexpr uint64_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxNameBytes = 64 * 1024;

int ScalarBytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

const char* TypeName(GgufType t) {
  static const char* kNames[] = {"u8",   "i8",  "u16", "i16", "u32", "i32", "f32",
                                 "bool", "str", "arr", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "?";
}

// Reads little-endian fields from a file, never past its end.
class Reader {
 public:
  Reader(std::ifstream& in, std::string path, uint64_t size)
      : in_(in), path_(std::move(path)), size_(size) {}

  absl::Status Bytes(void* out, uint64_t n, const std::string& what) {
    if (n > size_ - pos_) {
      return absl::DataLossError(absl::StrCat(path_, ": ", what, " at byte ", pos_, " needs ", n,
                                              " bytes; the file ends at ", size_, " (truncated?)"));
    }
    in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
    if (!in_) return absl::DataLossError(absl::StrCat(path_, ": read error at byte ", pos_));
    pos_ += n;
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Scalar(T* out, const std::string& what) {
    return Bytes(out, sizeof(T), what);
  }
  absl::Status String(std::string* out, const std::string& what) {
    uint64_t n = 0;
    if (absl::Status s = Scalar(&n, what + " length"); !s.ok()) return s;
    if (n > size_ - pos_) {
      return absl::DataLossError(absl::StrCat(path_, ": ", what, " says ", n, " bytes but only ",
                                              size_ - pos_, " remain"));
    }
    out->resize(n);
    return Bytes(out->data(), n, what);
  }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const std::string& path() const { return path_; }

 private:
  std::ifstream& in_;
  std::string path_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// One little-endian T from the file into `field` (u, i or f of a value).
template <typename T, typename Field>
absl::Status ReadInto(Reader& r, Field* field, const std::string& what) {
  T x;
  if (absl::Status s = r.Scalar(&x, what); !s.ok()) return s;
  *field = x;
  return absl::OkStatus();
}

absl::Status ReadScalar(Reader& r, GgufType type, GgufValue* v, const std::string& what) {
  v->type = type;
  switch (type) {
    case GgufType::kUint8:
      return ReadInto<uint8_t>(r, &v->u, what);
    case GgufType::kInt8:
      return ReadInto<int8_t>(r, &v->i, what);
    case GgufType::kUint16:
      return ReadInto<uint16_t>(r, &v->u, what);
    case GgufType::kInt16:
      return ReadInto<int16_t>(r, &v->i, what);
    case GgufType::kUint32:
      return ReadInto<uint32_t>(r, &v->u, what);
    case GgufType::kInt32:
      return ReadInto<int32_t>(r, &v->i, what);
    case GgufType::kUint64:
      return ReadInto<uint64_t>(r, &v->u, what);
    case GgufType::kInt64:
      return ReadInto<int64_t>(r, &v->i, what);
    case GgufType::kFloat32:
      return ReadInto<float>(r, &v->f, what);
    case GgufType::kFloat64:
      return ReadInto<double>(r, &v->f, what);
    case GgufType::kBool: {
      uint8_t x;
      if (auto s = r.Scalar(&x, what); !s.ok()) return s;
      if (x > 1) {
        return absl::DataLossError(absl::StrCat(r.path(), ": ", what, ": bool byte ", x));
      }
      v->b = x == 1;
      return absl::OkStatus();
    }
    case GgufType::kString:
      return r.String(&v->s, what);
    case GgufType::kArray:
      break;
  }
  return absl::DataLossError(
      absl::StrCat(r.path(), ": ", what, ": value type ", static_cast<uint32_t>(type)));
}

absl::Status ReadValue(Reader& r, GgufValue* v, const std::string& key) {
  uint32_t type = 0;
  if (auto s = r.Scalar(&type, key + " type"); !s.ok()) return s;
  if (type > static_cast<uint32_t>(GgufType::kFloat64)) {
    return absl::DataLossError(
        absl::StrCat(r.path(), ": metadata \"", key, "\" has unknown value type ", type));
  }
  if (static_cast<GgufType>(type) != GgufType::kArray) {
    return ReadScalar(r, static_cast<GgufType>(type), v, absl::StrCat("metadata \"", key, "\""));
  }
  v->type = GgufType::kArray;
  uint32_t element = 0;
  uint64_t n = 0;
  if (auto s = r.Scalar(&element, key + " element type"); !s.ok()) return s;
  if (element > static_cast<uint32_t>(GgufType::kFloat64) ||
      static_cast<GgufType>(element) == GgufType::kArray) {
    return absl::DataLossError(absl::StrCat(r.path(), ": metadata \"", key,
                                            "\": array of value type ", element,
                                            " (nested arrays are not read)"));
  }
  if (auto s = r.Scalar(&n, key + " array length"); !s.ok()) return s;
  v->array_type = static_cast<GgufType>(element);
  // Every element takes at least one byte (a string at least its 8-byte length).
  const uint64_t min_bytes = v->array_type == GgufType::kString ? 8 : ScalarBytes(v->array_type);
  if (n > r.remaining() / min_bytes) {
    return absl::DataLossError(absl::StrCat(r.path(), ": metadata \"", key, "\" says ", n,
                                            " elements; the file has room for at most ",
                                            r.remaining() / min_bytes));
  }
  v->array.resize(n);
  for (uint64_t k = 0; k < n; ++k) {
    if (auto s = ReadScalar(r, v->array_type, &v->array[k],
                            absl::StrCat("metadata \"", key, "\"[", k, "]"));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Little-endian writing into a string.
template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}
void PutScalar(std::string* out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kUint8:
      Put<uint8_t>(out, static_cast<uint8_t>(v.u));
      break;
    case GgufType::kInt8:
      Put<int8_t>(out, static_cast<int8_t>(v.i));
      break;
    case GgufType::kUint16:
      Put<uint16_t>(out, static_cast<uint16_t>(v.u));
      break;
    case GgufType::kInt16:
      Put<int16_t>(out, static_cast<int16_t>(v.i));
      break;
    case GgufType::kUint32:
      Put<uint32_t>(out, static_cast<uint32_t>(v.u));
      break;
    case GgufType::kInt32:
      Put<int32_t>(out, static_cast<int32_t>(v.i));
      break;
    case GgufType::kUint64:
      Put<uint64_t>(out, v.u);
      break;
    case GgufType::kInt64:
      Put<int64_t>(out, v.i);
      break;
    case GgufType::kFloat32:
      Put<float>(out, static_cast<float>(v.f));
      break;
    case GgufType::kFloat64:
      Put<double>(out, v.f);
      break;
    case GgufType::kBool:
      Put<uint8_t>(out, v.b ? 1 : 0);
      break;
    case GgufType::kString:
      PutString(out, v.s);
      break;
    case GgufType::kArray:
      Put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
      Put<uint64_t>(out, v.array.size());
      for (const GgufValue& e : v.array) PutScalar(out, e);
      break;
  }
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

const char* GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return "f32";
    case GgmlType::kF16:
      return "f16";
    case GgmlType::kBF16:
      return "bf16";
    case GgmlType::kQ4_0:
      return "q4_0";
    case GgmlType::kQ8_0:
      return "q8_0";
  }
  return "?";
}

uint64_t GgmlBytes(GgmlType type, uint64_t elements) {
  switch (type) {
    case GgmlType::kF32:
      return elements * 4;
    case GgmlType::kQ4_0:
      return elements / 32 * 18;
    case GgmlType::kQ8_0:
      return elements / 32 * 34;
    default:
      return elements * 2;
  }
}

GgufValue GgufValue::U32(uint32_t v) {
  GgufValue x;
  x.type = GgufType::kUint32;
  x.u = v;
  return x;
}
GgufValue GgufValue::I32(int32_t v) {
  GgufValue x;
  x.type = GgufType::kInt32;
  x.i = v;
  return x;
}
GgufValue GgufValue::F32(float v) {
  GgufValue x;
  x.type = GgufType::kFloat32;
  x.f = v;
  return x;
}
GgufValue GgufValue::Bool(bool v) {
  GgufValue x;
  x.type = GgufType::kBool;
  x.b = v;
  return x;
}
GgufValue GgufValue::Str(std::string v) {
  GgufValue x;
  x.type = GgufType::kString;
  x.s = std::move(v);
  return x;
}
GgufValue GgufValue::StrArray(std::vector<std::string> v) {
  GgufValue x;
  x.type = GgufType::kArray;
  x.array_type = GgufType::kString;
  for (std::string& s : v) x.array.push_back(Str(std::move(s)));
  return x;
}
GgufValue GgufValue::F32Array(const std::vector<float>& v) {
  GgufValue x;
  x.type = GgufType::kArray;
  x.array_type = GgufType::kFloat32;
  for (float f : v) x.array.push_back(F32(f));
  return x;
}
GgufValue GgufValue::I32Array(const std::vector<int32_t>& v) {
  GgufValue x;
  x.type = GgufType::kArray;
  x.array_type = GgufType::kInt32;
  for (int32_t i : v) x.array.push_back(I32(i));
  return x;
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  switch (type) {
    case GgufType::kFloat32:
      return static_cast<float>(f) == static_cast<float>(o.f);
    case GgufType::kFloat64:
      return f == o.f;
    case GgufType::kBool:
      return b == o.b;
    case GgufType::kString:
      return s == o.s;
    case GgufType::kArray:
      return array_type == o.array_type && array == o.array;
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      return i == o.i;
    default:
      return u == o.u;
  }
}

std::string GgufValue::DebugString() const {
  switch (type) {
    case GgufType::kString:
      return absl::StrCat("str \"", s, "\"");
    case GgufType::kArray:
      return absl::StrCat("arr[", TypeName(array_type), ",", array.size(), "]");
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return absl::StrFormat("%s %g", TypeName(type), f);
    case GgufType::kBool:
      return b ? "bool true" : "bool false";
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      return absl::StrCat(TypeName(type), " ", i);
    default:
      return absl::StrCat(TypeName(type), " ", u);
  }
}

uint64_t GgufTensorInfo::bytes() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  return GgmlBytes(type, n);
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return &v;
  }
  return nullptr;
}

const GgufTensorInfo* GgufFile::FindTensor(const std::string& name) const {
  for (const GgufTensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

// Tensor info `k` (name, dimensions, type, offset), checked against the
// file's size and alignment and the tensors before it.
absl::StatusOr<GgufTensorInfo> ReadTensorInfo(Reader& r, const GgufFile& f, const std::string& path,
                                              uint64_t size, uint64_t k) {
  GgufTensorInfo t;
  if (auto s = r.String(&t.name, absl::StrCat("tensor ", k, " name")); !s.ok()) return s;
  if (t.name.size() > kMaxNameBytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": tensor ", k, " name is ", t.name.size(), " bytes long"));
  }
  uint32_t n_dims = 0, type = 0;
  if (auto s = r.Scalar(&n_dims, t.name + " dimension count"); !s.ok()) return s;
  if (n_dims == 0 || n_dims > kMaxDims) {
    return absl::DataLossError(
        absl::StrCat(path, ": tensor \"", t.name, "\" has ", n_dims, " dimensions (1..4)"));
  }
  t.dims.resize(n_dims);
  uint64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    if (auto s = r.Scalar(&t.dims[d], t.name + " dimension"); !s.ok()) return s;
    if (t.dims[d] == 0 || t.dims[d] > size || elements > size / t.dims[d]) {
      return absl::DataLossError(absl::StrCat(path, ": tensor \"", t.name, "\" dimension ", d,
                                              " is ", t.dims[d], ": more elements than the ", size,
                                              "-byte file holds"));
    }
    elements *= t.dims[d];
  }
  if (auto s = r.Scalar(&type, t.name + " type"); !s.ok()) return s;
  if (type != 0 && type != 1 && type != 2 && type != 8 && type != 30) {
    return absl::DataLossError(
        absl::StrCat(path, ": tensor \"", t.name, "\" has ggml type ", type,
                     " (this reader knows f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8, bf16 = 30)"));
  }
  t.type = static_cast<GgmlType>(type);
  if (GgmlIsBlock(t.type) && t.dims[0] % 32 != 0) {
    return absl::DataLossError(absl::StrCat(path, ": tensor \"", t.name, "\" is ",
                                            GgmlTypeName(t.type), " with rows of ", t.dims[0],
                                            ", not a whole number of 32-value blocks"));
  }
  if (auto s = r.Scalar(&t.offset, t.name + " offset"); !s.ok()) return s;
  if (t.offset % f.alignment != 0) {
    return absl::DataLossError(absl::StrCat(path, ": tensor \"", t.name, "\" offset ", t.offset,
                                            " is not a multiple of the alignment ", f.alignment));
  }
  if (f.FindTensor(t.name) != nullptr) {
    return absl::DataLossError(absl::StrCat(path, ": tensor \"", t.name, "\" appears twice"));
  }
  return t;
}

// Every tensor inside the file, none overlapping the next.
absl::Status CheckTensorSpans(const GgufFile& f, const std::string& path, uint64_t size) {
  std::vector<std::pair<uint64_t, const GgufTensorInfo*>> spans;
  for (const GgufTensorInfo& t : f.tensors) {
    if (f.data_offset > size || t.offset > size - f.data_offset ||
        t.bytes() > size - f.data_offset - t.offset) {
      return absl::DataLossError(
          absl::StrCat(path, ": tensor \"", t.name, "\" (", t.bytes(), " bytes at data offset ",
                       t.offset, ") runs past the end of the ", size, "-byte file (truncated?)"));
    }
    spans.emplace_back(t.offset, &t);
  }
  std::sort(spans.begin(), spans.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 1; k < spans.size(); ++k) {
    const GgufTensorInfo& prev = *spans[k - 1].second;
    if (prev.offset + prev.bytes() > spans[k].first) {
      return absl::DataLossError(absl::StrCat(path, ": tensors \"", prev.name, "\" and \"",
                                              spans[k].second->name, "\" overlap"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufFile> ReadGguf(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  Reader r(in, path, size);
  GgufFile f;
  uint32_t magic = 0;
  uint64_t n_tensors = 0, n_kv = 0;
  if (auto s = r.Scalar(&magic, "magic"); !s.ok()) return s;
  if (magic != kMagic) {
    return absl::DataLossError(
        absl::StrFormat("%s: magic 0x%08x is not GGUF's 0x%08x", path, magic, kMagic));
  }
  if (auto s = r.Scalar(&f.version, "version"); !s.ok()) return s;
  if (f.version != 2 && f.version != 3) {
    return absl::DataLossError(
        absl::StrCat(path, ": GGUF version ", f.version, " (this reader knows 2 and 3)"));
  }
  if (auto s = r.Scalar(&n_tensors, "tensor count"); !s.ok()) return s;
  if (auto s = r.Scalar(&n_kv, "metadata count"); !s.ok()) return s;
  // A metadata pair is at least 12 bytes (empty key, type), a tensor info 24.
  if (n_kv > r.remaining() / 12 || n_tensors > r.remaining() / 24) {
    return absl::DataLossError(absl::StrCat(path, ": header says ", n_tensors, " tensors and ",
                                            n_kv, " metadata pairs; the file is only ", size,
                                            " bytes"));
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    if (auto s = r.String(&key, absl::StrCat("metadata key ", k)); !s.ok()) return s;
    if (key.size() > kMaxNameBytes) {
      return absl::DataLossError(
          absl::StrCat(path, ": metadata key ", k, " is ", key.size(), " bytes long"));
    }
    if (f.Find(key) != nullptr) {
      return absl::DataLossError(absl::StrCat(path, ": metadata \"", key, "\" appears twice"));
    }
    GgufValue v;
    if (auto s = ReadValue(r, &v, key); !s.ok()) return s;
    f.metadata.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = f.Find("general.alignment")) {
    if (a->type != GgufType::kUint32 || a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return absl::DataLossError(absl::StrCat(path, ": general.alignment ", a->DebugString(),
                                              " is not a power of two (u32)"));
    }
    f.alignment = a->u;
  }
  for (uint64_t k = 0; k < n_tensors; ++k) {
    absl::StatusOr<GgufTensorInfo> t = ReadTensorInfo(r, f, path, size, k);
    if (!t.ok()) return t.status();
    f.tensors.push_back(*std::move(t));
  }
  f.data_offset = AlignUp(r.pos(), f.alignment);
  if (absl::Status s = CheckTensorSpans(f, path, size); !s.ok()) return s;
  return f;
}

absl::StatusOr<std::string> ReadGgufTensorData(const std::string& path, const GgufFile& file,
                                               const GgufTensorInfo& tensor) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string out(tensor.bytes(), '\0');
  in.seekg(static_cast<std::streamoff>(file.data_offset + tensor.offset));
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  if (!in) {
    return absl::DataLossError(absl::StrCat(path, ": tensor \"", tensor.name, "\" is truncated"));
  }
  return out;
}

void GgufWriter::Add(std::string key, GgufValue value) {
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::AddTensor(std::string name, std::vector<uint64_t> dims, GgmlType type,
                           Producer data) {
  PendingTensor t;
  t.info.name = std::move(name);
  t.info.dims = std::move(dims);
  t.info.type = type;
  t.data = std::move(data);
  tensors_.push_back(std::move(t));
}

absl::Status GgufWriter::Write(const std::string& path) const {
  uint64_t alignment = 32;
  for (const auto& [k, v] : metadata_) {
    if (k == "general.alignment") alignment = v.u;
  }
  std::string header;
  Put<uint32_t>(&header, kMagic);
  Put<uint32_t>(&header, kVersion);
  Put<uint64_t>(&header, tensors_.size());
  Put<uint64_t>(&header, metadata_.size());
  for (const auto& [k, v] : metadata_) {
    PutString(&header, k);
    Put<uint32_t>(&header, static_cast<uint32_t>(v.type));
    PutScalar(&header, v);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const PendingTensor& t : tensors_) {
    PutString(&header, t.info.name);
    Put<uint32_t>(&header, static_cast<uint32_t>(t.info.dims.size()));
    for (uint64_t d : t.info.dims) Put<uint64_t>(&header, d);
    Put<uint32_t>(&header, static_cast<uint32_t>(t.info.type));
    Put<uint64_t>(&header, offset);
    offsets.push_back(offset);
    offset = AlignUp(offset + t.info.bytes(), alignment);
  }
  header.resize(AlignUp(header.size(), alignment), '\0');

  const std::string tmp = TempPathBeside(path);
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot create"));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  uint64_t written = 0;
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const PendingTensor& t = tensors_[k];
    absl::StatusOr<std::string> bytes = t.data();
    if (!bytes.ok() || bytes->size() != t.info.bytes()) {
      out.close();
      std::filesystem::remove(tmp);
      if (!bytes.ok()) return bytes.status();
      return absl::InternalError(absl::StrCat("GGUF tensor \"", t.info.name, "\": ", bytes->size(),
                                              " bytes made, ", t.info.bytes(), " expected"));
    }
    const std::string pad(offsets[k] - written, '\0');
    out.write(pad.data(), static_cast<std::streamsize>(pad.size()));
    out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
    written = offsets[k] + bytes->size();
  }
  out.close();
  if (!out) {
    std::filesystem::remove(tmp);
    return absl::DataLossError(absl::StrCat(tmp, ": write failed (disk full?)"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace hilnas
