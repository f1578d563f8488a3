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

// On CUDA, deterministic kernels: a rewind must re-make the frames it replaces and one seed give
// one run, as on the CPU (the backward's atomic adds otherwise sum in no fixed order). cuBLAS
// needs its workspace fixed for that before its first call. Ops without a deterministic kernel
// warn instead of failing.
void choose(const c10::Device& device) {
  if (device.is_cuda()) {
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  }
  chosen_default() = device;
}

}  // namespace

c10::Device default_device() {
  auto& device = chosen_default();
  if (!device) {
    const char* request = std::getenv("MEMSCOPE_DEVICE");
    choose(request && *request ? pick_device(request) : c10::Device("cpu"));
  }
  return *device;
}

void set_default_device(const c10::Device& device) { choose(device); }

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
