// `hilnas latency`'s options, shared by its two files: latency.cc (the
// command and `collect`) and latency_model.cc (`fit`, `eval`, `predict`).
#ifndef HILNAS_TOOLS_COMMANDS_LATENCY_H_
#define HILNAS_TOOLS_COMMANDS_LATENCY_H_

#include <string>

#include "tools/common.h"
#include "tools/coordinator_client.h"

namespace hilnas::tools {

struct LatencyOptions {
  std::string verb;   // collect | fit | eval | predict
  std::string space;  // default: MobileLLM-Flash Tab. 3
  // collect
  int32_t n = 8;
  int64_t passes = 1;
  MeasurementFlags measure;  // its seed and threads serve fit/eval too
  ClientFlags client;
  std::string out;
  // fit, eval
  std::string data;
  std::string campaign;
  std::string db = "hilnas.db";
  std::string metric = "ttft";
  int64_t prompt_tokens = 256;
  std::string prior_model;
  int32_t folds = 10;
  std::string plot;
  int32_t restarts = 3;
  std::string gp_prior = "dim-scaled";
  // predict
  std::string model;
  ArchFlags arch;
};

int LatencyCollect(const LatencyOptions& o);
int LatencyFit(const LatencyOptions& o);
int LatencyEval(const LatencyOptions& o);
int LatencyPredict(const LatencyOptions& o);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_LATENCY_H_
