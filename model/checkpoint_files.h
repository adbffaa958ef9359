// The names of the files in a checkpoint folder, in one place (after
// LevelDB's db/filename.h): every reader and writer asks here, so a new file
// (a tokenizer's, a quantized format's) is named once. The folder layout is
// docs/checkpoints.md.
#ifndef HILNAS_MODEL_CHECKPOINT_FILES_H_
#define HILNAS_MODEL_CHECKPOINT_FILES_H_

#include <array>
#include <string>

namespace hilnas {

// Hugging Face's names, so that the folder loads in transformers as it is.
inline constexpr char kConfigFile[] = "config.json";
inline constexpr char kWeightsFile[] = "model.safetensors";
inline constexpr char kShardIndexFile[] = "model.safetensors.index.json";
// hilnas's own: activation metrics of a backbone (pruner/metrics.h), and a
// KV-prediction candidate's auxiliary model (a checkpoint folder of its own)
// and learned KV maps (model/kv_prediction.h).
inline constexpr char kMetricsFile[] = "metrics.json";
inline constexpr char kAuxiliaryDir[] = "auxiliary";
inline constexpr char kKvPredictorFile[] = "kv_predictor.safetensors";
// A tokenizer's files as Hugging Face and SentencePiece ship them; a folder
// carries whichever of them it has through prune, train and export.
inline constexpr std::array<const char*, 7> kTokenizerFiles = {
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
    "vocab.json",     "merges.txt",            "generation_config.json"};

inline std::string CheckpointFile(const std::string& dir, const char* name) {
  return dir + "/" + name;
}
inline std::string ConfigFileName(const std::string& dir) {
  return CheckpointFile(dir, kConfigFile);
}
inline std::string WeightsFileName(const std::string& dir) {
  return CheckpointFile(dir, kWeightsFile);
}
inline std::string ShardIndexFileName(const std::string& dir) {
  return CheckpointFile(dir, kShardIndexFile);
}
inline std::string MetricsFileName(const std::string& dir) {
  return CheckpointFile(dir, kMetricsFile);
}
inline std::string AuxiliaryDirName(const std::string& dir) {
  return CheckpointFile(dir, kAuxiliaryDir);
}
inline std::string KvPredictorFileName(const std::string& dir) {
  return CheckpointFile(dir, kKvPredictorFile);
}

}  // namespace hilnas

#endif  // HILNAS_MODEL_CHECKPOINT_FILES_H_
