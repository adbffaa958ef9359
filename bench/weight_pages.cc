// How where a model's weights lie changes a one-thread decode's weight
// stream (issue 35, item 1: page size). full4's 29 matrices (4 layers of q,
// k, v, o, gate, up, down at d 512, f 1536, kv width 128, and the 4096 x 512
// tied head: 57 MB of f32) are multiplied by a vector with the runtime's own
// GEMV (WeightGemvsInto) in three layouts, passes of the three interleaved
// so drift hits all alike:
//
//   separate   one libtorch allocation per matrix (4 KiB pages)
//   file       one file mapped from the page cache (how llama-bench reads
//              a GGUF file; --file names it, default in /tmp)
//   huge       one 2 MiB-aligned buffer advised MADV_HUGEPAGE, as every
//              decoder's parameters now are (PackParameters, model/decoder.cc)
//
// Prints the minimum and median ms of a pass over all 29 and GB/s at the
// median. Run it several times: physical pages differ from process to
// process. `cat /sys/kernel/mm/transparent_hugepage/enabled` says whether
// the advice can be taken ("never": huge reads as separate).
//
// usage: weight_pages [--passes 60] [--file /tmp/hilnas-weight-pages.bin]
#include <fcntl.h>
#include <sys/mman.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "model/gemv.h"
#include "util/subprocess.h"

namespace {

using hilnas::bench::Arg;
using hilnas::bench::Die;

struct Shape {
  int64_t rows, cols;
};

std::vector<Shape> Full4() {
  std::vector<Shape> m;
  for (int l = 0; l < 4; ++l) {
    for (Shape s : {Shape{512, 512}, Shape{128, 512}, Shape{128, 512}, Shape{512, 512},
                    Shape{1536, 512}, Shape{1536, 512}, Shape{512, 1536}}) {
      m.push_back(s);
    }
  }
  m.push_back({4096, 512});
  return m;
}

// Where each matrix starts in a buffer holding all of them, each at a
// 64-byte boundary; the last entry is the buffer's size.
std::vector<size_t> Offsets(const std::vector<Shape>& shapes) {
  std::vector<size_t> at = {0};
  for (Shape s : shapes) {
    at.push_back(at.back() + (static_cast<size_t>(s.rows * s.cols) * 4 + 63) / 64 * 64);
  }
  return at;
}

// The matrices as views of one buffer at `base` laid out as Offsets says.
std::vector<torch::Tensor> Views(char* base, const std::vector<Shape>& shapes,
                                 const std::vector<size_t>& offsets) {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    out.push_back(
        torch::from_blob(base + offsets[i], {shapes[i].rows, shapes[i].cols}, torch::kFloat));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  hilnas::ReexecWithTimingThreads(argv, 1);
  at::set_num_threads(1);
  const int passes = std::atoi(Arg(argc, argv, "--passes", "60").c_str());
  const std::string file = Arg(argc, argv, "--file", "/tmp/hilnas-weight-pages.bin");
  if (passes < 1) Die(absl::InvalidArgumentError("--passes must be at least 1"));
  const std::vector<Shape> shapes = Full4();
  const std::vector<size_t> offsets = Offsets(shapes);
  const size_t bytes = offsets.back();
  constexpr size_t kHuge = size_t{2} << 20;

  std::vector<torch::Tensor> separate;
  for (Shape s : shapes) separate.push_back(torch::randn({s.rows, s.cols}));

  const int fd = open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    Die(absl::UnavailableError("cannot write " + file));
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) Die(absl::UnavailableError("cannot map " + file));
  std::vector<torch::Tensor> in_file = Views(static_cast<char*>(mapped), shapes, offsets);

  void* buf = nullptr;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  if (posix_memalign(&buf, kHuge, rounded) != 0)
    Die(absl::ResourceExhaustedError("no 2 MiB-aligned buffer"));
  madvise(buf, rounded, MADV_HUGEPAGE);
  std::vector<torch::Tensor> huge = Views(static_cast<char*>(buf), shapes, offsets);
  for (size_t i = 0; i < shapes.size(); ++i) {
    in_file[i].copy_(separate[i]);
    huge[i].copy_(separate[i]);
  }

  const std::vector<std::vector<torch::Tensor>*> layouts = {&separate, &in_file, &huge};
  const char* names[] = {"separate (4 KiB pages)", "file (page cache)", "huge (one buffer)"};
  std::vector<float> x(1536, 0.5f), y(4096);
  std::vector<std::vector<double>> ms(layouts.size());
  for (int p = 0; p < passes; ++p) {
    for (size_t l = 0; l < layouts.size(); ++l) {
      const auto start = std::chrono::steady_clock::now();
      for (const torch::Tensor& w : *layouts[l]) {
        const hilnas::GemvProduct product{&w, y.data()};
        hilnas::WeightGemvsInto(&product, 1, x.data());
      }
      ms[l].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  std::printf("full4's matrices, %.1f MB of f32, one thread, %d passes (kernel %s)\n\n",
              bytes / 1e6, passes, hilnas::GemvKernelName());
  std::printf(
      "| weights' pages | min ms | median ms | GB/s at the median |\n|---|---:|---:|---:|\n");
  for (size_t l = 0; l < layouts.size(); ++l) {
    const double median = hilnas::bench::Median(ms[l]);
    std::printf("| %s | %.3f | %.3f | %.1f |\n", names[l],
                *std::min_element(ms[l].begin(), ms[l].end()), median, bytes / 1e6 / median);
  }
  munmap(mapped, bytes);
  close(fd);
  unlink(file.c_str());
  std::free(buf);
  return 0;
}
