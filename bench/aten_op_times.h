#pragma once
// Where a piece of work spends its time, per ATen operator and autograd node: a RecordFunction
// callback on every thread times each call and charges it its self time (its span less its nested
// calls'), so that the top of the list says which operators to fuse. Works with LibTorch 1.13,
// which has no Kineto (kineto_trace.h is 2.x only), and 2.x; the callbacks' own cost (about a
// microsecond a call) lands on the caller, so shares of a step with many tiny calls are approximate.
// What no RecordFunction marks goes unseen: our own loops called outside any operator, and the
// forward of a custom autograd function (in 1.13, Function::apply records nothing; its backward is
// a node and is timed). Their time is charged to the enclosing operator, or to none, so the list
// under-reports exactly the fused kernels; the step's total (step_ms) still has them.
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace memscope::bench {

struct OpTime {
  std::string name;
  double self_ms = 0;
  int64_t calls = 0;
};

namespace aten_op_times_detail {

using Clock = std::chrono::steady_clock;

struct Frame {
  Clock::time_point start;
  double nested_ms = 0;
};

inline std::mutex mutex;
inline std::map<std::string, OpTime> totals;
inline thread_local std::vector<Frame> stack;

inline std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) {
  stack.push_back({Clock::now(), 0});
  return nullptr;
}

inline void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  if (stack.empty()) return;  // defensive: a call that began before the callback was added
  const Frame frame = stack.back();
  stack.pop_back();
  const double span_ms = std::chrono::duration<double, std::milli>(Clock::now() - frame.start).count();
  if (!stack.empty()) stack.back().nested_ms += span_ms;
  std::lock_guard<std::mutex> lock(mutex);
  OpTime& t = totals[fn.name()];
  t.self_ms += span_ms - frame.nested_ms;
  ++t.calls;
}

}  // namespace aten_op_times_detail

// The `top` operators by self time over `work`, largest first.
inline std::vector<OpTime> aten_op_times(const std::function<void()>& work, size_t top) {
  namespace d = aten_op_times_detail;
  d::totals.clear();
  const auto scopes = {at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION};
  const auto handle =
      at::addGlobalCallback(at::RecordFunctionCallback(d::on_enter, d::on_exit).scopes(scopes));
  work();
  at::removeCallback(handle);
  std::vector<OpTime> out;
  for (auto& [name, t] : d::totals) out.push_back({name, t.self_ms, t.calls});
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  if (out.size() > top) out.resize(top);
  return out;
}

}  // namespace memscope::bench
