// memscope-cli info: what this build is and where it would run.
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "memscope/version.h"
#include "model/dist/data_parallel.h"
#include "model/util/device.h"

namespace memscope::app {

void register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print the build, LibTorch and device this binary uses");
  auto json = std::make_shared<bool>(false);
  auto device = std::make_shared<std::string>("auto");
  cmd->add_flag("--json", *json, "Print one JSON object instead of text");
  cmd->add_option("--device", *device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  cmd->callback([json, device] {
    const auto chosen = model::pick_device(*device);
#ifdef MEMSCOPE_CUDA
    const bool cuda_build = true;
#else
    const bool cuda_build = false;
#endif
    if (*json) {
      std::cout << nlohmann::json{{"memscope", MEMSCOPE_VERSION},
                                  {"torch", TORCH_VERSION},
                                  {"cuda_build", cuda_build},
                                  {"gloo", model::gloo_available()},
                                  {"device", chosen.str()},
                                  {"threads", at::get_num_threads()}}
                       .dump()
                << "\n";
    } else {
      std::cout << "memscope " << MEMSCOPE_VERSION << "\n"
                << "device   " << model::describe_device(chosen) << "\n"
                << "cuda     " << (cuda_build ? "built with CUDA" : "CPU-only build") << "\n"
                << "gloo     " << (model::gloo_available() ? "training across processes on the CPU"
                                                           : "none in this LibTorch: no training across processes")
                << "\n";
    }
  });
}

}  // namespace memscope::app
