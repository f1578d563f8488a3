#include "model/util/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace memscope::model {

namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_enabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
c10::ScalarType dtype(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set_dtype(c10::DeviceType d, c10::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
bool cpu(c10::DeviceType d) { return d == c10::DeviceType::CPU; }
bool enabled(c10::DeviceType d) {
  return cpu(d) ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void set_enabled(c10::DeviceType d, bool on) {
  if (cpu(d))
    at::autocast::set_cpu_enabled(on);
  else
    at::autocast::set_enabled(on);
}
c10::ScalarType dtype(c10::DeviceType d) {
  return cpu(d) ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
}
void set_dtype(c10::DeviceType d, c10::ScalarType t) {
  if (cpu(d))
    at::autocast::set_autocast_cpu_dtype(t);
  else
    at::autocast::set_autocast_gpu_dtype(t);
}
#endif

}  // namespace

bool autocast_enabled(c10::DeviceType device) { return enabled(device); }

Bf16Autocast::Bf16Autocast(c10::DeviceType device)
    : device_(device), was_enabled_(enabled(device)), was_dtype_(dtype(device)) {
  set_enabled(device_, true);
  set_dtype(device_, c10::ScalarType::BFloat16);
  at::autocast::increment_nesting();
}

Bf16Autocast::~Bf16Autocast() {
  // The casts of the weights are cached while any autocast scope is open (as torch.autocast does).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(device_, was_enabled_);
  set_dtype(device_, was_dtype_);
}

AutocastOff::AutocastOff(c10::DeviceType device) : device_(device), was_enabled_(enabled(device)) {
  if (was_enabled_) set_enabled(device_, false);
}

AutocastOff::~AutocastOff() {
  if (was_enabled_) set_enabled(device_, true);
}

}  // namespace memscope::model
