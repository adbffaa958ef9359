// The command line as declared: every command's help names every one of its
// options with its default; the README's command table and examples use
// only commands and flags that exist; flags parse as documented.
#include "tools/cli.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hilnas::tools {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Every command's long option names ("--seq-len"), from the declarations.
std::map<std::string, std::set<std::string>> DeclaredOptions(Cli& cli) {
  std::map<std::string, std::set<std::string>> out;
  for (CLI::App* command : cli.commands()) {
    std::set<std::string>& names = out[command->get_name()];
    for (const CLI::Option* o : command->get_options([](const CLI::Option*) { return true; })) {
      for (const std::string& name : o->get_lnames()) names.insert("--" + name);
    }
    for (const CLI::App* group : command->get_subcommands([](const CLI::App*) { return true; })) {
      for (const CLI::Option* o : group->get_options()) {
        for (const std::string& name : o->get_lnames()) names.insert("--" + name);
      }
    }
  }
  return out;
}

struct Output {
  int exit_code;
  std::string text;
};

Output Hilnas(const std::string& args) {
  const std::string cmd = std::string(HILNAS_BINARY_DIR) + "/tools/hilnas " + args + " 2>&1";
  Output r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.text.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(CliTest, EveryCommandsHelpNamesEachOfItsOptionsAndDefaults) {
  Cli cli("hilnas", "test");
  AddAllCommands(cli);
  ASSERT_EQ(cli.commands().size(), 25u);
  int options = 0;
  for (CLI::App* command : cli.commands()) {
    const std::string help = command->help();
    EXPECT_THAT(help, HasSubstr("usage: hilnas " + command->get_name())) << command->get_name();
    for (const CLI::Option* o : command->get_options()) {
      if (o->get_lnames().empty()) continue;  // positionals, -h
      ++options;
      EXPECT_THAT(help, HasSubstr("--" + o->get_lnames()[0])) << command->get_name();
      EXPECT_FALSE(o->get_description().empty()) << command->get_name() << " " << o->get_name();
      const std::string def = o->get_default_str();
      if (!def.empty() && def != "[]") {
        EXPECT_THAT(help, HasSubstr("=" + def)) << command->get_name() << " " << o->get_name();
      }
    }
  }
  EXPECT_GT(options, 150);
}

TEST(CliTest, HelpOfOneCommandIsThatCommandsFlagsOnly) {
  Output eval = Hilnas("eval --help");
  EXPECT_EQ(eval.exit_code, 0);
  EXPECT_THAT(eval.text, HasSubstr("--windows INT=0"));
  EXPECT_THAT(eval.text, HasSubstr("--heldout FLOAT:FLOAT in [0 - 1]=0"));
  EXPECT_THAT(eval.text, Not(HasSubstr("--listen")));
  Output help = Hilnas("help coordinator");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.text, HasSubstr("--lease-ttl-ms"));
  EXPECT_THAT(help.text, Not(HasSubstr("--windows")));
}

TEST(CliTest, FlagsParseAsDocumented) {
  // Underscores for dashes, and a flag another command owns is an error
  // naming it (it used to be ignored).
  Output underscores = Hilnas("space sample --n 2 --seed_not_a_flag 3");
  EXPECT_EQ(underscores.exit_code, 1);
  EXPECT_THAT(underscores.text, HasSubstr("--seed-not-a-flag"));
  Output ok = Hilnas("space sample --n=2 --seed 3");
  EXPECT_EQ(ok.exit_code, 0) << ok.text;
  // An empty "--flag=" is an empty value, not a claim on the next argument
  // (CLI11 alone reads `--space= --n=2` as --space "--n=2"; `hilnas fleet`
  // passed `--pools= --max-jobs=1` to its agents, which then never exited).
  Output empty = Hilnas("space sample --space= --n=2");
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_THAT(empty.text, HasSubstr("--space: File does not exist: \n"));
  EXPECT_THAT(empty.text, Not(HasSubstr("--n=2")));
  Output foreign = Hilnas("shapes list --listen 1.2.3.4:5");
  EXPECT_EQ(foreign.exit_code, 1);
  EXPECT_THAT(foreign.text, HasSubstr("--listen"));
  Output range = Hilnas("space sample --n 0");
  EXPECT_EQ(range.exit_code, 1);
  EXPECT_THAT(range.text, HasSubstr("--n: Value 0 not in range 1 to 1000000"));
  Output both = Hilnas("run --shape mobilellm-flash-350m --arch x.textproto");
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_THAT(both.text, HasSubstr("excludes"));
  Output missing = Hilnas("eval --tokens x");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.text, HasSubstr("--ckpt is required"));
  Output unknown = Hilnas("frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  Output none = Hilnas("");
  EXPECT_EQ(none.exit_code, 2);
}

// The README's table rows and example lines: each `hilnas CMD ... --flag`
// names a command and only that command's flags.
TEST(CliTest, ReadmeUsesOnlyDeclaredCommandsAndFlags) {
  Cli cli("hilnas", "test");
  AddAllCommands(cli);
  const auto declared = DeclaredOptions(cli);
  std::ifstream in(std::string(HILNAS_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in.good());
  std::set<std::string> in_table;
  const std::regex mention(R"((?:^\| `|build/tools/)hilnas ([a-z]+)([^|]*))");
  const std::regex flag(R"(--[a-z][a-z0-9_-]*)");
  std::string line;
  int checked = 0;
  for (int n = 1; std::getline(in, line); ++n) {
    std::smatch m;
    if (!std::regex_search(line, m, mention)) continue;
    const std::string command = m[1];
    if (command == "help") continue;
    ASSERT_TRUE(declared.count(command)) << "README.md:" << n << ": no command " << command;
    if (line.rfind("| `", 0) == 0) in_table.insert(command);
    const std::string rest = m[2];
    for (std::sregex_iterator f(rest.begin(), rest.end(), flag), end; f != end; ++f) {
      std::string name = f->str();
      std::replace(name.begin() + 2, name.end(), '_', '-');
      EXPECT_TRUE(declared.at(command).count(name))
          << "README.md:" << n << ": hilnas " << command << " has no flag " << name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
  for (const auto& [command, options] : declared) {
    EXPECT_TRUE(in_table.count(command)) << "README.md's command table lacks hilnas " << command;
  }
}

}  // namespace
}  // namespace hilnas::tools
