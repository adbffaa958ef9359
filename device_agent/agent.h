// The device agent: dials out to the coordinator (pull model, so a phone
// behind NAT works), registers, leases one benchmark job at a time, keeps
// the lease alive with heartbeats while the measurement protocol runs, and
// reports a result or a structured failure. Survives coordinator restarts by
// retrying with exponential backoff and re-registering under the same name.
//
// It executes nothing it receives except building and running an ArchSpec
// (or a local checkpoint folder) in its Runtime.
#ifndef HILNAS_DEVICE_AGENT_AGENT_H_
#define HILNAS_DEVICE_AGENT_AGENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "device_agent/protocol.h"
#include "device_agent/runtime.h"
#include "proto/benchmark.pb.h"
#include "util/data_roots.h"
#include "util/grpc_security.h"

namespace grpc {
class Channel;
}

namespace hilnas {

struct AgentOptions {
  std::string coordinator = "127.0.0.1:50051";
  // When set, the agent talks over this channel instead of dialling
  // `coordinator` (tests: an in-process server's channel).
  std::shared_ptr<grpc::Channel> channel;
  ClientTls tls;  // --tls-ca (and --tls-cert/--tls-key for mutual TLS); empty: plain text
  // Sent as call metadata on every call, with the session key Register
  // returns (util/grpc_security.h).
  std::string enrollment_token;
  DeviceIdentity device;             // name, threads, cpu_set and pools set by the caller
  int64_t lease_wait_ms = 10'000;    // long-poll length for LeaseJob
  int64_t rpc_deadline_ms = 10'000;  // added to every call's own wait
  int64_t backoff_initial_ms = 100;
  int64_t backoff_max_ms = 5'000;
  int max_jobs = 0;  // stop after this many jobs; 0 = run until stopped
  // The drift check (proto CanaryReading): the coordinator's canary is
  // re-timed before the first job, after every canary_every_jobs jobs, when
  // the last reading is canary_every_ms old, and after a job was re-queued
  // for drift (then after drift_cooldown_ms of rest). 0 turns a trigger off;
  // canary_every_jobs = 0 and canary_every_ms = 0 together turn it off.
  int canary_every_jobs = 10;
  int64_t canary_every_ms = 300'000;
  int64_t drift_cooldown_ms = 5'000;
  ProtocolOptions protocol;
  // The folders a job's checkpoint_dir must resolve into (symlinks
  // followed, no "..", absolute), whatever the coordinator sends (issue
  // 39): a job naming anything else fails with the cause and the agent
  // lives on. None (the default): the agent runs no checkpoint_dir job,
  // only architectures on random weights.
  DataRoots data_roots;
  std::function<void(const std::string&)> log;  // one line per event; may be empty
};

class Agent {
 public:
  Agent(AgentOptions options, std::unique_ptr<Runtime> runtime);
  ~Agent();

  // Runs until `stop` becomes true or max_jobs jobs are done. Returns OK
  // then; UNAUTHENTICATED when the coordinator rejects the enrollment token
  // at Register (retrying cannot help); INVALID_ARGUMENT for unreadable TLS
  // files. A refused session key (another agent registered under this
  // name, or the coordinator lost its database) registers again.
  // Transient errors never end the loop.
  absl::Status Run(const std::atomic<bool>& stop);

  int jobs_done() const { return jobs_done_; }

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int jobs_done_ = 0;
};

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_AGENT_H_
