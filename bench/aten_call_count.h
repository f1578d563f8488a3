#pragma once
// How many ATen operator calls a piece of work makes, counted by a RecordFunction callback on every
// thread, so the backward's too. `all` includes nested calls (aten::matmul and the aten::mm inside
// it are two; on the CPU a small bmm adds a view per matrix); `top_level` counts only the calls
// made while no other op is running on that thread: the ones our code and autograd's engine make.
// On a GPU each such call that computes is about one kernel launch, and where a step is bound by
// launches (README "On a GPU machine") this count is what makes it long. Unlike a time, it is the
// same on every machine.
#include <ATen/record_function.h>

#include <atomic>
#include <functional>
#include <memory>

namespace memscope::bench {

struct AtenCalls {
  int64_t all = 0, top_level = 0;
};

namespace aten_call_count_detail {

inline std::atomic<int64_t> all{0}, top_level{0};
inline thread_local int depth = 0;  // ops running on this thread

inline std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) {
  ++all;
  if (depth++ == 0) ++top_level;
  return nullptr;
}

inline void on_exit(const at::RecordFunction&, at::ObserverContext*) { --depth; }

}  // namespace aten_call_count_detail

inline AtenCalls aten_calls(const std::function<void()>& work) {
  namespace d = aten_call_count_detail;
  d::all = 0;
  d::top_level = 0;
  const auto scopes = {at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION};
  const auto handle =
      at::addGlobalCallback(at::RecordFunctionCallback(d::on_enter, d::on_exit).scopes(scopes));
  work();
  at::removeCallback(handle);
  return {d::all.load(), d::top_level.load()};
}

}  // namespace memscope::bench
