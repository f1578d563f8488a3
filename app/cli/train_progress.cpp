#include "app/cli/train_progress.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

namespace memscope::app {

std::string step_json(const model::TrainStepResult& r) {
  nlohmann::json j{{"step", r.step},           {"loss", r.loss},
                   {"acc", r.acc},             {"lr", r.lr},
                   {"grad_norm", r.grad_norm}, {"tokens_per_s", r.tokens_per_s},
                   {"chunk", r.chunk}};
  if (r.memory_peak_bytes > 0) j["memory_peak_gb"] = static_cast<double>(r.memory_peak_bytes) / 1e9;
  if (r.world_size > 1) {
    j["world_size"] = r.world_size;
    j["comm_share"] = r.seconds > 0 ? r.comm_seconds / r.seconds : 0.0;
  }
  if (!r.modules.empty()) {
    // Per module (issue 18): the gradient norm before clipping and ‖Δθ‖/‖θ‖ of the step.
    nlohmann::json grads = nlohmann::json::object(), updates = nlohmann::json::object();
    for (const auto& m : r.modules) {
      grads[m.name] = m.grad_norm;
      updates[m.name] = m.update_ratio;
    }
    j["module_grad_norm"] = grads;
    j["module_update_ratio"] = updates;
    j["largest_grad_module"] = model::largest_gradient(r.modules)->name;
  }
  return j.dump();
}

TrainProgress::TrainProgress(bool json, int64_t total_steps, bool shown)
    : json_(json), shown_(shown), total_(total_steps) {}

void TrainProgress::end_bar() {
  if (!bar_drawn_) return;
  std::cout << "\n";  // the bar stays on screen as a record of where the run was
  bar_drawn_ = false;
}

void TrainProgress::step(const model::TrainStepResult& r) {
  if (!shown_) return;
  if (json_) {
    std::cout << step_json(r) << std::endl;
    return;
  }
  constexpr int kWidth = 28;
  const double done = total_ > 0 ? static_cast<double>(r.step) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(done * kWidth + 0.5);
  char line[256];
  std::snprintf(line, sizeof line, "\r\033[K%6lld/%lld [%s%s] loss %.4f  acc %.3f  lr %.2e  |g| %.3f  %.0f tok/s",
                static_cast<long long>(r.step), static_cast<long long>(total_), std::string(filled, '#').c_str(),
                std::string(kWidth - filled, '.').c_str(), r.loss, r.acc, r.lr, r.grad_norm, r.tokens_per_s);
  std::cout << line << std::flush;
  bar_drawn_ = true;
}

void TrainProgress::eval(int64_t step, const model::EvalResult& r) {
  if (!shown_) return;
  if (json_) {
    std::cout << nlohmann::json{{"eval", true}, {"step", step}, {"loss", r.loss}, {"acc", r.acc}, {"queries", r.queries}}
                     .dump()
              << std::endl;
    return;
  }
  end_bar();
  std::printf("eval at step %lld: loss %.4f  query accuracy %.3f over %lld queries\n", static_cast<long long>(step),
              r.loss, r.acc, static_cast<long long>(r.queries));
  std::fflush(stdout);
}

void TrainProgress::message(const std::string& text) {
  if (!shown_) return;
  if (json_) {
    std::cout << nlohmann::json{{"message", text}}.dump() << std::endl;
    return;
  }
  end_bar();
  std::cout << text << std::endl;
}

}  // namespace memscope::app
