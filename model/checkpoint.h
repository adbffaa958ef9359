// Checkpoint folders: Hugging-Face-style config.json plus model.safetensors,
// so pruned models load in the tools people already use (DESIGN.md,
// "Checkpoints"). Readers check everything a file could get wrong and name
// the file, tensor and value; nothing is half-written (writes are atomic).
#ifndef HILNAS_MODEL_CHECKPOINT_H_
#define HILNAS_MODEL_CHECKPOINT_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/decoder.h"
#include "model/hf_config.h"

namespace hilnas {

// On-disk element type of a safetensors file.
enum class StorageDtype { kF32, kF16, kBF16 };
absl::StatusOr<StorageDtype> ParseStorageDtype(const std::string& name);  // "f32", "F16", "bf16"
torch::Dtype TorchDtypeOf(StorageDtype dtype);

// Safetensors (https://huggingface.co/docs/safetensors): 8-byte little-endian
// header length, JSON header, one contiguous data buffer with no holes.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              StorageDtype dtype);
// DATA_LOSS for a truncated file, a header that lies about sizes or offsets,
// overlapping or holey buffers; INVALID_ARGUMENT for an unknown dtype.
absl::StatusOr<std::map<std::string, torch::Tensor>> ReadSafetensors(const std::string& path);
// The same checks, then each tensor handed to `sink` as it is read (one in
// memory at a time); the first error `sink` returns stops the reading.
using TensorSink = std::function<absl::Status(const std::string& name, torch::Tensor tensor)>;
absl::Status ForEachSafetensor(const std::string& path, const TensorSink& sink);

// A checkpoint's tensors: dir/model.safetensors, or the shards that
// dir/model.safetensors.index.json maps every tensor to (as published
// backbones ship). Every indexed tensor must be in its shard and no shard
// may hold one the index does not name; shard names may not leave dir.
inline constexpr char kShardIndexFile[] = "model.safetensors.index.json";
absl::StatusOr<std::map<std::string, torch::Tensor>> ReadCheckpointTensors(const std::string& dir);
absl::Status ForEachCheckpointTensor(const std::string& dir, const TensorSink& sink);
// bf16 when every weight is stored bf16 (read from the headers only), else
// f32: the dtype that holds a checkpoint's weights exactly at the least memory.
absl::StatusOr<torch::Dtype> CheckpointStoredDtype(const std::string& dir);
// The weight files of a checkpoint, in reading order: model.safetensors, or
// the index's shards (names checked to stay beside it).
absl::StatusOr<std::vector<std::string>> ShardFiles(const std::string& dir);

// Writes dir/config.json and dir/model.safetensors (creating dir).
absl::Status SaveCheckpoint(const Decoder& decoder, const std::string& dir, StorageDtype dtype);

// Scans every tensor of a safetensors file (or of a checkpoint folder,
// sharded or not) for NaN and Inf. DATA_LOSS
// naming the tensors that hold any (and how many values), OK otherwise.
absl::Status CheckFiniteWeights(const std::string& safetensors_path);

// Loads a checkpoint into a Decoder computing in `dtype`. Every tensor the
// config implies must be present with its shape; extra tensors are an error.
absl::StatusOr<Decoder> LoadCheckpoint(const std::string& dir, torch::Dtype dtype = torch::kFloat);

}  // namespace hilnas

#endif  // HILNAS_MODEL_CHECKPOINT_H_
