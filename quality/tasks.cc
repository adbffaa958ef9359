#include "quality/tasks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tokenizer/regex.h"
#include "util/py_random.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// One JSONL document and where it came from, for error messages.
struct Doc {
  json value;
  std::string text;  // the line as read
  int64_t line = 0;
};

std::string Where(const std::string& file, int64_t line) { return absl::StrCat(file, ":", line); }

// Walks a path such as `choices.text`, `answer.aliases[0]` or `endings`.
absl::StatusOr<const json*> Resolve(const json& doc, absl::string_view path) {
  const json* node = &doc;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') ++i;
    if (path[i] == '[') {
      const size_t close = path.find(']', i);
      int64_t index = 0;
      if (close == absl::string_view::npos || !absl::SimpleAtoi(path.substr(i + 1, close - i - 1), &index)) {
        return absl::InvalidArgumentError(absl::StrCat("bad index in '", path, "'"));
      }
      if (!node->is_array() || index < 0 || index >= static_cast<int64_t>(node->size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", path.substr(0, close + 1), "' does not exist"));
      }
      node = &(*node)[index];
      i = close + 1;
      continue;
    }
    size_t end = i;
    while (end < path.size() && path[end] != '.' && path[end] != '[') ++end;
    const std::string key(path.substr(i, end - i));
    if (key.empty()) return absl::InvalidArgumentError(absl::StrCat("bad field path '", path, "'"));
    if (!node->is_object() || !node->contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat("field '", path.substr(0, end), "' does not exist"));
    }
    node = &(*node)[key];
    i = end;
  }
  return node;
}

// A JSON value as Python's str() prints it.
absl::StatusOr<std::string> Text(const json& v, absl::string_view path) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return std::string(v.get<bool>() ? "True" : "False");
  if (v.is_number_integer()) return v.dump();
  if (v.is_number()) return v.dump();
  if (v.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("field '", path, "' is a list; index it, e.g. ", path, "[0]"));
  }
  return absl::InvalidArgumentError(absl::StrCat("field '", path, "' is ", v.is_null() ? "null" : "an object"));
}

std::string PyStrip(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

absl::StatusOr<std::string> ApplyFilter(absl::string_view filter, std::string value) {
  if (filter == "strip") return PyStrip(value);
  if (filter == "lower") return absl::AsciiStrToLower(value);
  if (filter == "capitalize") {  // Python's str.capitalize (ASCII letters)
    std::string out = absl::AsciiStrToLower(value);
    if (!out.empty()) out[0] = absl::ascii_toupper(out[0]);
    return out;
  }
  if (absl::StartsWith(filter, "before:") || absl::StartsWith(filter, "after:")) {
    const bool before = filter[0] == 'b';
    const absl::string_view mark = filter.substr(before ? 7 : 6);
    const size_t at = value.find(std::string(mark));
    if (mark.empty() || at == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", mark, "' does not occur in \"", value, "\""));
    }
    return before ? value.substr(0, at) : value.substr(at + mark.size());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown template filter '", filter, "' (strip, lower, capitalize, before:X, after:X)"));
}

absl::StatusOr<std::string> Render(const std::string& tmpl, const json& doc) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t open = tmpl.find("{{", i);
    if (open == std::string::npos) {
      out.append(tmpl, i, std::string::npos);
      break;
    }
    out.append(tmpl, i, open - i);
    const size_t close = tmpl.find("}}", open + 2);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("template \"", tmpl, "\": '{{' without '}}'"));
    }
    std::vector<std::string> parts =
        absl::StrSplit(tmpl.substr(open + 2, close - open - 2), '|');
    const std::string path = PyStrip(parts[0]);
    HILNAS_ASSIGN_OR_RETURN(const json* v, Resolve(doc, path));
    HILNAS_ASSIGN_OR_RETURN(std::string value, Text(*v, path));
    for (size_t f = 1; f < parts.size(); ++f) {
      HILNAS_ASSIGN_OR_RETURN(value, ApplyFilter(PyStrip(parts[f]), std::move(value)));
    }
    out += value;
    i = close + 2;
  }
  return out;
}

