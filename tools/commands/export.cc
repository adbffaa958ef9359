// `hilnas export`: the dense pruned checkpoint of a campaign's trial, or a
// GGUF file for llama.cpp (of a checkpoint or a trial).
#include <cstdio>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "coordinator/campaign_report.h"
#include "model/gguf.h"
#include "model/gguf_export.h"
#include "tokenizer/tokenizer.h"
#include "pruner/backbone.h"
#include "tools/campaign_db.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

struct ExportOptions {
  std::string format;  // empty: a checkpoint folder; gguf: a GGUF file
  std::string ckpt;
  std::string campaign;
  int64_t trial = 0;
  std::string db = "hilnas.db";
  std::string out;
  std::string dtype = "f32";
  bool overwrite = false;
};

// The trial of a campaign, or NOT_FOUND naming what exists.
absl::StatusOr<const Trial*> FindTrial(const LoadedCampaign& c, const std::string& name,
                                       int64_t id) {
  for (const Trial& t : c.trials) {
    if (t.id() == id) return &t;
  }
  return absl::NotFoundError(
      absl::StrCat("campaign \"", name, "\" has no trial ", id, " (it has ", c.trials.size(), ")"));
}

// Prunes the campaign's backbone to the trial's architecture into `dir`.
absl::Status PruneTrial(const LoadedCampaign& c, const Trial& trial, const std::string& dir,
                        StorageDtype dtype) {
  const CampaignConfig& cfg = c.record.config;
  HILNAS_ASSIGN_OR_RETURN(Backbone backbone,
                          LoadBackbone(cfg.backbone_checkpoint(), cfg.backbone_metrics()));
  HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromProto(trial.arch()));
  PruneOptions po;
  po.block_size = cfg.search_space().block_size();
  return PruneToCheckpoint(backbone, arch, po, dir, dtype);
}

// llama.cpp's names for the split regexes it implements (llama-vocab.cpp's
// tokenizer.ggml.pre values); a regex not here has no llama.cpp tokenizer.
constexpr std::pair<const char*, const char*> kLlamaCppPre[] = {
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "llama-bpe"},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "qwen2"},
    {tokenizer::kGpt2SplitRegex, "gpt-2"},
};

// The GGUF vocabulary of a tokenizer.json, as llama.cpp's converter writes
// it; INVALID_ARGUMENT names a pre-tokenizer llama.cpp does not know.
absl::StatusOr<std::shared_ptr<const GgufVocabulary>> GgufVocabularyOf(
    const tokenizer::Tokenizer& tok, const std::string& source) {
  auto v = std::make_shared<GgufVocabulary>();
  const int32_t n = tok.vocab_size();
  v->tokens.reserve(n);
  v->types.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = tok.token(id);
    v->tokens.push_back(t.empty() ? absl::StrCat("[PAD", id, "]") : t);
    v->types.push_back(static_cast<int32_t>(tok.token_type(id)));
  }
  if (const tokenizer::SentencePieceInfo* spm = tok.sentencepiece()) {
    // A tokenizer.model: llama.cpp's SPM tokenizer merges the adjacent pair
    // whose joined piece scores highest, which is SentencePiece's BPE
    // search with the model's own scores. It has no Unigram (Viterbi)
    // search for this vocabulary type, and no normalizer.
    if (spm->model_type != "bpe") {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": a SentencePiece ", spm->model_type,
          " model; llama.cpp's SPM tokenizer reproduces only SentencePiece BPE (Llama 2, "
          "Gemma), so it would split text differently"));
    }
    if (spm->normalizer != "identity" || spm->removes_extra_whitespaces) {
      std::fprintf(stderr,
                   "%s: its SentencePiece normalizer (%s%s) has no GGUF key; llama.cpp tokenizes "
                   "text that normalization would change differently\n",
                   source.c_str(), spm->normalizer.c_str(),
                   spm->removes_extra_whitespaces ? ", folding runs of spaces" : "");
    }
    v->model = "llama";
    v->scores = spm->scores;
    v->add_space_prefix = tok.prepends_space();
  } else if (tok.byte_level()) {
    v->model = "gpt2";
    for (const auto& [regex, name] : kLlamaCppPre) {
      if (tok.split_regex() == regex) v->pre = name;
    }
    if (tok.normalizes_unicode()) {
      std::fprintf(stderr,
                   "%s: its NFC/NFKC normalizer has no GGUF key; llama.cpp tokenizes text that is "
                   "not already in that form differently (hilnas and Hugging Face normalize)\n",
                   source.c_str());
    }
    v->merges = tok.Merges();
    // Without merges every byte is its own token however text is split
    // (the demo backbone's byte vocabulary).
    if (v->pre.empty() && v->merges.empty()) v->pre = "default";
    if (v->pre.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": its pre-tokenizer regex \"", tok.split_regex(),
          "\" has no llama.cpp name (llama-bpe, qwen2 and gpt-2 are known): llama.cpp would "
          "split text differently"));
    }
  } else {
    // SentencePiece-style: llama.cpp merges the adjacent pair whose joined
    // token scores highest, so a token's score is minus the rank of the
    // merge that makes it (the first merge scores highest).
    v->model = "llama";
    v->scores.assign(n, 0.f);
    std::vector<std::string> merges = tok.Merges();
    std::vector<bool> made(n, false);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const size_t space = merges[rank].find(' ');
      auto id = tok.TokenId(merges[rank].substr(0, space) + merges[rank].substr(space + 1));
      if (id && !made[*id]) {
        v->scores[*id] = -static_cast<float>(rank + 1);
        made[*id] = true;
      }
    }
    v->add_space_prefix = tok.prepends_space();
  }
  v->bos = tok.bos_id().value_or(-1);
  v->eos = tok.eos_id().value_or(-1);
  v->unk = tok.unk_id().value_or(-1);
  if (auto pad = tok.TokenId("<pad>")) v->pad = *pad;
  v->add_bos = tok.adds_bos();
  v->add_eos = tok.adds_eos();
  return std::shared_ptr<const GgufVocabulary>(std::move(v));
}

