// One checkpoint folder, opened once. Open reads config.json, the shard
// index and every weight file's header, and keeps the weight files open:
// what a command asks afterwards (the architecture, the stored dtype, the
// tensors, the fingerprint, the tokenizer files) is answered without opening
// any of them again. Load, prune, calibrate, export, eval, train and the
// agents all ask it. File names are model/checkpoint_files.h's; the layout is
// docs/checkpoints.md.
#ifndef HILNAS_MODEL_CHECKPOINT_READER_H_
#define HILNAS_MODEL_CHECKPOINT_READER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/decoder.h"
#include "model/safetensors.h"
#include "search_space/arch.h"

namespace hilnas {

class CheckpointReader {
 public:
  // In this order, each error naming the file: config.json (issue 41's
  // reading: nothing ignored), then model.safetensors.index.json when
  // present (shard names may not leave the folder), then each weight file's
  // header. Every indexed tensor must be in its shard's header and no shard
  // may hold one the index does not name.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const Arch& arch() const { return arch_; }
  bool sharded() const { return sharded_; }
  // The weight files in reading order: model.safetensors, or the index's shards.
  std::vector<std::string> weight_files() const;
  // bf16 when every weight is stored bf16, else f32: the dtype that holds
  // the weights exactly at the least memory (from the headers only).
  torch::Dtype stored_dtype() const { return stored_dtype_; }
  // The tokenizer files (checkpoint_files.h's kTokenizerFiles) the folder has.
  const std::vector<std::string>& tokenizer_files() const { return tokenizer_files_; }
  // Bytes the weights take in `dtype` (for a memory check before loading).
  int64_t WeightBytes(torch::Dtype dtype) const;

  // Every tensor, one in memory at a time, in file order.
  absl::Status ForEachTensor(const TensorSink& sink);
  // The same a block of rows at a time (SafetensorsFile::ForEachRows).
  absl::Status ForEachTensorRows(const RowBlockSink& sink, int64_t block_bytes);
  absl::StatusOr<std::map<std::string, torch::Tensor>> ReadTensors();
  // A Decoder computing in `dtype`. Every tensor the config implies must be
  // present with its shape; extra tensors are an error. With a
  // `weight_dtype` other than f32 (bf16, f16, q4_0, q8_0: StoreWeightsAs's
  // names and errors, before anything is read) each matrix is stored so
  // as it is read: a Q4_0 load peaks at the Q4_0 model and 16 MiB of rows.
  absl::StatusOr<Decoder> Load(torch::Dtype dtype = torch::kFloat,
                               absl::string_view weight_dtype = "f32");

  // 64-bit FNV-1a over config.json, the index (when sharded) and every
  // weight file, in that order, as 16 hex digits: taken on the way while
  // the tensors are read, else by one pass over the open files.
  absl::StatusOr<std::string> Fingerprint();

 private:
  CheckpointReader() = default;
  absl::Status ReadIndex();
  uint64_t MetadataHash() const;

  std::string dir_;
  Arch arch_;
  std::string config_text_, index_text_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;           // in reading order
  std::map<std::string, std::string> shard_of_;  // tensor -> shard file (sharded only)
  torch::Dtype stored_dtype_ = torch::kFloat;
  std::vector<std::string> tokenizer_files_;
  std::optional<std::string> fingerprint_;
};

}  // namespace hilnas

#endif  // HILNAS_MODEL_CHECKPOINT_READER_H_