absl::StatusOr<std::string> ReplaceAll(const tokenizer::Regex& re, const std::string& text,
                                       const std::string& with) {
  std::vector<std::pair<size_t, size_t>> matches;
  HILNAS_RETURN_IF_ERROR(re.FindAll(text, &matches));
  std::string out;
  size_t at = 0;
  for (auto [start, end] : matches) {
    out.append(text, at, start - at);
    out += with;
    at = end;
  }
  out.append(text, at, std::string::npos);
  return out;
}

// Everything one document yields, before few-shot context is added.
struct Rendered {
  std::string context;
  std::vector<std::string> choices;
  int gold = -1;
  std::string target;                // for few-shot examples (and WinoGrande)
  std::vector<std::string> answers;  // generation
};

class TaskBuilder {
 public:
  explicit TaskBuilder(const TaskConfig& c) : c_(c) {}

  absl::Status Compile() {
    for (const auto& r : c_.rewrite()) {
      auto re = tokenizer::Regex::Compile(r.regex(), /*literal=*/false);
      if (!re.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("rewrite regex \"", r.regex(), "\": ", re.status().message()));
      }
      rewrites_.emplace_back(*std::move(re), r.with());
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Rendered> RenderDoc(const Doc& d, const std::string& file) const {
    auto fail = [&](const absl::Status& s, absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(Where(file, d.line), ": ", what, ": ", s.message()));
    };
    Rendered r;
    auto context = Render(c_.context(), d.value);
    if (!context.ok()) return fail(context.status(), "context");
    HILNAS_ASSIGN_OR_RETURN(r.context, Rewrite(*context));
    if (c_.kind() == TaskConfig::GENERATE_UNTIL) {
      if (!c_.answers_field().empty()) {
        auto v = Resolve(d.value, c_.answers_field());
        if (!v.ok()) return fail(v.status(), "answers_field");
        if ((*v)->is_array()) {
          for (const json& a : **v) {
            auto t = Text(a, c_.answers_field());
            if (!t.ok()) return fail(t.status(), "answers_field");
            r.answers.push_back(*t);
          }
        } else {
          auto t = Text(**v, c_.answers_field());
          if (!t.ok()) return fail(t.status(), "answers_field");
          r.answers.push_back(*t);
        }
      } else {
        auto t = Render(c_.target(), d.value);
        if (!t.ok()) return fail(t.status(), "target");
        r.answers.push_back(*t);
      }
      if (r.answers.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(file, d.line), ": field '",
                                                       c_.answers_field(), "' has no answers"));
      }
      r.target = r.answers.front();
      return r;
    }
    // Multiple choice.
    if (!c_.choices_field().empty()) {
      auto v = Resolve(d.value, c_.choices_field());
      if (!v.ok()) return fail(v.status(), "choices_field");
      if (!(*v)->is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(file, d.line), ": field '",
                                                       c_.choices_field(), "' is not a list"));
      }
      for (const json& a : **v) {
        auto t = Text(a, c_.choices_field());
        if (!t.ok()) return fail(t.status(), "choices_field");
        HILNAS_ASSIGN_OR_RETURN(std::string choice, Rewrite(*t));
        r.choices.push_back(std::move(choice));
      }
    } else {
      for (int k = 0; k < c_.choice_size(); ++k) {
        auto t = Render(c_.choice(k), d.value);
        if (!t.ok()) return fail(t.status(), absl::StrCat("choice[", k, "]"));
        HILNAS_ASSIGN_OR_RETURN(std::string choice, Rewrite(*t));
        r.choices.push_back(std::move(choice));
      }
    }
    if (r.choices.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(file, d.line), ": no choices (field '", c_.choices_field(), "' is empty)"));
    }
    HILNAS_ASSIGN_OR_RETURN(r.gold, Gold(d, file, r.choices.size()));
    if (c_.choices_are_contexts()) {
      auto t = Render(c_.target(), d.value);
      if (!t.ok()) return fail(t.status(), "target");
      r.target = *t;
    } else {
      r.target = r.choices[r.gold];
    }
    return r;
  }

  absl::StatusOr<std::string> Rewrite(std::string text) const {
    for (const auto& [re, with] : rewrites_) {
      HILNAS_ASSIGN_OR_RETURN(text, ReplaceAll(*re, text, with));
    }
    return c_.strip_rendered() ? PyStrip(text) : text;
  }

 private:
  absl::StatusOr<int> Gold(const Doc& d, const std::string& file, size_t n) const {
    const std::string at = Where(file, d.line);
    auto v = Resolve(d.value, c_.gold_field());
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": gold_field: ", v.status().message()));
    }
    const json& g = **v;
    int64_t index = -1;
    if (g.is_boolean()) {
      index = g.get<bool>() ? 1 : 0;
    } else if (g.is_number_integer()) {
      index = g.get<int64_t>();
    } else if (g.is_string()) {
      const std::string label = g.get<std::string>();
      std::vector<std::string> labels(c_.gold_labels().begin(), c_.gold_labels().end());
      if (!c_.gold_labels_field().empty()) {
        auto l = Resolve(d.value, c_.gold_labels_field());
        if (!l.ok() || !(*l)->is_array()) {
          return absl::InvalidArgumentError(absl::StrCat(
              at, ": gold_labels_field '", c_.gold_labels_field(), "' is not a list in this document"));
        }
        labels.clear();
        for (const json& x : **l) labels.push_back(x.is_string() ? x.get<std::string>() : x.dump());
      }
      if (!labels.empty()) {
        auto it = std::find(labels.begin(), labels.end(), label);
        if (it == labels.end()) {
          return absl::InvalidArgumentError(absl::StrCat(at, ": gold '", label, "' (field '", c_.gold_field(),
                                                         "') is not one of the labels ",
                                                         absl::StrJoin(labels, ", ")));
        }
        index = it - labels.begin();
      } else if (!absl::SimpleAtoi(label, &index)) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ": gold '", label, "' (field '", c_.gold_field(), "') is not an index; set gold_labels"));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": gold (field '", c_.gold_field(), "') must be an index, a boolean or a label"));
    }
    if (index < 0 || index >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": gold ", index, " (field '", c_.gold_field(),
                                                     "') is out of range for ", n, " choices"));
    }
    return static_cast<int>(index);
  }

  const TaskConfig& c_;
  std::vector<std::pair<std::shared_ptr<const tokenizer::Regex>, std::string>> rewrites_;
};