// The checkpoint folder's tokenizer as GGUF carries it; null (a placeholder
// vocabulary) when the folder has neither tokenizer.json nor tokenizer.model.
absl::StatusOr<std::shared_ptr<const GgufVocabulary>> CheckpointVocabulary(const std::string& dir) {
  const std::string file = tokenizer::Tokenizer::FileInDir(dir);
  if (file.empty()) {
    std::fprintf(stderr, "%s has no tokenizer.json or tokenizer.model: the GGUF file gets a "
                         "placeholder vocabulary (enough for timing, no text)\n", dir.c_str());
    return std::shared_ptr<const GgufVocabulary>();
  }
  HILNAS_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromDir(dir));
  return GgufVocabularyOf(tok, file);
}

// hilnas export --format gguf (--ckpt DIR | --campaign C --trial N) --out FILE
int ExportGgufCommand(const ExportOptions& cl) {
  const std::string out = cl.out;
  if (out.empty() || (cl.ckpt.empty() == cl.campaign.empty())) {
    return Fail(absl::InvalidArgumentError(
        "usage: hilnas export --format gguf (--ckpt DIR | --campaign C --trial N) --out FILE "
        "[--dtype f32|f16|q4_0|q8_0 --overwrite]"));
  }
  GgufExportOptions o;
  const std::string dtype = absl::AsciiStrToLower(cl.dtype);
  if (dtype == "f16") {
    o.dtype = GgmlType::kF16;
  } else if (dtype == "q4_0") {
    o.dtype = GgmlType::kQ4_0;
  } else if (dtype == "q8_0") {
    o.dtype = GgmlType::kQ8_0;
  } else if (dtype != "f32") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--dtype ", cl.dtype, ": GGUF export writes f32, f16, q4_0 or q8_0")));
  }
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && !cl.overwrite) {
    return Fail(
        absl::AlreadyExistsError(absl::StrCat("--out ", out, " exists; --overwrite replaces it")));
  }
  if (std::filesystem::is_directory(out, ec)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--out ", out, " is a directory")));
  }
  absl::Status s = [&]() -> absl::Status {
    if (!cl.ckpt.empty()) {
      HILNAS_ASSIGN_OR_RETURN(o.vocabulary, CheckpointVocabulary(cl.ckpt));
      return ExportGguf(cl.ckpt, out, o);
    }
    HILNAS_ASSIGN_OR_RETURN(LoadedCampaign c, LoadCampaignFromDb(cl.db, cl.campaign));
    HILNAS_ASSIGN_OR_RETURN(const Trial* trial, FindTrial(c, cl.campaign, cl.trial));
    // The dense checkpoint first (f32: the GGUF file rounds once, to its own dtype).
    const std::string staging = out + ".ckpt.tmp";
    std::filesystem::remove_all(staging, ec);
    absl::Status pruned = PruneTrial(c, *trial, staging, StorageDtype::kF32);
    absl::Status exported = pruned;
    if (pruned.ok()) {
      auto vocabulary = CheckpointVocabulary(staging);
      exported = vocabulary.status();
      if (vocabulary.ok()) {
        o.vocabulary = *vocabulary;
        exported = ExportGguf(staging, out, o);
      }
    }
    std::filesystem::remove_all(staging, ec);
    return exported;
  }();
  if (!s.ok()) return Fail(s);
  absl::StatusOr<GgufFile> f = ReadGguf(out);
  if (!f.ok()) return Fail(f.status());
  std::printf("%s: GGUF v%u, %s layout, %s, %zu tensors, %s bytes\n", out.c_str(), f->version,
              f->Find("general.architecture")->s.c_str(), GgmlTypeName(o.dtype), f->tensors.size(),
              WithCommas(std::filesystem::file_size(out)).c_str());
  return 0;
}

