// Predictive Pipelined Decoding (Yang et al., TMLR 2024): exact greedy
// decoding that starts the next token early. At an intermediate layer d_bar
// of d, the final norm and output head give top-k early guesses of the next
// token (Sec. 3); k sub-computations start the next token from those guesses
// on their own threads while the main computation finishes layers
// d_bar+1..d. When the final layer's argmax is one of the guesses, that
// sub-computation's first d - d_bar layers are kept and the main computation
// continues from there; otherwise they are dropped. Every kept layer pass is
// the one greedy decoding would have run, so the tokens are those of
// GreedyGenerate by construction.
//
// CPU implementation: each compute unit (the main one and k subs) is a
// thread with its own KV cache (as each GPU has its own in the paper's
// implementation, Sec. 5); committed tokens' keys and values are copied
// between caches. Run with one BLAS thread per unit.
#ifndef HILNAS_MODEL_PPD_H_
#define HILNAS_MODEL_PPD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/decoder.h"
#include "model/generate.h"

namespace hilnas {

struct PpdOptions {
  int layer = 0;  // d_bar: early prediction after this many layers; d/2 <= d_bar < d
  int k = 1;      // early candidates, one sub-computation each
  GenerateOptions generate;
  // Timing only (agents measuring random-weight models): when in [0, 1], the
  // first guess is taken as correct with this probability, drawn from
  // `seed`, instead of comparing with the final layer; the generation then
  // follows the guesses and is not greedy's. Negative: real matches.
  double forced_match_rate = -1;
  uint64_t seed = 0;
};

// What one PPD generation did, counted in layer passes (Theorem 4.1's time
// and compute units).
struct PpdCounts {
  int64_t decode_steps = 0;  // tokens produced by decode steps (all but the first)
  int64_t predictions = 0;   // early guesses checked against the final layer
  int64_t matches = 0;       // ... that contained the final argmax
  int64_t main_layers = 0;   // layer passes on the main unit's critical path
  int64_t sub_layers = 0;    // layer passes run by sub-computations, kept or not
  double p_correct() const { return predictions ? double(matches) / predictions : 0; }
};

struct PpdGeneration {
  std::vector<int64_t> tokens;
  Stats stats;  // as GreedyGenerate's
  PpdCounts counts;
};

// One intra-op thread (libtorch) and one BLAS thread (OpenBLAS, when it is
// the loaded BLAS) for the whole process: each PPD compute unit is then one
// thread, as Theorem 4.1 counts them. Process-wide; call before timing.
void UseOneThreadPerUnit();

// INVALID_ARGUMENT for a layer outside [d/2, d), k outside 1..vocab, a
// KV-prediction architecture or non-positive generation options.
absl::Status ValidatePpdOptions(const Arch& arch, const PpdOptions& options);

// ValidatePpdOptions' errors, and INVALID_ARGUMENT for a bad prompt;
// libtorch errors come back as INTERNAL.
absl::StatusOr<PpdGeneration> PpdGenerate(Decoder& decoder, const std::vector<int64_t>& prompt,
                                          const PpdOptions& options);

// Theorem 4.1: for l decoded tokens, d layers, early prediction at d_bar >=
// d/2 with k candidates and match probability p: expected latency
// d l - (d - d_bar)(l - 1) p and expected compute
// d l - (d - d_bar)(l - 1) p + k (d - d_bar) l, in layer passes.
struct PpdPrediction {
  double latency_layers = 0;
  double compute_layers = 0;
  // Relative to conventional decoding's d l.
  double latency_ratio = 0;
  double compute_ratio = 0;
};
PpdPrediction PredictPpd(int d, int d_bar, int k, int64_t l, double p_correct);

// Paired timing of PPD against greedy decoding: on each prompt greedy then
// PPD, alternating, so that machine noise hits both alike.
struct PpdComparison {
  double greedy_ms_per_token = 0;  // median decode time over prompts
  double ppd_ms_per_token = 0;
  double latency_ratio = 0;  // median over prompts of PPD / greedy decode time
  double compute_ratio = 0;  // layer passes run / (d x decode steps)
  PpdCounts counts;          // summed over prompts
  bool identical = true;     // every PPD generation equals greedy's
};
absl::StatusOr<PpdComparison> ComparePpdWithGreedy(Decoder& decoder,
                                                   const std::vector<std::vector<int64_t>>& prompts,
                                                   const PpdOptions& options);

// Match rates p_correct (Sec. 4.3, Tab. 2): each prompt is continued
// greedily for `new_tokens` tokens; at each generated position the early
// prediction after each of `layers` (1..d) is correct at k when its top-k
// holds the final layer's argmax.
struct MatchRates {
  std::vector<int> layers, ks;
  std::vector<std::vector<int64_t>> hits;  // [layer index][k index]
  int64_t positions = 0;
  double rate(size_t layer_index, size_t k_index) const {
    return positions ? double(hits[layer_index][k_index]) / positions : 0;
  }
  std::string ToMarkdown() const;  // rows: k; columns: layers (as Tab. 2)
};
absl::StatusOr<MatchRates> MeasureMatchRates(Decoder& decoder,
                                             const std::vector<std::vector<int64_t>>& prompts,
                                             int64_t new_tokens, const std::vector<int>& layers,
                                             const std::vector<int>& ks);

}  // namespace hilnas

#endif  // HILNAS_MODEL_PPD_H_