absl::StatusOr<std::vector<Doc>> ReadJsonl(const std::string& path, const std::string& config_path,
                                           absl::string_view field, int64_t limit) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(
        config_path, ": ", field, " file ", path,
        " does not exist. hilnas never downloads task data: put the data set's JSONL there (one "
        "document per line, in the public copy's field layout) or point '", field, "' at it"));
  }
  std::ifstream in(path);
  std::vector<Doc> docs;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    Doc d;
    d.line = n;
    try {
      d.value = json::parse(line);
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(Where(path, n), ": not valid JSON: ", e.what()));
    }
    if (!d.value.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(Where(path, n), ": not a JSON object"));
    }
    d.text = line;
    docs.push_back(std::move(d));
    if (limit > 0 && static_cast<int64_t>(docs.size()) >= limit) break;
  }
  if (docs.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no documents"));
  return docs;
}

std::string Resolved(const std::string& config_path, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  return (fs::path(config_path).parent_path() / path).string();
}

}  // namespace

absl::StatusOr<std::string> RenderTemplate(const std::string& tmpl, const std::string& doc_json) {
  json doc;
  try {
    doc = json::parse(doc_json);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
  return Render(tmpl, doc);
}

absl::StatusOr<std::vector<std::string>> TaskDataPaths(const std::string& config_path) {
  TaskConfig c;
  HILNAS_RETURN_IF_ERROR(ReadTextProtoFile(config_path, &c));
  std::vector<std::string> out;
  for (const std::string& path : {c.data(), c.fewshot_data()}) {
    if (!path.empty()) out.push_back(Resolved(config_path, path));
  }
  return out;
}

absl::StatusOr<Task> LoadTask(const std::string& config_path, int64_t limit) {
  Task task;
  task.config_path = config_path;
  HILNAS_RETURN_IF_ERROR(ReadTextProtoFile(config_path, &task.config));
  TaskConfig& c = task.config;
  if (c.name().empty()) c.set_name(fs::path(config_path).stem().string());
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", what));
  };
  if (c.data().empty()) return bad("'data' (the JSONL file) is not set");
  if (c.context().empty() && !c.choices_are_contexts()) return bad("'context' (the prompt template) is not set");
  if (c.kind() == TaskConfig::MULTIPLE_CHOICE) {
    if (c.choices_field().empty() == (c.choice_size() == 0)) {
      return bad("a multiple-choice task needs exactly one of 'choices_field' and 'choice'");
    }
    if (c.gold_field().empty()) return bad("'gold_field' is not set");
    if (c.choices_are_contexts() && c.target().empty()) {
      return bad("choices_are_contexts needs 'target', the continuation scored after each choice");
    }
  } else if (c.answers_field().empty() && c.target().empty()) {
    return bad("a generation task needs 'answers_field' or 'target'");
  }
  if (c.num_fewshot() < 0 || c.num_fewshot() > 64) return bad("num_fewshot must be in 0..64");
  for (const std::string& pattern : c.regexes_to_ignore()) {
    if (auto re = tokenizer::Regex::Compile(pattern, false); !re.ok()) {
      return bad(absl::StrCat("regexes_to_ignore \"", pattern, "\": ", re.status().message()));
    }
  }
  if (c.max_gen_tokens() < 0 || c.max_gen_tokens() > 4096) return bad("max_gen_tokens must be in 0..4096");
  task.data_path = Resolved(config_path, c.data());
  HILNAS_ASSIGN_OR_RETURN(std::vector<Doc> docs, ReadJsonl(task.data_path, config_path, "data", limit));
  const bool separate_fewshot = !c.fewshot_data().empty();
  const std::string fewshot_path = separate_fewshot ? Resolved(config_path, c.fewshot_data()) : task.data_path;
  std::vector<Doc> fewshot_docs;
  if (c.num_fewshot() > 0) {
    if (separate_fewshot) {
      HILNAS_ASSIGN_OR_RETURN(fewshot_docs, ReadJsonl(fewshot_path, config_path, "fewshot_data", 0));
    } else if (limit > 0) {
      // Examples come from the whole file, not just the first `limit`.
      HILNAS_ASSIGN_OR_RETURN(fewshot_docs, ReadJsonl(fewshot_path, config_path, "data", 0));
    } else {
      fewshot_docs = docs;
    }
    const size_t need = c.num_fewshot() + (separate_fewshot ? 0 : 1);
    if (fewshot_docs.size() < need) {
      return bad(absl::StrCat(c.num_fewshot(), "-shot needs ", need, " documents in ", fewshot_path, "; it has ",
                              fewshot_docs.size()));
    }
  }
  TaskBuilder builder(c);
  HILNAS_RETURN_IF_ERROR(builder.Compile());
  const std::string target_delimiter = c.has_target_delimiter() ? c.target_delimiter() : " ";
  const std::string fewshot_delimiter = c.has_fewshot_delimiter() ? c.fewshot_delimiter() : "\n\n";
  // One generator for the whole run, drawn per document in order, as the
  // harness's sampler does (random.Random(fewshot_seed)).
  PyRandom rng(c.has_fewshot_seed() ? c.fewshot_seed() : 1234);
  // Few-shot examples are rendered once each, on first use.
  std::vector<std::optional<std::string>> example_text(fewshot_docs.size());
  for (const Doc& d : docs) {
    HILNAS_ASSIGN_OR_RETURN(Rendered r, builder.RenderDoc(d, task.data_path));
    std::string prefix = c.description();
    if (c.num_fewshot() > 0) {
      const size_t draw = c.num_fewshot() + (separate_fewshot ? 0 : 1);
      std::vector<std::string> shots;
      for (size_t k : rng.Sample(fewshot_docs.size(), draw)) {
        // The harness drops the document itself (compared by value) when
        // examples come from the split being scored.
        if (!separate_fewshot && fewshot_docs[k].value == d.value) continue;
        if (static_cast<int>(shots.size()) == c.num_fewshot()) break;
        if (!example_text[k]) {
          HILNAS_ASSIGN_OR_RETURN(Rendered e, builder.RenderDoc(fewshot_docs[k], fewshot_path));
          const std::string& ctx = c.choices_are_contexts() ? e.choices[e.gold] : e.context;
          example_text[k] = ctx + target_delimiter + e.target;
        }
        shots.push_back(*example_text[k]);
      }
      prefix += absl::StrJoin(shots, fewshot_delimiter) + fewshot_delimiter;
    }
    TaskItem item;
    item.line = d.line;
    if (c.kind() == TaskConfig::GENERATE_UNTIL) {
      item.contexts = {prefix + r.context};
      item.answers = std::move(r.answers);
    } else if (c.choices_are_contexts()) {
      for (const std::string& choice : r.choices) {
        item.contexts.push_back(prefix + choice);
        item.continuations.push_back(target_delimiter + r.target);
      }
      item.choice_texts = r.choices;
      item.gold = r.gold;
    } else {
      for (const std::string& choice : r.choices) {
        item.contexts.push_back(prefix + r.context);
        item.continuations.push_back(target_delimiter + choice);
      }
      item.choice_texts = r.choices;
      item.gold = r.gold;
    }
    task.items.push_back(std::move(item));
  }
  return task;
}

