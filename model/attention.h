// Causal attention for inference, as production runtimes compute it
// (FlashAttention's tiling with an online softmax; llama.cpp and ExecuTorch
// price attention the same way): no T x S score tensor, grouped-query heads
// stacked so each key and value is read once per KV head, key blocks above
// the causal diagonal or outside a sliding window never computed. A
// sliding-window layer's cost therefore scales with its window, not with
// the context, which is what the latency model must learn (issue 22).
#ifndef HILNAS_MODEL_ATTENTION_H_
#define HILNAS_MODEL_ATTENTION_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hilnas {

// q [B, H, T, hd] at absolute positions q_start..q_start+T-1 (RoPE applied);
// k, v [B, KVH, S, hd] at positions k_start..k_start+S-1, H a multiple of
// KVH. Query p attends to keys kp <= p, and with `window` > 0 only to
// p - kp < window. Every query must see at least one key. Returns
// [B, H, T, hd] in q's dtype. No autograd (inference only).
torch::Tensor BlockedAttention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t q_start, int64_t k_start,
                               int64_t window, int64_t block = 128);

// One decode query per head, in raw float buffers (the decoder's
// allocation-free decode step): q [H, hd] at `position` (RoPE applied);
// head j's keys and values are n rows of hd floats at keys + j *
// head_stride and values + j * head_stride, at positions key_start.. (a
// window layer's ring holds its last n positions: any order does for one
// query, so pass key_start = position + 1 - n). Writes out [H, hd]. The
// same kernel as BlockedAttention's, so the same numbers.
// `window_layer` names the profiler record hilnas::attention_window instead
// of hilnas::attention (bench/window_pricing.sh prices a window layer against
// a full one inside one process); it changes nothing else.
void DecodeAttention(const float* q, int64_t h, int64_t kvh, int64_t hd, const float* keys,
                     const float* values, int64_t head_stride, int64_t n, int64_t key_start,
                     int64_t position, float* out, bool window_layer = false);
// The same over a half-precision cache (IEEE f16 bits, `--kv-dtype f16`):
// keys and values widened to f32 as they are read.
void DecodeAttention(const float* q, int64_t h, int64_t kvh, int64_t hd, const uint16_t* keys,
                     const uint16_t* values, int64_t head_stride, int64_t n, int64_t key_start,
                     int64_t position, float* out, bool window_layer = false);
// The same over a Q8_0 cache (`--kv-dtype q8_0`): each row of hd values is
// hd / 32 blocks of 34 bytes (f16 scale, 32 int8), head_stride in bytes.
// As llama.cpp's CPU attention over a q8_0 cache: scores are integer dot
// products of the keys with the scaled query quantized to Q8_0, values
// are dequantized as they are summed. REQUIRES hd % 32 == 0.
void DecodeAttention(const float* q, int64_t h, int64_t kvh, int64_t hd, const uint8_t* keys,
                     const uint8_t* values, int64_t head_stride, int64_t n, int64_t key_start,
                     int64_t position, float* out, bool window_layer = false);

// DecodeAttention's work items: each KV head's keys in up to
// kDecodeItems / kvh chunks of at least kDecodeMinChunkKeys (whole blocks
// of 128 keys, the last chunk short), so that a decode query's attention
// splits over a phone's 4 threads (MobileLLM-Flash Sec. 4.2) even where
// the model has fewer KV heads (Gemma 3's 1, Qwen2.5-0.5B's and full4's
// 2). A head of more than one chunk has each chunk's output, maximum and
// sum computed on its own and folded in chunk order: the chunks depend on
// the shape and the keys only, so the bits are the same on any number of
// threads. Returns the keys a chunk (n for one chunk).
constexpr int64_t kDecodeItems = 4;
constexpr int64_t kDecodeMinChunkKeys = 256;
int64_t DecodeChunkKeys(int64_t n, int64_t kvh);

// DecodeAttention splits one query's work items over the process's threads
// from this much score and value work (multiply-adds: 2 x heads x keys x
// head_dim) up. Where a split starts to pay is the host's, what handing
// work to another thread costs (an empty 2-thread region: 0.7-1 us on a
// 2-vCPU Zen 4, 3.2 us on a Zen 5 VM), so the runtime measures it
// (TuneDecodeSplit) rather than fix it for one CPU; 2e5 until then.
// Process-wide, as the GEMV's form (model/gemv.h): set before runs.
double DecodeSplitWork();
void SetDecodeSplitWork(double multiply_adds);

