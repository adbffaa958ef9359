// `hilnas shapes list | show NAME`: the published shapes with exact
// parameter counts.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "search_space/counts.h"
#include "search_space/shapes.h"
#include "tools/commands/commands.h"
#include "tools/common.h"

namespace hilnas::tools {
namespace {

struct ShapesOptions {
  std::string verb;  // list | show
  std::string name;
};

std::string HeadsString(const Arch& a) {
  return absl::StrCat(a.num_heads, "/", a.num_kv_heads, "/", a.head_dim);
}

std::string AuxString(const Arch& a) {
  switch (a.kv_prediction.kind) {
    case KvPredictionSpec::Kind::kNone:
      return "-";
    case KvPredictionSpec::Kind::kLayerPruned:
      return absl::StrCat("KVP-LP ", a.kv_prediction.layer_pruned_ratio);
    case KvPredictionSpec::Kind::kCanonical:
      return absl::StrCat("KVP-C ", a.kv_prediction.canonical[0].name);
  }
  return "?";
}

int List() {
  auto shapes = PublishedShapes();
  if (!shapes.ok()) return Fail(shapes.status());
  std::printf("%-28s %6s %7s %6s %9s %5s %-22s %15s\n", "name", "layers", "d_model", "d_ffn",
              "H/KV/hd", "attn", "auxiliary", "parameters");
  for (const Shape& s : *shapes) {
    const Arch& a = s.arch;
    std::printf("%-28s %6d %7d %6d %9s %5d %-22s %15s\n", s.name.c_str(), a.num_layers, a.d_model,
                a.d_ffn, HeadsString(a).c_str(), a.num_attention_layers(), AuxString(a).c_str(),
                WithCommas(CountParameters(a).total()).c_str());
  }
  return 0;
}

void PrintArch(const Arch& a, const std::string& indent) {
  std::printf("%sfamily %s\n", indent.c_str(), ArchFamily(a));
  std::printf(
      "%slayers %d, d_model %d, d_ffn %d, heads %s (H/KV/head_dim), vocab %s, %s embeddings%s%s\n",
      indent.c_str(), a.num_layers, a.d_model, a.d_ffn, HeadsString(a).c_str(),
      WithCommas(a.vocab_size).c_str(), a.tie_embeddings ? "tied" : "separate",
      a.qk_norm ? ", QK-norm" : "", a.qkv_bias ? ", q/k/v biases" : "");
  if (!a.no_rope.empty()) {
    std::printf("%sNoPE layers (no RoPE): %s\n", indent.c_str(),
                absl::StrJoin(NoRopeLayers(a), ", ").c_str());
  }
  std::printf("%sattention pattern %s (F full, W SWA window %d, S skip): %d attention blocks\n",
              indent.c_str(), PatternString(a.attention).c_str(), a.sliding_window,
              a.num_attention_layers());
}

int Show(const std::string& name) {
  auto shape = FindShape(name);
  if (!shape.ok()) return Fail(shape.status());
  const Arch& a = shape->arch;
  std::printf("%s\n  source: %s\n", shape->name.c_str(), shape->source.c_str());
  if (!shape->notes.empty()) std::printf("  notes: %s\n", shape->notes.c_str());
  PrintArch(a, "  ");
  const ParameterCount c = CountParameters(a);
  std::printf("  parameters: %s\n", WithCommas(c.model()).c_str());
  std::printf("    embedding %s, output head %s, attention %s, ffn %s, norms %s\n",
              WithCommas(c.embedding).c_str(), WithCommas(c.output_head).c_str(),
              WithCommas(c.attention).c_str(), WithCommas(c.ffn).c_str(),
              WithCommas(c.norms).c_str());
  if (a.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    auto aux = AuxiliaryArch(a);
    auto map = KvPredictionLayerMap(a);
    if (!aux.ok()) return Fail(aux.status());
    if (!map.ok()) return Fail(map.status());
    std::printf("  auxiliary (%s): %s parameters; predictor %s; total %s\n", AuxString(a).c_str(),
                WithCommas(c.auxiliary).c_str(), WithCommas(c.predictor).c_str(),
                WithCommas(c.total()).c_str());
    PrintArch(*aux, "    ");
    std::printf(
        "  aux-to-base layer map (KV Prediction Tab. 1), base layer i <- aux layer j_i:\n    %s\n",
        absl::StrJoin(*map, " ").c_str());
  }
  std::printf("  prefill FLOPs: 1k %.3g, 2k %.3g, 4k %.3g\n", PrefillFlops(a, 1024),
              PrefillFlops(a, 2048), PrefillFlops(a, 4096));
  std::printf("  decode FLOPs per token at context 2k: %.3g\n", DecodeFlops(a, 2048));
  std::printf("  KV cache at 2k tokens (bf16): %s bytes\n",
              WithCommas(KvCacheBytes(a, 2048, 2)).c_str());
  return 0;
}

int RunShapes(const ShapesOptions& o) {
  if (o.verb == "list" && o.name.empty()) return List();
  if (o.verb == "show" && !o.name.empty()) return Show(o.name);
  return Fail(absl::InvalidArgumentError("usage: hilnas shapes list | hilnas shapes show NAME"));
}

}  // namespace

void AddShapesCommand(Cli& cli) {
  auto [app, o] = cli.Add<ShapesOptions>(
      "shapes", "list | show NAME",
      "published shapes with exact parameter counts; one shape: fields, pattern, counts, KVP map",
      RunShapes);
  app->add_option("verb", o->verb, "list | show")->required()->check(CLI::IsMember({"list", "show"}));
  app->add_option("name", o->name, "the shape to show (see `hilnas shapes list`)");
}

}  // namespace hilnas::tools
