// Every flag of the `hilnas` binary, defined here and nowhere else, and
// read once, by ParseCommandLine, into a CommandLine (llama-bench parses
// into cmd_params the same way). Commands receive the struct; a command
// that runs another passes it a modified copy, never a global.
#include "tools/flags.h"

#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"

// agent, fleet
ABSL_FLAG(std::string, name, "", "agent: device name, unique per coordinator (default: hostname)");
ABSL_FLAG(std::string, cpu_set, "", "agent: pin to these CPUs, e.g. 0-1 or 2,3");
ABSL_FLAG(std::string, pools, "", "agent: comma-separated pools this device serves, e.g. s25");
ABSL_FLAG(std::string, runtime, "libtorch", "agent: libtorch | external");
ABSL_FLAG(std::string, external_format, "llama-bench", "agent: llama-bench | executorch");
ABSL_FLAG(std::string, export_command, "",
          "agent: external runtime: command making {model} from {config}/{checkpoint}, or "
          "builtin:gguf (hilnas writes llama.cpp's GGUF file)");
ABSL_FLAG(std::string, bench_command, "",
          "agent: external runtime: command timing {model} at {prompt_tokens}/{decode_tokens}/"
          "{depth}/{threads}");
ABSL_FLAG(std::string, runtime_name, "", "agent: external runtime's name, e.g. llama.cpp");
ABSL_FLAG(std::string, runtime_version, "", "agent: external runtime's version, e.g. b4521");
ABSL_FLAG(int32_t, max_jobs, 0, "agent: exit after this many jobs (0 = run until stopped)");
ABSL_FLAG(double, cooldown_ms, 100, "agent: idle time between timed runs");
ABSL_FLAG(double, max_foreign_cores, 0.25,
          "agent: quiet-machine gate: retake a run during which other processes used more than "
          "this many of the agent's CPUs (0: off)");
ABSL_FLAG(double, max_memory_slowdown, 0,
          "agent: memory gate: time a run only when a read of its working set is within "
          "1 + this of the agent's baseline (0: off)");
ABSL_FLAG(double, max_temperature_c, 0,
          "agent: quiet-machine gate: retake a run taken above this temperature, C (0: off)");
ABSL_FLAG(int32_t, max_discards, 5,
          "agent: quiet-machine gate: retakes per prompt length before noisy runs are kept");
ABSL_FLAG(double, discard_cooldown_ms, 1000, "agent: quiet-machine gate: wait before a retake");
ABSL_FLAG(bool, canary, true,
          "agent: run the coordinator's drift-check canary before the first job and every "
          "--canary_every_jobs jobs or --canary_every_s seconds");
ABSL_FLAG(int32_t, canary_every_jobs, 10,
          "agent: re-time the canary after this many jobs (0: off)");
ABSL_FLAG(int64_t, canary_every_s, 300, "agent: re-time the canary when older than this (0: off)");
ABSL_FLAG(int64_t, drift_cooldown_ms, 5000,
          "agent: rest this long after a job was re-queued for drift, then re-time the canary");
ABSL_FLAG(int64_t, memory_limit_mb, 0,
          "agent: refuse models needing more (weights + KV cache); 0 = MemAvailable");
ABSL_FLAG(int32_t, agents, 2, "fleet: how many local agents");
ABSL_FLAG(std::string, fleet_threads, "",
          "fleet: threads per agent, cycled (e.g. 1,2); default: cores / agents");

// campaign, pareto, export
ABSL_FLAG(std::string, config, "", "campaign create: the campaign .textproto");
ABSL_FLAG(bool, wait, false, "campaign start/resume: follow progress until the campaign ends");
ABSL_FLAG(std::string, format, "csv", "pareto export: csv | json");
ABSL_FLAG(bool, all, false, "pareto show: every trial of both stages, not only the evaluated ones");
ABSL_FLAG(std::string, campaign, "", "export / latency: the campaign");
ABSL_FLAG(int64_t, trial, 0, "export: the trial number");

// coordinator, bench, agents, latency collect
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "coordinator: address to serve gRPC on");
ABSL_FLAG(std::string, db, "hilnas.db", "coordinator: SQLite file holding agents, jobs, results");
ABSL_FLAG(std::string, port_file, "", "coordinator: write the bound port here once serving");
ABSL_FLAG(int64_t, lease_ttl_ms, 30'000,
          "coordinator: a lease not renewed for this long expires and its job goes back");