namespace {

using CompiledRegexes = std::vector<std::shared_ptr<const tokenizer::Regex>>;

std::string NormalizeForMatch(const TaskConfig& c, const CompiledRegexes& ignore, std::string s) {
  for (const auto& re : ignore) {
    auto replaced = ReplaceAll(*re, s, "");
    if (replaced.ok()) s = *std::move(replaced);
  }
  if (c.ignore_case()) s = absl::AsciiStrToLower(s);
  if (c.ignore_punctuation()) {
    // Python's string.punctuation.
    s.erase(std::remove_if(s.begin(), s.end(), [](char ch) { return std::ispunct(static_cast<unsigned char>(ch)) != 0; }),
            s.end());
  }
  return s;
}

}  // namespace

bool ExactMatch(const TaskConfig& config, const std::string& prediction,
                const std::vector<std::string>& answers) {
  // Compiled once for the prediction and every answer (LoadTask has
  // already refused a pattern that does not compile).
  CompiledRegexes ignore;
  for (const std::string& pattern : config.regexes_to_ignore()) {
    if (auto re = tokenizer::Regex::Compile(pattern, false); re.ok()) ignore.push_back(*std::move(re));
  }
  const std::string p = NormalizeForMatch(config, ignore, prediction);
  for (const std::string& a : answers) {
    if (NormalizeForMatch(config, ignore, a) == p) return true;
  }
  return false;
}

std::string CutAtStop(const TaskConfig& config, const std::string& text) {
  std::string s = text;
  for (const std::string& stop : config.until()) {
    if (stop.empty()) continue;
    const size_t at = s.find(stop);
    if (at != std::string::npos) s.resize(at);
  }
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

double MeanStderr(const std::vector<double>& values) {
  const size_t n = values.size();
  if (n < 2) return 0;
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(n);
  double ss = 0;
  for (double v : values) ss += (v - mean) * (v - mean);
  return std::sqrt(ss / static_cast<double>(n - 1)) / std::sqrt(static_cast<double>(n));
}

}  // namespace hilnas
