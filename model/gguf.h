// GGUF, llama.cpp's model file (the specification: ggml's docs/gguf.md):
// little-endian, "GGUF", version 3, a count of tensors and of metadata
// pairs, the typed metadata, one info per tensor (name, dimensions innermost
// first, element type, offset into the data), then the tensor data, each
// tensor starting at a multiple of `general.alignment` (32 by default).
//
// The reader treats a file as hostile: every count, length and offset is
// checked against the file's size before anything is allocated, and a bad
// file is DATA_LOSS naming the file and the field. libtorch-free.
#ifndef HILNAS_MODEL_GGUF_H_
#define HILNAS_MODEL_GGUF_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hilnas {

// Metadata value types (the specification's gguf_metadata_value_type).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// Tensor element types hilnas writes and reads (ggml_type); quantised
// types are refused by name.
// ggml's type ids; Q4_0 and Q8_0 store blocks of 32 weights along the
// innermost dimension (model/quant.h).
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kBF16 = 30 };
const char* GgmlTypeName(GgmlType type);
// Bytes of `elements` values (a multiple of 32 for the block types).
uint64_t GgmlBytes(GgmlType type, uint64_t elements);
inline bool GgmlIsBlock(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0;
}

// One metadata value: a scalar in the field its type selects, or an array
// of scalars (nested arrays are refused: nothing llama.cpp reads uses them).
struct GgufValue {
  GgufType type = GgufType::kUint32;
  uint64_t u = 0;  // unsigned integer types
  int64_t i = 0;   // signed integer types
  double f = 0;    // float types
  bool b = false;
  std::string s;
  GgufType array_type = GgufType::kUint32;
  std::vector<GgufValue> array;

  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue F32(float v);
  static GgufValue Bool(bool v);
  static GgufValue Str(std::string v);
  static GgufValue StrArray(std::vector<std::string> v);
  static GgufValue F32Array(const std::vector<float>& v);
  static GgufValue I32Array(const std::vector<int32_t>& v);
  bool operator==(const GgufValue& o) const;
  // For messages: "u32 4", "str \"llama\"", "arr[str,256]".
  std::string DebugString() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // innermost first: a row-major [rows, cols] matrix is {cols, rows}
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes() const;
};

struct GgufFile {
  uint32_t version = 3;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
  std::vector<GgufTensorInfo> tensors;                      // in file order
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // file offset of the data section
  const GgufValue* Find(const std::string& key) const;
  const GgufTensorInfo* FindTensor(const std::string& name) const;
};

// Header, metadata and tensor infos; each tensor's data is checked to lie
// inside the file, aligned and not overlapping another.
absl::StatusOr<GgufFile> ReadGguf(const std::string& path);
// One tensor's raw bytes (little-endian elements, row-major).
absl::StatusOr<std::string> ReadGgufTensorData(const std::string& path, const GgufFile& file,
                                               const GgufTensorInfo& tensor);

// Writes a GGUF file tensor by tensor: infos first, then each tensor's
// bytes as its producer makes them (one tensor in memory at a time).
// Written to a temporary file beside `path`, renamed when complete.
class GgufWriter {
 public:
  using Producer = std::function<absl::StatusOr<std::string>()>;
  void Add(std::string key, GgufValue value);
  // `dims` innermost first; the producer must return exactly
  // GgmlBytes(type, product(dims)) bytes.
  void AddTensor(std::string name, std::vector<uint64_t> dims, GgmlType type, Producer data);
  absl::Status Write(const std::string& path) const;

 private:
  struct PendingTensor {
    GgufTensorInfo info;
    Producer data;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace hilnas

#endif  // HILNAS_MODEL_GGUF_H_
