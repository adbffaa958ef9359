#include "tools/cli.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/blas_core.h"
#include "model/work_split.h"
#include "util/cpu_features.h"
#include "util/subprocess.h"

namespace hilnas::tools {
namespace {

// --prompt_tokens -> --prompt-tokens (the name before any "="), up to "--".
// "--pools=" becomes "--pools" "": CLI11 would take the next argument as the
// value of an empty "--name=" (so `--pools= --max-jobs=1` lost --max-jobs).
void NormaliseFlagNames(std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = std::move(args[i]);
    if (a == "--") {
      for (; i < args.size(); ++i) out.push_back(std::move(args[i]));
      break;
    }
    if (a.size() >= 3 && a.rfind("--", 0) == 0) {
      const size_t end = std::min(a.find('='), a.size());
      std::replace(a.begin() + 2, a.begin() + static_cast<long>(end), '_', '-');
      if (end == a.size() - 1) {  // "--name=" with nothing after it
        a.pop_back();
        out.push_back(std::move(a));
        out.emplace_back();
        continue;
      }
    }
    out.push_back(std::move(a));
  }
  args = std::move(out);
}

}  // namespace

Cli::Cli(std::string program, std::string description)
    : program_(std::move(program)),
      description_(std::move(description)),
      app_(description_, program_) {
  app_.require_subcommand(1);
  app_.option_defaults()->always_capture_default();
  app_.get_formatter()->column_width(34);
}

CLI::App* Cli::AddApp(const std::string& name, const std::string& synopsis,
                      const std::string& summary) {
  CLI::App* app = app_.add_subcommand(
      name, absl::StrCat(summary, "\n\nusage: ", program_, " ", name, " ", synopsis));
  synopses_.push_back({name, absl::StrCat(synopsis, "\n", summary)});
  return app;
}

void Cli::StableTiming(CLI::App* command, const int32_t* threads) {
  for (Entry& e : commands_) {
    if (e.app == command) {
      e.stable_timing = true;
      e.timing_threads = threads;
    }
  }
}

std::vector<CLI::App*> Cli::commands() const {
  std::vector<CLI::App*> out;
  for (const Entry& e : commands_) out.push_back(e.app);
  return out;
}

std::string Cli::Usage() const {
  std::string out =
      absl::StrCat(description_, "\n\nusage: ", program_, " COMMAND [ARGS] [--flags]   (", program_,
                   " COMMAND --help lists a command's flags)\n\n");
  for (const auto& [name, text] : synopses_) {
    const std::vector<std::string> lines = absl::StrSplit(text, '\n');
    absl::StrAppend(&out, "  ", name, " ", lines[0], "\n");
    for (size_t i = 1; i < lines.size(); ++i) absl::StrAppend(&out, "      ", lines[i], "\n");
  }
  return out;
}

int Cli::Main(int argc, char** argv, const std::string& implied_command) {
  // The variables the kernels read, checked before anything runs: a
  // HILNAS_CPU_FEATURES cap they would ignore (nothing is then timed with
  // the CPU's own features by mistake), a HILNAS_THREAD_POOL that names no
  // pool (model/work_split.h).
  for (const absl::Status& s : {CheckCpuFeaturesCap(), ThreadPoolFromEnvironment().status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "%s: error: %s\n", program_.c_str(), std::string(s.message()).c_str());
      return 2;
    }
  }
  // OpenBLAS's kernels from this CPU's features (model/blas_core.h): the
  // one re-execution below makes it count.
  const bool blas_core_set = SetBlasCoreForCpu();
  std::vector<std::string> args(argv + 1, argv + argc);
  NormaliseFlagNames(args);
  if (!implied_command.empty()) args.insert(args.begin(), implied_command);
  if (args.empty()) {
    std::fputs(Usage().c_str(), stderr);
    return 2;
  }
  if (args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    if (args.size() < 2) {
      std::fputs(Usage().c_str(), stdout);
      return 0;
    }
    args = {args[1], "--help"};
  }
  const auto chosen = std::find_if(commands_.begin(), commands_.end(),
                                   [&](const Entry& e) { return e.app->get_name() == args[0]; });
  if (chosen == commands_.end()) {
    std::fprintf(stderr, "%s: unknown command \"%s\"\n\n%s", program_.c_str(), args[0].c_str(),
                 Usage().c_str());
    return 2;
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  try {
    app_.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::fputs(chosen->app->help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s %s\n(%s %s --help lists its flags)\n", program_.c_str(),
                 chosen->app->get_name().c_str(), e.what(), program_.c_str(),
                 chosen->app->get_name().c_str());
    return 1;
  }
  if (chosen->stable_timing) {
    ReexecWithTimingThreads(argv, chosen->timing_threads ? *chosen->timing_threads : 0,
                            blas_core_set);
  } else if (blas_core_set) {
    ReexecForBlasCore(argv);
  }
  return chosen->run();
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "hilnas: error: %s\n", std::string(status.message()).c_str());
  return 1;
}

int ExitCode(const absl::Status& status) { return status.ok() ? 0 : Fail(status); }

}  // namespace hilnas::tools
