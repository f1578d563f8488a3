#include "model/util/cpu_kernels.h"

#include <atomic>

namespace memscope::model {

namespace {
std::atomic<int> aten_forms{0};  // ScopedAtenForms alive (process-wide: the engine steps on other threads)
}  // namespace

bool cpu_kernels_on(const c10::Device& device) { return device.is_cpu() && aten_forms.load() == 0; }

ScopedAtenForms::ScopedAtenForms() { ++aten_forms; }
ScopedAtenForms::~ScopedAtenForms() { --aten_forms; }

}  // namespace memscope::model
