// Checkpoint folders: Hugging-Face-style config.json plus model.safetensors
// (or shards with an index), so pruned models load in the tools people
// already use (DESIGN.md, "Checkpoints"). Reading is CheckpointReader's
// (model/checkpoint_reader.h), file names checkpoint_files.h's; nothing is
// half-written (writes are atomic).
#ifndef HILNAS_MODEL_CHECKPOINT_H_
#define HILNAS_MODEL_CHECKPOINT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/checkpoint_files.h"
#include "model/checkpoint_reader.h"
#include "model/decoder.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

namespace hilnas {

// Writes dir/config.json and dir/model.safetensors (creating dir).
absl::Status SaveCheckpoint(const Decoder& decoder, const std::string& dir, StorageDtype dtype);

// Copies the tokenizer files `from` has (kTokenizerFiles) into `to`, so that
// a pruned, trained or exported checkpoint leaves with its tokenizer.
absl::Status CopyTokenizerFiles(const std::string& from, const std::string& to);

// Scans every tensor of a safetensors file (or of a checkpoint folder,
// sharded or not) for NaN and Inf. DATA_LOSS
// naming the tensors that hold any (and how many values), OK otherwise.
absl::Status CheckFiniteWeights(const std::string& safetensors_path);

// CheckpointReader::Open(dir), then Load(dtype): for a caller that wants the
// model and nothing else of the folder.
absl::StatusOr<Decoder> LoadCheckpoint(const std::string& dir, torch::Dtype dtype = torch::kFloat);

}  // namespace hilnas

#endif  // HILNAS_MODEL_CHECKPOINT_H_
