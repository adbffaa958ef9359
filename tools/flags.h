// The parsed command line of `hilnas`: one field per flag, grouped by the
// commands that read them. Defaults and help texts are the flags' own, in
// flags.cc; a CommandLine is only ever made by ParseCommandLine or copied
// from one.
#ifndef HILNAS_TOOLS_FLAGS_H_
#define HILNAS_TOOLS_FLAGS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace hilnas::tools {

struct CommandLine {
  // agent, fleet
  std::string name;
  std::string cpu_set;
  std::string pools;
  std::string runtime;
  std::string external_format;
  std::string export_command;
  std::string bench_command;
  std::string runtime_name;
  std::string runtime_version;
  int32_t max_jobs = 0;
  double cooldown_ms = 0;
  double max_foreign_cores = 0.25, max_temperature_c = 0, discard_cooldown_ms = 1000;
  double max_memory_slowdown = 0;
  int max_discards = 5;
  bool canary = true;
  int32_t canary_every_jobs = 10;
  int64_t canary_every_s = 300, drift_cooldown_ms = 5000;
  int64_t memory_limit_mb = 0;
  int32_t agents = 0;
  std::string fleet_threads;
  // campaign, pareto, export
  std::string config;
  bool wait = false;
  std::string format;
  bool all = false;
  std::string campaign;
  int64_t trial = 0;
  // coordinator, bench, agents, latency collect
  std::string listen;
  std::string db;
  std::string port_file;
  int64_t lease_ttl_ms = 0;
  int64_t heartbeat_ms = 0;
  int32_t max_attempts = 0;
  std::string canary_request;
  double canary_tolerance = 0.10;
  int32_t max_drift_requeues = 2;
  std::string work_dir;
  std::string http;
  std::string http_port_file;
  std::string prompt_lengths;
  int32_t decode_tokens = 0;
  int32_t repeats = 0;
  int32_t max_repeats = 0;
  double max_spread = 0;
  int32_t warmups = 0;
  std::string precision;
  std::string device;
  std::string pool;
  int64_t wait_s = 0;
  // slim, ppd
  std::string in;
  double max_condition = 0;
  double max_error = 0;
  int32_t layer = 0;
  int32_t k = 0;
  int32_t prompts = 0;
  // latency
  std::string data;
  std::string model;
  std::string prior_model;
  std::string metric;
  int32_t folds = 0;
  std::string plot;
  int32_t restarts = 0;
  std::string gp_prior;
  // corpus, train, calibrate, prune, backbone
  std::string tokens;
  std::string sources;
  double heldout = 0;
  int64_t steps = 0;
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  double lr = 0;
  int64_t warmup_steps = 0;
  double weight_decay = 0;
  double grad_clip = 0;
  std::string distill_from;
  std::string result_json;
  int64_t windows = 64;    // eval: held-out windows
  int64_t passes = 1;      // latency collect: test-retest passes
  std::string prompt;      // generate: text (byte vocabularies)
  std::string prompt_ids;  // generate: 1,2,3
  std::string logits_out;  // generate: the prompt's logits as .npy  // train: {"loss": ...} for an
                           // external evaluator
  double distill_weight = 0;
  int64_t eval_every = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t calib_tokens = 0;
  std::string base;
  std::string metrics;
  int32_t layers = 0;
  int32_t d_model = 0;
  int32_t d_ffn = 0;
  std::string pattern;
  int32_t window = 0;
  int64_t backbone_steps = 0;
  double kvp_consistency_weight = 0;
  double kvp_aux_weight = 0;
  int32_t block_size = 0;
  // shared by several commands
  std::string shape;
  std::string arch;
  std::string ckpt;
  std::string space;
  std::string out;
  std::string dtype;
  std::string weight_dtype;
  int64_t prompt_tokens = 0;
  int64_t max_new_tokens = 0;
  int64_t prefill_chunk = 0;
  int32_t threads = 0;
  uint64_t seed = 0;
  int32_t n = 0;
  bool json = false;
  std::string coordinator;
  std::string token;
  bool overwrite = false;  // prune, train, checkpoint init, slim: replace a non-empty --out
  bool values = false;     // checkpoint check: scan every weight for NaN/Inf
  // security (coordinator, agents, every client command)
  std::string user_token;
  std::string user_tokens_file;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string tls_server_name;
  bool insecure = false;
  std::vector<std::string> data_roots;  // --data-root, repeatable
  std::vector<std::string> evaluators;  // --evaluator NAME=TEMPLATE, repeatable
  int64_t max_queued_jobs = 0;
  int32_t max_campaigns = 0;
  int64_t max_model_mb = 0;
  int32_t max_message_mb = 0;

  // Flags moved off their defaults, by Abseil name ("max_new_tokens"): a
  // command whose own default differs from a shared flag's asks this.
  std::set<std::string> changed;
  bool Changed(const std::string& flag) const { return changed.count(flag) > 0; }
};

// Accepts --prompt-tokens as well as Abseil's --prompt_tokens: argv with
// dashes in flag names turned into underscores.
std::vector<std::string> NormaliseFlagNames(int argc, char** argv);

// Flags that may be given more than once (--data-root, --evaluator): Abseil
// keeps only the last value of a flag, so main() takes every occurrence out
// of argv first. Returns them by flag name ("data_root"); `argv` keeps the rest.
std::map<std::string, std::vector<std::string>> TakeRepeatedFlags(std::vector<std::string>& argv);

// Reads every flag (after absl::ParseCommandLine) plus the repeated ones.
CommandLine ParseCommandLine(const std::map<std::string, std::vector<std::string>>& repeated = {});

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_FLAGS_H_