ABSL_FLAG(int64_t, heartbeat_ms, 2'000, "coordinator: heartbeat interval told to agents");
ABSL_FLAG(int32_t, max_attempts, 3, "coordinator: lease expiries before a job fails");
ABSL_FLAG(std::string, canary_request, "default",
          "coordinator: the drift-check canary agents re-time: default | none | a BenchmarkRequest "
          ".textproto");
ABSL_FLAG(double, canary_tolerance, 0.10,
          "coordinator: re-queue a job whose agent's canary ran more than this fraction off its "
          "baseline");
ABSL_FLAG(int32_t, max_drift_requeues, 2,
          "coordinator: drift re-queues per job before its result is kept, marked drifted");
ABSL_FLAG(std::string, work_dir, "",
          "coordinator: campaign trials' pruned checkpoints go here (default DB.work)");
ABSL_FLAG(std::string, http, "",
          "coordinator: serve the web page on HOST:PORT too, e.g. 127.0.0.1:8080 (port 0 picks)");
ABSL_FLAG(std::string, http_port_file, "", "coordinator: write the web page's port here");
ABSL_FLAG(std::string, prompt_lengths, "1024,2048,4096",
          "bench: prompt lengths in tokens (MobileLLM-Flash Sec. 4.2.2)");
ABSL_FLAG(int32_t, decode_tokens, 16, "bench: tokens decoded after each prompt");
ABSL_FLAG(int32_t, repeats, 3, "bench: minimum timed runs per prompt length");
ABSL_FLAG(int32_t, max_repeats, 10, "bench: cap on timed runs while the spread stays high");
ABSL_FLAG(double, max_spread, 0.05, "bench: stop repeating once MAD/median is below this");
ABSL_FLAG(int32_t, warmups, 1, "bench: untimed warm-up runs per prompt length");
ABSL_FLAG(std::string, precision, "fp32", "bench: fp32 | bf16 | fp16");
ABSL_FLAG(std::string, device, "", "bench: run on this agent name only");
ABSL_FLAG(std::string, pool, "", "bench: run on an agent of this pool");
ABSL_FLAG(int64_t, wait_s, 3600, "bench: give up waiting for the result after this long");

// slim, ppd
ABSL_FLAG(std::string, in, "", "slim: the standard-cache checkpoint to convert");
ABSL_FLAG(double, max_condition, 1e5, "slim: largest accepted condition number of a layer's W_K");
ABSL_FLAG(double, max_error, 1e-3,
          "slim: largest accepted relative error of W_K W_KV against W_V in the stored dtype");
ABSL_FLAG(int32_t, layer, 0, "ppd: early-prediction layer d_bar (d/2 <= d_bar < d)");
ABSL_FLAG(int32_t, k, 1, "ppd: early candidates, one sub-computation (compute unit) each");
ABSL_FLAG(int32_t, prompts, 4, "ppd: held-out prompts taken from --tokens");

// latency
ABSL_FLAG(std::string, data, "", "latency: measurements CSV (see `hilnas latency collect`)");
ABSL_FLAG(std::string, model, "", "latency: fitted model file");
ABSL_FLAG(std::string, prior_model, "",
          "latency fit/eval: another device's fitted model (same space and metric) to transfer "
          "from: its prediction becomes the prior mean, affinely mapped to this device's points");
ABSL_FLAG(std::string, metric, "ttft", "latency: ttft | decode");
ABSL_FLAG(int32_t, folds, 10, "latency eval: cross-validation folds");
ABSL_FLAG(std::string, plot, "", "latency eval: write a predicted-vs-measured SVG here");
ABSL_FLAG(int32_t, restarts, 3, "latency: GP hyperparameter restarts");
ABSL_FLAG(std::string, gp_prior, "dim-scaled",
          "latency: lengthscale prior, dim-scaled (LogNormal, BoTorch 2024) | gamma (Gamma(3,6))");

// corpus, train, calibrate, prune, backbone
ABSL_FLAG(std::string, tokens, "", "token file (uint16 ids; *.u32 for uint32)");
ABSL_FLAG(std::string, sources, "",
          "corpus: comma-separated text files or folders; default the Debian fortunes and "
          "common licences");
ABSL_FLAG(double, heldout, 0.05, "train: fraction of the token file's tail held out for eval");
ABSL_FLAG(int64_t, steps, 200, "train: optimiser steps");
ABSL_FLAG(int64_t, batch_size, 16, "train/calibrate: sequences per batch");
ABSL_FLAG(int64_t, seq_len, 128, "train/calibrate: tokens per sequence");
ABSL_FLAG(double, lr, 3e-3, "train: peak learning rate (AdamW)");
ABSL_FLAG(int64_t, warmup_steps, 20, "train: linear warm-up steps before cosine decay");
ABSL_FLAG(double, weight_decay, 0.1, "train: AdamW decoupled weight decay (not on norms)");
ABSL_FLAG(double, grad_clip, 1.0, "train: global gradient-norm clip; 0 = off");
ABSL_FLAG(std::string, distill_from, "", "train: teacher checkpoint for knowledge distillation");
ABSL_FLAG(int64_t, passes, 1,
          "latency collect: measure every architecture this many times, each pass in its own "
          "shuffled order after the last (test-retest)");
ABSL_FLAG(int64_t, windows, 64, "eval: held-out windows of --seq-len (the trainer's eval_windows)");
ABSL_FLAG(std::string, prompt, "", "generate: prompt text (byte-level vocabularies)");
ABSL_FLAG(std::string, prompt_ids, "", "generate: prompt token ids, comma-separated");
ABSL_FLAG(std::string, logits_out, "",
          "generate: write the prompt positions' logits here (.npy, float32)");
ABSL_FLAG(std::string, result_json, "",
          "train: also write {\"loss\": ...} here (what an external or Slurm evaluator reads)");
ABSL_FLAG(double, distill_weight, 0.5, "train: KD weight when --distill-from is given");
ABSL_FLAG(int64_t, eval_every, 50, "train: steps between held-out evaluations");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "train: resumable checkpoints here (an existing one is resumed)");
ABSL_FLAG(int64_t, checkpoint_every, 100, "train: steps between resumable checkpoints");
ABSL_FLAG(int64_t, calib_tokens, 1 << 17, "calibrate: calibration positions used");
ABSL_FLAG(std::string, base, "", "prune: backbone checkpoint folder");
ABSL_FLAG(std::string, metrics, "", "prune/calibrate: metrics file; default BASE/metrics.json");
ABSL_FLAG(int32_t, layers, 0, "prune: target depth (0 = the backbone's)");
ABSL_FLAG(int32_t, d_model, 0, "prune: target residual width (0 = the backbone's)");
ABSL_FLAG(int32_t, d_ffn, 0, "prune: target FFN width (0 = the backbone's)");
ABSL_FLAG(std::string, pattern, "", "prune: attention per target layer, F full W window S skip");
ABSL_FLAG(int32_t, window, 0, "prune: sliding window for W layers");
ABSL_FLAG(int64_t, backbone_steps, 600, "backbone: training steps of the demo backbone recipe");
ABSL_FLAG(double, kvp_consistency_weight, -1,
          "train (KV prediction): weight of the L1 consistency loss; < 0 takes 1 / n_B (Tab. 2)");
