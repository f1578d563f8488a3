#include "model/util/cpu_kernels.h"

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace memscope::model {

namespace {
// ScopedAtenForms alive (process-wide: the engine steps on other threads), and one more for the
// whole run under MEMSCOPE_CPU_KERNELS=0.
int forms_from_environment() {
  const char* kernels = std::getenv("MEMSCOPE_CPU_KERNELS");
  return kernels && std::string(kernels) == "0" ? 1 : 0;
}
std::atomic<int> aten_forms{forms_from_environment()};
}  // namespace

bool cpu_kernels_on(const c10::Device& device) { return device.is_cpu() && aten_forms.load() == 0; }

bool cpu_kernel_float(const at::Tensor& t) {
  return t.defined() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided &&
         cpu_kernels_on(t.device());
}

ScopedAtenForms::ScopedAtenForms() { ++aten_forms; }
ScopedAtenForms::~ScopedAtenForms() { --aten_forms; }

}  // namespace memscope::model
