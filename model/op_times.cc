#include "model/op_times.h"

#include <ATen/record_function.h>

#include <chrono>
#include <vector>

namespace hilnas {
namespace {

using Clock = std::chrono::steady_clock;

struct Frame {
  Clock::time_point start;
  double children_s = 0;
};

// The timer collecting on this thread, and its open ops.
thread_local std::map<std::string, OpTime>* current = nullptr;
thread_local std::vector<Frame> frames;

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction&) {
  if (current != nullptr) frames.push_back({Clock::now(), 0});
  return nullptr;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext*) {
  if (current == nullptr || frames.empty()) return;
  const Frame f = frames.back();
  frames.pop_back();
  const double s = std::chrono::duration<double>(Clock::now() - f.start).count();
  if (!frames.empty()) frames.back().children_s += s;
  OpTime& t = (*current)[fn.name()];
  t.seconds += s - f.children_s;
  ++t.calls;
}

}  // namespace

struct OpTimer::Hooks {
  at::RecordFunctionGuard enable{true};
  at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(OnStart, OnEnd)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  ~Hooks() { at::removeCallback(handle); }
};

OpTimer::OpTimer() {
  current = &ops_;
  frames.clear();
  hooks_ = std::make_unique<Hooks>();
}

OpTimer::~OpTimer() {
  hooks_.reset();
  current = nullptr;
  frames.clear();
}

double OpTimer::Seconds(absl::string_view name) const {
  auto it = ops_.find(std::string(name));
  return it == ops_.end() ? 0 : it->second.seconds;
}

}  // namespace hilnas
