// The measurement flags of `hilnas agent` that `hilnas fleet` passes on to
// each agent it starts.
#ifndef HILNAS_TOOLS_COMMANDS_AGENT_H_
#define HILNAS_TOOLS_COMMANDS_AGENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace hilnas::tools {

struct AgentGateFlags {
  std::string pools;
  int32_t max_jobs = 0;
  double cooldown_ms = 100;
  double max_foreign_cores = 0.25;
  double max_memory_slowdown = 0;
  double max_temperature_c = 0;
  int32_t max_discards = 5;
  double discard_cooldown_ms = 1000;
  bool canary = true;
  int32_t canary_every_jobs = 10;
  int64_t canary_every_s = 300;
  int64_t drift_cooldown_ms = 5000;
  std::vector<std::string> data_roots;  // --data-root, repeatable
};
void AddAgentGateFlags(CLI::App* app, AgentGateFlags* flags);
// The same settings as `hilnas agent` flags.
std::vector<std::string> AgentGateArgs(const AgentGateFlags& flags);

// --compare-llama-bench and the flags it reads (tools/commands/agent_compare.cc).
struct CompareFlags {
  std::string llama_bench;  // empty: no comparison
  std::string arch;         // a file; default: bench/runtime_compare.sh's full4
  std::string prompts = "256,1024";
  std::string threads;  // e.g. "1,4"; empty: the agent's --threads
  std::string dtype = "f32";
  std::string kv_dtype = "f16";  // both runtimes' caches: f16 | q8_0
  int32_t repeats = 3;
  int32_t decode_tokens = 64;
};
void AddCompareFlags(CLI::App* app, CompareFlags* flags);
// Prints the table; the exit code.
int CompareWithLlamaBench(const CompareFlags& flags, int threads);

// --price-windows and the flags it reads (tools/commands/agent_pricing.cc).
struct PricingFlags {
  bool price_windows = false;
  std::string arch;  // a file; default: full4 with a window of 128
  int32_t prompt = 2048;
  int32_t rounds = 3;
  int32_t decode_tokens = 64;
  std::string dtype = "f32";
  std::string kv_dtype = "f16";
};
void AddPricingFlags(CLI::App* app, PricingFlags* flags);
// Prints the tables; the exit code.
int PriceWindowsHere(const PricingFlags& flags, int threads, int64_t memory_limit_bytes);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_AGENT_H_