struct DecodeSplitTuning {
  struct Point {
    int64_t keys;
    double one_thread_us, split_us;  // medians of DecodeAttention calls
  };
  std::vector<Point> points;
  int threads = 1;
  double work = 0;     // chosen: DecodeSplitWork() after the tuning
  int64_t keys = 0;    // the fewest keys split (0: no point of the sweep)
  double seconds = 0;  // the sweep's own time
  // Why the sweep's lengths were timed a second time, all together (empty:
  // they were not); `points` then holds the second timing.
  std::string retimed;
  // E.g. "split from 128 keys on 2 threads (128: 3.1 us split, 3.9 on one;
  // 256: 5.0 us split, 7.8 on one; tuned in 0.04 s)".
  std::string Describe() const;
};

// Microseconds a DecodeAttention call takes at `keys` keys, split over the
// process's threads or on one, over a batch of `calls` calls.
using DecodeBatchTimer = std::function<double(int64_t keys, bool split, int calls)>;

// TuneDecodeSplit's sweep and choice over any timer (its tests give it made
// up times; it sets nothing). `work_per_key` is the multiply-adds one key
// costs (2 x heads x head_dim).
//
// A split's gain grows with the keys, as the work handed over grows and the
// hand-over does not; on a shared host a burst of the host's other work
// during one length's batches breaks that (seen on a 2-vCPU Zen 4: 1024
// keys split 1.41x faster, then 2048 keys not at all, and the process left
// its full layers' decode attention on one thread). So a sweep whose
// outcome contradicts it, a length that splits faster followed by a longer
// one that does not, or no length faster split at all, is timed once more,
// every length it measured batch by batch in turn, so that a burst falls on
// all of them alike, and the choice made on that.
DecodeSplitTuning SweepDecodeSplit(int threads, double work_per_key, const DecodeBatchTimer& timer);

// Times DecodeAttention for one query of this shape (h heads over kvh KV
// heads of hd) on a cache of `cache_dtype` ("f32", "f16" or "q8_0") at 32
// to 2048 keys, doubling, on one thread and split over the process's
// threads, interleaved (medians of 15 batches, each split batch run once
// untimed first so that its workers are awake), until two lengths in a row
// split at least 5% faster (longer ones have more work for the same
// hand-over), and sets the work of the fewest keys from which the split is
// that much faster at every length measured (no such length: twice the
// work of 2048 keys, the longest a sweep times, even where it stopped
// shorter); a sweep that contradicts itself is timed again, all its
// lengths in turn (SweepDecodeSplit). One thread: nothing to split, the
// threshold kept (one KV head splits in chunks of its keys). Took 0.02 s
// at full4's heads (8 over 2 x 64) and 0.07-0.1 s at a Llama-3.2-1B's (32
// over 8) on a 2-vCPU Zen 4, about twice that when timed again, before the
// untimed split batches, which add about half (full4's: 0.03-0.04 s on a
// 2-vCPU Zen 5).
DecodeSplitTuning TuneDecodeSplit(int64_t h, int64_t kvh, int64_t hd,
                                  const std::string& cache_dtype);

// [T, S] bool: true where the query at q_start + i may not see the key at
// k_start + j (a later key, or with `window` > 0 one window or more back).
torch::Tensor BlockedPositions(int64_t q_start, int64_t t, int64_t k_start, int64_t s,
                               int64_t window);

// The attention weights the plain way: scores of q over k, scaled by
// 1/sqrt(hd), masked by BlockedPositions, soft-maxed over the keys:
// [B, KVH, H/KVH, T, S]. Differentiable (training uses it).
torch::Tensor ReferenceProbabilities(const torch::Tensor& q, const torch::Tensor& k,
                                     int64_t q_start, int64_t k_start, int64_t window);

// The same attention computed the plain way (scores, mask, softmax, weighted
// sum), materialising [B, KVH, H/KVH, T, S]: the reference the tests hold
// the blocked kernel to, and what training differentiates through.
torch::Tensor ReferenceAttention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, int64_t q_start, int64_t k_start,
                                 int64_t window);

}  // namespace hilnas

#endif  // HILNAS_MODEL_ATTENTION_H_
