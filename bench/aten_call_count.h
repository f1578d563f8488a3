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

inline AtenCalls aten_calls(const std::function<void()>& work) {
  static std::atomic<int64_t> all{0}, top{0};
  static thread_local int depth = 0;
  all = 0;
  top = 0;
  const auto handle =
      at::addGlobalCallback(at::RecordFunctionCallback(
                                [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
                                  ++all;
                                  if (depth++ == 0) ++top;
                                  return nullptr;
                                },
                                [](const at::RecordFunction&, at::ObserverContext*) { --depth; })
                                .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  work();
  at::removeCallback(handle);
  return {all.load(), top.load()};
}

}  // namespace memscope::bench
