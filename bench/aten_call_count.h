#pragma once
// How many ATen operator calls a piece of work makes, nested calls included (aten::matmul and the
// aten::mm inside it are two), counted by a RecordFunction callback on every thread, so the
// backward's too. On a GPU each call that computes is a kernel launch: where a step is bound by
// launches (README "On a GPU machine"), this count is what makes it long, and unlike a time it is
// the same on every machine.
#include <ATen/record_function.h>

#include <atomic>
#include <functional>
#include <memory>

namespace memscope::bench {

inline int64_t aten_calls(const std::function<void()>& work) {
  static std::atomic<int64_t> calls{0};
  calls = 0;
  const auto handle = at::addGlobalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
        ++calls;
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION}));
  work();
  at::removeCallback(handle);
  return calls.load();
}

}  // namespace memscope::bench
