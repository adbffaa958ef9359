// Space: the set of architectures a search may propose (MobileLLM-Flash
// Sec. 3.3, Tab. 3), its constraint (Sec. 3.5), its size, and the encoding of
// its members as points of [0,1]^D that the GP and BO work in.
#ifndef HILNAS_SEARCH_SPACE_SPACE_H_
#define HILNAS_SEARCH_SPACE_SPACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/search_space.pb.h"
#include "search_space/arch.h"

namespace hilnas {

// Tab. 3 of MobileLLM-Flash: 10..16 layers, d_ffn 2048..8192 step 256,
// d_model 1024..2048 step 128, attention in {full, SWA, skip}, block size 128,
// at most 2 consecutive efficient-attention layers; heads 32/8/64, vocabulary
// 202,048, tied embeddings, QK-norm and SWA window 256 (Sec. 4.1).
SearchSpace DefaultSearchSpace();

// Immutable after construction; safe to share between threads.
class Space {
 public:
  // Validates the proto (non-empty choices, widths multiples of the block
  // size, a valid base) and reports every problem, naming the field.
  static absl::StatusOr<Space> FromProto(const SearchSpace& proto);

  const SearchSpace& proto() const { return proto_; }

  // Encoding: one coordinate per searched dimension with more than one
  // choice: num_layers, d_ffn, d_model, one attention coordinate per layer up
  // to the largest layer count, the auxiliary choice, the KV-cache layout
  // and the decoding option. Choice i of n is
  // encoded as the bin centre (i + 0.5) / n; decoding takes the bin, so
  // Decode(Encode(a)) == a exactly. Attention coordinates past a candidate's
  // depth are ignored by Decode and encoded as choice 0.
  int dimensions() const { return static_cast<int>(names_.size()); }
  const std::vector<std::string>& dimension_names() const { return names_; }

  absl::StatusOr<std::vector<double>> Encode(const Arch& arch) const;
  // The architecture of a point; it may still break the consecutive-efficient
  // constraint, which Contains reports.
  absl::StatusOr<Arch> Decode(absl::Span<const double> x) const;

  // OK when `arch` is a member: every searched field is one of the choices,
  // the fixed fields equal the base's, and the Sec. 3.5 constraint holds.
  absl::Status Contains(const Arch& arch) const;

  // Number of member architectures, with or without the constraint.
  // Saturates at UINT64_MAX.
  uint64_t Size(bool constrained = true) const;

  const std::vector<int>& layer_choices() const { return layers_; }
  const std::vector<int>& ffn_choices() const { return ffn_; }
  const std::vector<int>& model_choices() const { return model_; }
  const std::vector<Attention>& attention_choices() const { return attention_; }
  const std::vector<KvLayout>& kv_cache_choices() const { return kv_cache_; }
  int block_size() const { return proto_.block_size(); }
  int max_consecutive_efficient() const { return proto_.max_consecutive_efficient(); }

 private:
  Space() = default;
  Arch Base(int layers) const;
  int PpdIndex(const Arch& arch) const;  // -1 when not a choice

  SearchSpace proto_;
  Arch base_;  // fixed fields; num_layers, widths and pattern unset
  std::vector<int> layers_, ffn_, model_;
  std::vector<Attention> attention_;
  std::vector<KvPredictionSpec> aux_;
  std::vector<KvLayout> kv_cache_;
  std::vector<PpdChoice> ppd_;  // k == 0: plain greedy
  std::vector<std::string> names_;
};

}  // namespace hilnas

#endif  // HILNAS_SEARCH_SPACE_SPACE_H_
