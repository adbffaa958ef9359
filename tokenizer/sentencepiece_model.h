// A SentencePiece `tokenizer.model`, run by Google's own library
// (Debian's libsentencepiece-dev) for the folders that ship no
// tokenizer.json: whatever the library does is, by definition, the
// reference, so nothing here re-implements its Unigram or BPE search.
//
// The library is reached through libhilnas_spm.so (spm_shim.cc), loaded
// with dlmopen(LM_ID_NEWLM) on first use, because it exports its own
// protobuf-lite, which must not meet the system libprotobuf that gRPC links.
// Its header also declares `namespace absl { using std::string_view; }`, so
// only standard-library types cross this header.
#ifndef HILNAS_TOKENIZER_SENTENCEPIECE_MODEL_H_
#define HILNAS_TOKENIZER_SENTENCEPIECE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hilnas::tokenizer::internal {

class SentencePieceModel {
 public:
  // From the bytes of a tokenizer.model (a serialized ModelProto). On
  // failure returns null and sets *error.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& bytes, std::string* error);
  ~SentencePieceModel();

  // Thread-safe (the processor's Encode and Decode are const).
  bool Encode(std::string_view text, std::vector<int32_t>* ids, std::string* error) const;
  bool Decode(const std::vector<int32_t>& ids, std::string* text, std::string* error) const;

  // The vocabulary, read from the ModelProto: piece, score and type
  // (SentencePiece's Type numbers: 1 normal, 2 unknown, 3 control,
  // 4 user-defined, 5 unused, 6 byte; the same numbers GGUF uses).
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
  int32_t unk_id = -1, bos_id = -1, eos_id = -1, pad_id = -1;

  // TrainerSpec and NormalizerSpec fields that decide how text is split.
  enum class ModelType { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };
  ModelType model_type = ModelType::kUnigram;
  std::string normalizer_name;  // "identity", "nmt_nfkc", ... ("" when a rule TSV is used)
  bool has_charsmap = false;    // a precompiled normalization table
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool byte_fallback = false;

 private:
  SentencePieceModel();
  void* handle_ = nullptr;  // the shim's processor
};

// Trains a model with Google's trainer (spm_train's flags, e.g.
// "--input=a.txt --model_prefix=dir/tokenizer --vocab_size=500"): what tests
// use instead of a published tokenizer.model. Returns "" or the error.
std::string TrainSentencePiece(const std::string& args);

}  // namespace hilnas::tokenizer::internal

#endif  // HILNAS_TOKENIZER_SENTENCEPIECE_MODEL_H_
