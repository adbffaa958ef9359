// Token files (DESIGN.md "Checkpoints"): a flat file of little-endian token
// ids, uint32 when the name ends in ".u32", uint16 otherwise; or a NumPy
// ".npy" array of uint16, uint32, int32 or int64 (docs/checkpoints.md shows
// how to make one with a tokenizer). And the byte
// corpus the demo backbone is trained on: English text from Debian packages
// (`fortunes`, the common licences), one token per byte, vocabulary 256.
#ifndef HILNAS_QUALITY_TOKENS_H_
#define HILNAS_QUALITY_TOKENS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hilnas {

// Reads every id; DATA_LOSS names the file when its size is not a whole
// number of ids, INVALID_ARGUMENT the first id >= vocab_size (when > 0).
absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path, int64_t vocab_size = 0);
absl::Status WriteTokenFile(const std::string& path, const std::vector<int32_t>& ids);

// Training and held-out tokens: the held-out part is the file's tail, so the
// split is the same on every machine.
struct TokenSplit {
  std::vector<int32_t> train, heldout;
};
// INVALID_ARGUMENT unless 0 < heldout_fraction < 1 and both parts have at
// least `min_tokens`.
absl::StatusOr<TokenSplit> SplitTokens(std::vector<int32_t> ids, double heldout_fraction,
                                       int64_t min_tokens);

// `count` prompts of `length` tokens spread evenly over `ids` (real text for
// decoding measurements such as PPD's match rates). INVALID_ARGUMENT when
// `ids` is shorter than one prompt.
absl::StatusOr<std::vector<std::vector<int64_t>>> EvenlySpacedPrompts(
    const std::vector<int32_t>& ids, int count, int64_t length);

// Where the demo corpus comes from: every regular file under these paths
// (fortune `.dat` indexes and symlinks skipped), in sorted order.
std::vector<std::string> DefaultCorpusSources();

struct CorpusManifest {
  std::vector<std::pair<std::string, int64_t>> files;  // path, bytes
  int64_t tokens = 0;
  uint64_t fnv1a = 0;  // of the token bytes, to check a rebuild is identical
  std::string ToJson() const;
};

// Byte-level tokens of the concatenated sources (files separated by "\n\n").
// NOT_FOUND names a missing source and the Debian package that provides it.
absl::StatusOr<std::vector<int32_t>> BuildByteCorpus(const std::vector<std::string>& sources,
                                                     CorpusManifest* manifest);

}  // namespace hilnas

#endif  // HILNAS_QUALITY_TOKENS_H_
