#include "model/util/device.h"

#include <torch/version.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "model/util/cpu_kernels.h"
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
//
// LibTorch 2.1 and later also fill every new tensor with NaN in that mode, a kernel per
// allocation, in case an op reads memory it never wrote. That is off here: on the H200 memscope's
// eager step was 2x slower than eager PyTorch's, which runs without the mode (README "On a GPU
// machine"). Neither that the fill is the cause nor that the engine's CUDA determinism tests pass
// without it has been measured yet; MEMSCOPE_CUDA_FILL_UNINITIALIZED=1 keeps it, to run both.
// MEMSCOPE_CUDA_DETERMINISTIC=0 turns the whole mode off, to measure what it costs (bench/gpu.sh).
void choose(const c10::Device& device) {
  if (device.is_cuda()) {
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    const char* deterministic = std::getenv("MEMSCOPE_CUDA_DETERMINISTIC");
    at::globalContext().setDeterministicAlgorithms(!(deterministic && std::string(deterministic) == "0"),
                                                   /*warn_only=*/true);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
    const char* fill = std::getenv("MEMSCOPE_CUDA_FILL_UNINITIALIZED");
    at::globalContext().setDeterministicFillUninitializedMemory(fill && std::string(fill) == "1");
#endif
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
  if (device.is_cpu() && !cpu_kernels_on(device)) text += ", a GPU's forms: MEMSCOPE_CPU_KERNELS=0";
  return text + ")";
}

}  // namespace memscope::model