ABSL_FLAG(double, kvp_aux_weight, 1, "train (KV prediction): weight of the auxiliary model's CE");
ABSL_FLAG(int32_t, block_size, 128, "prune: width block (MobileLLM-Flash Sec. 3.3 uses 128)");

// shared by several commands
ABSL_FLAG(std::string, shape, "", "published shape name (see `hilnas shapes list`)");
ABSL_FLAG(std::string, arch, "", "ArchSpec .textproto file, or a Hugging Face config.json");
ABSL_FLAG(std::string, ckpt, "", "checkpoint folder (config.json + model.safetensors)");
ABSL_FLAG(std::string, space, "", "SearchSpace .textproto file; default: MobileLLM-Flash Tab. 3");
ABSL_FLAG(std::string, out, "", "output path");
ABSL_FLAG(std::string, dtype, "f32",
          "f32 | bf16 | f16 (compute dtype, or storage for checkpoints)");
ABSL_FLAG(std::string, weight_dtype, "f32",
          "run: store the matrices in bf16 or f16 and compute in f32, as phones run "
          "half-precision weights (decode reads half the bytes)");
ABSL_FLAG(int64_t, prompt_tokens, 256, "prompt length in tokens");
ABSL_FLAG(int64_t, max_new_tokens, 16, "tokens to generate");
ABSL_FLAG(int64_t, prefill_chunk, 1024, "prefill chunk in tokens (MobileLLM-Flash Sec. 4.2.2)");
ABSL_FLAG(int32_t, threads, 0, "intra-op threads; 0 = libtorch's default");
ABSL_FLAG(uint64_t, seed, 0, "random seed (weights, prompts, Sobol)");
ABSL_FLAG(int32_t, n, 8, "how many (space sample)");
ABSL_FLAG(bool, json, false, "machine-readable output where supported");
ABSL_FLAG(std::string, coordinator, "",
          "coordinator address HOST:PORT; default $HILNAS_COORDINATOR, then 127.0.0.1:50051");