int RunExport(const ExportOptions& cl) {
  if (cl.format == "gguf") return ExportGgufCommand(cl);
  const std::string name = cl.campaign, out = cl.out;
  const int64_t id = cl.trial;
  if (name.empty() || out.empty() || id <= 0) {
    return Fail(absl::InvalidArgumentError(
        "usage: hilnas export --campaign C --trial N --out DIR [--db FILE --dtype f32|bf16]\n"
        "       hilnas export --format gguf (--ckpt DIR | --campaign C --trial N) --out FILE"));
  }
  absl::StatusOr<LoadedCampaign> c = LoadCampaignFromDb(cl.db, name);
  if (!c.ok()) return Fail(c.status());
  absl::StatusOr<const Trial*> found = FindTrial(*c, name, id);
  if (!found.ok()) return Fail(found.status());
  const Trial* trial = *found;
  absl::Status s = [&]() -> absl::Status {
    const CampaignConfig& cfg = c->record.config;
    HILNAS_ASSIGN_OR_RETURN(
        OutputFolder dest,
        OutputFolder::Prepare(out, cl.overwrite,
                              {cfg.backbone_checkpoint(), cfg.backbone_metrics(), cl.db}));
    HILNAS_ASSIGN_OR_RETURN(StorageDtype dtype, StorageDtypeOf(cl.dtype));
    HILNAS_RETURN_IF_ERROR(PruneTrial(*c, *trial, dest.staging(), dtype));
    return dest.Commit();
  }();
  if (!s.ok()) return Fail(s);
  std::printf(
      "trial %lld of %s (%s, %s parameters, loss %.4f after the search's training) "
      "pruned from %s -> %s\n",
      static_cast<long long>(id), name.c_str(), ArchSummary(trial->arch()).c_str(),
      WithCommas(trial->parameters()).c_str(), trial->loss(),
      c->record.config.backbone_checkpoint().c_str(), out.c_str());
  return 0;
}

}  // namespace

void AddExportCommand(Cli& cli) {
  auto [app, o] = cli.Add<ExportOptions>(
      "export",
      "--campaign C --trial N --out DIR [--db FILE] |\n"
      "    --format gguf (--ckpt DIR | --campaign C --trial N) --out FILE [--dtype "
      "f32|f16|q4_0|q8_0]",
      "the dense pruned checkpoint of any trial; or a GGUF file for llama.cpp", RunExport);
  app->add_option("--format", o->format, "gguf: a GGUF file for llama.cpp; default a checkpoint")
      ->check(CLI::IsMember({"", "gguf"}));
  CLI::Option* ckpt = app->add_option("--ckpt", o->ckpt, "gguf: the checkpoint to convert");
  app->add_option("--campaign", o->campaign, "the campaign")->excludes(ckpt);
  app->add_option("--trial", o->trial, "the trial number")->check(CLI::PositiveNumber);
  app->add_option("--db", o->db, "the coordinator's SQLite file");
  app->add_option("--out", o->out, "the checkpoint folder, or the GGUF file")->required();
  app->add_option("--dtype", o->dtype, "f32 | bf16 | f16 (GGUF: f32 | f16)");
  app->add_flag("--overwrite", o->overwrite, "replace an existing --out");
}

}  // namespace hilnas::tools
