// The command line of `hilnas` (and of hilnas-agent): one CLI11 subcommand
// per command, each with its own options struct, declared once where the
// command is (tools/commands/NAME.cc). Parsing, range and file checks,
// mutually exclusive groups and `hilnas CMD --help` all come from those
// declarations; docs/commands.md and the README's table are checked against
// them (tools/cli_test.cc).
//
// CLI11 (Debian's libcli11-dev, header-only) rather than Abseil flags:
// Abseil's flags are process-wide globals, one namespace for every command,
// so each command could not have its own options, defaults or help, and a
// flag given to the wrong command was silently ignored. CLI11 has
// subcommands with their own options, validators, option groups with
// exclusions, and generated help.
#ifndef HILNAS_TOOLS_CLI_H_
#define HILNAS_TOOLS_CLI_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace hilnas::tools {

class Cli {
 public:
  // `program`: "hilnas"; `description`: the first line of `hilnas help`.
  Cli(std::string program, std::string description);

  // Adds command `name`. `synopsis` is its usage after the name ("list |
  // show NAME"); `summary` what it does. The command's options live as long
  // as the Cli; `run` sees them once parsed.
  template <typename Options>
  std::pair<CLI::App*, Options*> Add(const std::string& name, const std::string& synopsis,
                                     const std::string& summary,
                                     std::function<int(const Options&)> run) {
    auto options = std::make_shared<Options>();
    Options* raw = options.get();
    CLI::App* app = AddApp(name, synopsis, summary);
    commands_.push_back(Entry{app, [raw, run] { return run(*raw); }, false, nullptr, options});
    return {app, raw};
  }

  // The command re-executes once for stable timing and compute speed with
  // `*threads` (null: the default), before it runs: with OpenMP's default
  // policy idle workers spin while OpenBLAS's threads want the same cores
  // (`hilnas eval` of the demo backbone on 2 threads: 4,500-5,900 tokens/s
  // spinning, 12,000 passive). util/subprocess.h, ReexecWithTimingThreads.
  void StableTiming(CLI::App* command, const int32_t* threads);

  // Parses argv and runs the chosen command; returns the exit code: 0,
  // 1 for a bad flag value or a failed command, 2 for no or an unknown
  // command. Flags accept dashes or underscores (--prompt_tokens).
  // `implied_command`: the command argv is for without naming it
  // (hilnas-agent).
  int Main(int argc, char** argv, const std::string& implied_command = "");

  // `hilnas help`: every command's synopsis and summary.
  std::string Usage() const;

  CLI::App& app() { return app_; }
  // Every command, in the order added.
  std::vector<CLI::App*> commands() const;

 private:
  struct Entry {
    CLI::App* app;
    std::function<int()> run;
    bool stable_timing;
    const int32_t* timing_threads;  // null: 0, the runtime's default
    std::shared_ptr<void> options;
  };
  CLI::App* AddApp(const std::string& name, const std::string& synopsis,
                   const std::string& summary);

  std::string program_;
  std::string description_;
  CLI::App app_;
  std::vector<Entry> commands_;
  std::vector<std::pair<std::string, std::string>> synopses_;  // name, synopsis + summary
};

// Prints the error to stderr ("hilnas: error: ...") and returns exit code 1.
int Fail(const absl::Status& status);
// 0 for OK, else Fail(status).
int ExitCode(const absl::Status& status);

// Every `hilnas` command, added to `cli` (tools/commands/*.cc).
void AddAllCommands(Cli& cli);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_CLI_H_