ABSL_FLAG(std::string, token, "", "enrollment token agents present; default $HILNAS_TOKEN");

ABSL_FLAG(bool, overwrite, false,
          "prune, train, checkpoint init, slim: replace an existing non-empty --out (never an "
          "input); the new checkpoint is written beside it and renamed into place");
ABSL_FLAG(bool, values, false, "checkpoint check: also scan every weight for NaN and Inf");

// security (docs/security.md)
ABSL_FLAG(std::string, user_token, "",
          "user token: the coordinator accepts it (named \"user\"), clients present it; default "
          "$HILNAS_USER_TOKEN");
ABSL_FLAG(
    std::string, user_tokens_file, "",
    "coordinator: more user tokens, one \"NAME TOKEN\" per line (NAME goes to the audit log)");
ABSL_FLAG(std::string, tls_ca, "",
          "agents and clients: verify the coordinator's certificate against this CA (PEM); "
          "default $HILNAS_TLS_CA");
ABSL_FLAG(std::string, tls_cert, "",
          "coordinator: serve gRPC and the web page over TLS with this certificate (PEM); agent: "
          "client certificate for mutual TLS");
ABSL_FLAG(std::string, tls_key, "", "the private key of --tls-cert (PEM)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "coordinator: require client certificates signed by this CA (mutual TLS)");
ABSL_FLAG(std::string, tls_server_name, "",
          "agents and clients: the name the coordinator's certificate carries, when it differs "
          "from the dialled host (a phone through adb reverse dials 127.0.0.1)");
ABSL_FLAG(bool, insecure, false,
          "coordinator: listen on a non-loopback address without TLS, tokens or data roots");
ABSL_FLAG(std::string, data_root, "",
          "coordinator: paths in received campaign configs and benchmark requests must lie "
          "under this folder (repeatable)");
ABSL_FLAG(std::string, evaluator, "",
          "coordinator: NAME=TEMPLATE, a quality evaluator campaigns may name (repeatable); the "
          "template runs with {checkpoint} and {output} filled in");
ABSL_FLAG(int64_t, max_queued_jobs, 10'000,
          "coordinator: refuse submissions while this many jobs are queued or running");
ABSL_FLAG(int32_t, max_campaigns, 100, "coordinator: refuse to create more campaigns than this");
ABSL_FLAG(int64_t, max_model_mb, 64 << 10,
          "coordinator: refuse benchmark jobs whose weights + KV cache need more MiB than this");
ABSL_FLAG(int32_t, max_message_mb, 4, "coordinator: largest gRPC message accepted, MiB");

namespace hilnas::tools {

// Accept --prompt-tokens as well as Abseil's --prompt_tokens.
std::vector<std::string> NormaliseFlagNames(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  for (std::string& a : out) {
    if (a.size() < 3 || a.rfind("--", 0) != 0) continue;
    const size_t end = std::min(a.find('='), a.size());
    for (size_t i = 2; i < end; ++i) {
      if (a[i] == '-') a[i] = '_';
    }
  }
  return out;
}

std::map<std::string, std::vector<std::string>> TakeRepeatedFlags(std::vector<std::string>& argv) {
  static const char* const kRepeated[] = {"data_root", "evaluator"};
  std::map<std::string, std::vector<std::string>> out;
  std::vector<std::string> rest;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    bool taken = false;
    for (const char* name : kRepeated) {
      const std::string flag = std::string("--") + name;
      if (a == flag && i + 1 < argv.size()) {
        out[name].push_back(argv[++i]);
        taken = true;
      } else if (a.rfind(flag + "=", 0) == 0) {
        out[name].push_back(a.substr(flag.size() + 1));
        taken = true;
      }
    }
    if (a == "--") {  // everything after is positional
      rest.insert(rest.end(), argv.begin() + static_cast<long>(i), argv.end());
      break;
    }
    if (!taken) rest.push_back(a);
  }
  argv = std::move(rest);
  return out;
}

CommandLine ParseCommandLine(const std::map<std::string, std::vector<std::string>>& repeated) {
  CommandLine cl;
  if (auto it = repeated.find("data_root"); it != repeated.end()) cl.data_roots = it->second;
  if (auto it = repeated.find("evaluator"); it != repeated.end()) cl.evaluators = it->second;
  cl.overwrite = absl::GetFlag(FLAGS_overwrite);
  cl.values = absl::GetFlag(FLAGS_values);
  cl.user_token = absl::GetFlag(FLAGS_user_token);
  cl.user_tokens_file = absl::GetFlag(FLAGS_user_tokens_file);
  cl.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  cl.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  cl.tls_key = absl::GetFlag(FLAGS_tls_key);
  cl.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  cl.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  cl.insecure = absl::GetFlag(FLAGS_insecure);
  cl.max_queued_jobs = absl::GetFlag(FLAGS_max_queued_jobs);
  cl.max_campaigns = absl::GetFlag(FLAGS_max_campaigns);
  cl.max_model_mb = absl::GetFlag(FLAGS_max_model_mb);
  cl.max_message_mb = absl::GetFlag(FLAGS_max_message_mb);
  cl.name = absl::GetFlag(FLAGS_name);
  cl.cpu_set = absl::GetFlag(FLAGS_cpu_set);
  cl.pools = absl::GetFlag(FLAGS_pools);
  cl.runtime = absl::GetFlag(FLAGS_runtime);
  cl.external_format = absl::GetFlag(FLAGS_external_format);
  cl.export_command = absl::GetFlag(FLAGS_export_command);
  cl.bench_command = absl::GetFlag(FLAGS_bench_command);
  cl.runtime_name = absl::GetFlag(FLAGS_runtime_name);
  cl.runtime_version = absl::GetFlag(FLAGS_runtime_version);
  cl.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  cl.cooldown_ms = absl::GetFlag(FLAGS_cooldown_ms);
  cl.max_foreign_cores = absl::GetFlag(FLAGS_max_foreign_cores);
  cl.max_memory_slowdown = absl::GetFlag(FLAGS_max_memory_slowdown);
  cl.max_temperature_c = absl::GetFlag(FLAGS_max_temperature_c);
  cl.max_discards = absl::GetFlag(FLAGS_max_discards);
  cl.discard_cooldown_ms = absl::GetFlag(FLAGS_discard_cooldown_ms);
  cl.canary = absl::GetFlag(FLAGS_canary);
  cl.canary_every_jobs = absl::GetFlag(FLAGS_canary_every_jobs);
  cl.canary_every_s = absl::GetFlag(FLAGS_canary_every_s);
  cl.drift_cooldown_ms = absl::GetFlag(FLAGS_drift_cooldown_ms);
  cl.memory_limit_mb = absl::GetFlag(FLAGS_memory_limit_mb);
  cl.agents = absl::GetFlag(FLAGS_agents);
  cl.fleet_threads = absl::GetFlag(FLAGS_fleet_threads);
  cl.config = absl::GetFlag(FLAGS_config);
  cl.wait = absl::GetFlag(FLAGS_wait);
  cl.format = absl::GetFlag(FLAGS_format);
  cl.all = absl::GetFlag(FLAGS_all);
  cl.campaign = absl::GetFlag(FLAGS_campaign);
  cl.trial = absl::GetFlag(FLAGS_trial);
  cl.listen = absl::GetFlag(FLAGS_listen);
  cl.db = absl::GetFlag(FLAGS_db);
  cl.port_file = absl::GetFlag(FLAGS_port_file);
  cl.lease_ttl_ms = absl::GetFlag(FLAGS_lease_ttl_ms);
  cl.heartbeat_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  cl.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  cl.canary_request = absl::GetFlag(FLAGS_canary_request);
  cl.canary_tolerance = absl::GetFlag(FLAGS_canary_tolerance);
  cl.max_drift_requeues = absl::GetFlag(FLAGS_max_drift_requeues);
  cl.work_dir = absl::GetFlag(FLAGS_work_dir);
  cl.http = absl::GetFlag(FLAGS_http);
  cl.http_port_file = absl::GetFlag(FLAGS_http_port_file);
  cl.prompt_lengths = absl::GetFlag(FLAGS_prompt_lengths);
  cl.decode_tokens = absl::GetFlag(FLAGS_decode_tokens);
  cl.repeats = absl::GetFlag(FLAGS_repeats);
  cl.max_repeats = absl::GetFlag(FLAGS_max_repeats);
  cl.max_spread = absl::GetFlag(FLAGS_max_spread);
  cl.warmups = absl::GetFlag(FLAGS_warmups);
  cl.precision = absl::GetFlag(FLAGS_precision);
  cl.device = absl::GetFlag(FLAGS_device);
  cl.pool = absl::GetFlag(FLAGS_pool);
  cl.wait_s = absl::GetFlag(FLAGS_wait_s);
  cl.in = absl::GetFlag(FLAGS_in);
  cl.max_condition = absl::GetFlag(FLAGS_max_condition);
  cl.max_error = absl::GetFlag(FLAGS_max_error);
  cl.layer = absl::GetFlag(FLAGS_layer);
  cl.k = absl::GetFlag(FLAGS_k);
  cl.prompts = absl::GetFlag(FLAGS_prompts);
  cl.data = absl::GetFlag(FLAGS_data);
  cl.model = absl::GetFlag(FLAGS_model);
  cl.prior_model = absl::GetFlag(FLAGS_prior_model);
  cl.metric = absl::GetFlag(FLAGS_metric);
  cl.folds = absl::GetFlag(FLAGS_folds);
  cl.plot = absl::GetFlag(FLAGS_plot);
  cl.restarts = absl::GetFlag(FLAGS_restarts);
  cl.gp_prior = absl::GetFlag(FLAGS_gp_prior);
  cl.tokens = absl::GetFlag(FLAGS_tokens);
  cl.sources = absl::GetFlag(FLAGS_sources);
  cl.heldout = absl::GetFlag(FLAGS_heldout);
  cl.steps = absl::GetFlag(FLAGS_steps);
  cl.batch_size = absl::GetFlag(FLAGS_batch_size);
  cl.seq_len = absl::GetFlag(FLAGS_seq_len);
  cl.lr = absl::GetFlag(FLAGS_lr);
  cl.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  cl.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  cl.grad_clip = absl::GetFlag(FLAGS_grad_clip);
  cl.distill_from = absl::GetFlag(FLAGS_distill_from);
  cl.result_json = absl::GetFlag(FLAGS_result_json);
  cl.windows = absl::GetFlag(FLAGS_windows);
  cl.passes = absl::GetFlag(FLAGS_passes);
  cl.prompt = absl::GetFlag(FLAGS_prompt);
  cl.prompt_ids = absl::GetFlag(FLAGS_prompt_ids);
  cl.logits_out = absl::GetFlag(FLAGS_logits_out);
  cl.distill_weight = absl::GetFlag(FLAGS_distill_weight);
  cl.eval_every = absl::GetFlag(FLAGS_eval_every);
  cl.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  cl.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  cl.calib_tokens = absl::GetFlag(FLAGS_calib_tokens);
  cl.base = absl::GetFlag(FLAGS_base);
  cl.metrics = absl::GetFlag(FLAGS_metrics);
  cl.layers = absl::GetFlag(FLAGS_layers);
  cl.d_model = absl::GetFlag(FLAGS_d_model);
  cl.d_ffn = absl::GetFlag(FLAGS_d_ffn);
  cl.pattern = absl::GetFlag(FLAGS_pattern);
  cl.window = absl::GetFlag(FLAGS_window);
  cl.backbone_steps = absl::GetFlag(FLAGS_backbone_steps);
  cl.kvp_consistency_weight = absl::GetFlag(FLAGS_kvp_consistency_weight);
  cl.kvp_aux_weight = absl::GetFlag(FLAGS_kvp_aux_weight);
  cl.block_size = absl::GetFlag(FLAGS_block_size);
  cl.shape = absl::GetFlag(FLAGS_shape);
  cl.arch = absl::GetFlag(FLAGS_arch);
  cl.ckpt = absl::GetFlag(FLAGS_ckpt);
  cl.space = absl::GetFlag(FLAGS_space);
  cl.out = absl::GetFlag(FLAGS_out);
  cl.dtype = absl::GetFlag(FLAGS_dtype);
  cl.weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
  cl.prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  cl.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  cl.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  cl.threads = absl::GetFlag(FLAGS_threads);
  cl.seed = absl::GetFlag(FLAGS_seed);
  cl.n = absl::GetFlag(FLAGS_n);
  cl.json = absl::GetFlag(FLAGS_json);
  cl.coordinator = absl::GetFlag(FLAGS_coordinator);
  cl.token = absl::GetFlag(FLAGS_token);
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->CurrentValue() != flag->DefaultValue()) cl.changed.insert(std::string(name));
  }
  return cl;
}

}  // namespace hilnas::tools
