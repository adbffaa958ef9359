// Safetensors files (https://huggingface.co/docs/safetensors): 8-byte
// little-endian header length, JSON header, one contiguous data buffer with
// no holes. Readers check everything a file could get wrong and name the
// file, tensor and value; writes are atomic.
#ifndef HILNAS_MODEL_SAFETENSORS_H_
#define HILNAS_MODEL_SAFETENSORS_H_

#include <torch/types.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hilnas {

// On-disk element type of a safetensors file.
enum class StorageDtype { kF32, kF16, kBF16 };
absl::StatusOr<StorageDtype> ParseStorageDtype(const std::string& name);  // "f32", "F16", "bf16"
torch::Dtype TorchDtypeOf(StorageDtype dtype);

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              StorageDtype dtype);

// Each tensor as it is read (one in memory at a time); the first error the
// sink returns stops the reading.
using TensorSink = std::function<absl::Status(const std::string& name, torch::Tensor tensor)>;

// A tensor of `shape` a block of rows at a time: `rows` is rows [row0,
// row0 + rows.size(0)) of it, blocks in order; a tensor of fewer than two
// dimensions comes whole (row0 0). The first error stops the reading.
using RowBlockSink = std::function<absl::Status(
    const std::string& name, const std::vector<int64_t>& shape, int64_t row0, torch::Tensor rows)>;

// Rows per block when a tensor of `shape` is read in blocks of about
// `block_bytes` (at least one row): counted in f32 whatever the file
// stores, so two tensors of one shape split alike.
int64_t RowsPerBlock(const std::vector<int64_t>& shape, int64_t block_bytes);

// One safetensors file, opened once: Open reads and checks the header (every
// size checked before anything is allocated) and keeps the file open, so
// that the tensors can be streamed, and the bytes hashed, without opening it
// again. DATA_LOSS for a truncated file, a header that lies about sizes or
// offsets, overlapping or holey buffers; INVALID_ARGUMENT for an unknown
// dtype.
class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    std::string dtype;  // "F32", "F16", "BF16", "F64"
    torch::Dtype torch_dtype;
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;  // in the data buffer
  };

  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<Entry>& entries() const { return entries_; }  // in file order

  // Each tensor to `sink`, in file order. Where `hash` is given, the 64-bit
  // FNV-1a it holds is continued over every byte of the file, in order.
  absl::Status ForEach(const TensorSink& sink, uint64_t* hash = nullptr);
  // The same, each tensor in blocks of RowsPerBlock(shape, block_bytes)
  // rows: a 1 GB embedding is never whole in memory.
  absl::Status ForEachRows(const RowBlockSink& sink, int64_t block_bytes, uint64_t* hash = nullptr);
  // The FNV-1a of the whole file continued from `*hash`, read from the open
  // file (no tensor is made).
  absl::Status Hash(uint64_t* hash);

 private:
  std::string path_;
  std::ifstream in_;
  std::string head_;  // the length bytes and the header, as stored
  int64_t data_start_ = 0, data_size_ = 0;
  std::vector<Entry> entries_;
};

// The same checks as SafetensorsFile, every tensor at once.
absl::StatusOr<std::map<std::string, torch::Tensor>> ReadSafetensors(const std::string& path);
absl::Status ForEachSafetensor(const std::string& path, const TensorSink& sink);

}  // namespace hilnas

#endif  // HILNAS_MODEL_SAFETENSORS_H_
