#include "model/util/device.h"

#include <cstdlib>
#include <optional>

#include "model/util/errors.h"

namespace memscope::model {

namespace {

std::optional<c10::Device>& chosen_default() {
  static std::optional<c10::Device> device;
  return device;
}

}  // namespace

c10::Device default_device() {
  auto& device = chosen_default();
  if (!device) {
    const char* request = std::getenv("MEMSCOPE_DEVICE");
    device = request && *request ? pick_device(request) : c10::Device("cpu");
  }
  return *device;
}

void set_default_device(const c10::Device& device) { chosen_default() = device; }

c10::Device pick_device(const std::string& request) {
  if (request == "auto") return torch::cuda::is_available() ? c10::Device("cuda:0") : c10::Device("cpu");
  c10::Device device("cpu");
  try {
    device = c10::Device(request);
  } catch (const c10::Error&) {
    throw UserError("device '" + request + "' is not one of auto, cpu, cuda, cuda:N");
  }
  if (device.is_cuda() && !torch::cuda::is_available())
    throw UserError("device '" + request + "' asked for, but this LibTorch (" TORCH_VERSION
                    ") sees no CUDA GPU; use --device cpu");
  return device;
}

std::string describe_device(const c10::Device& device) {
  std::string text = device.str() + " (LibTorch " TORCH_VERSION ", threads " +
                     std::to_string(at::get_num_threads());
  if (device.is_cuda()) text += ", " + std::to_string(torch::cuda::device_count()) + " GPU(s)";
  return text + ")";
}

}  // namespace memscope::model
