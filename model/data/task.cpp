#include "model/data/task.h"

#include "model/data/mqar.h"
#include "model/data/needle.h"
#include "model/data/selective_copy.h"
#include "model/data/text_stream.h"
#include "model/util/errors.h"

namespace memscope::model {

std::unique_ptr<Task> make_task(const TaskConfig& config) {
  if (config.kind == "mqar") return std::make_unique<MqarTask>(config);
  if (config.kind == "needle") return std::make_unique<NeedleTask>(config);
  if (config.kind == "copy") return std::make_unique<SelectiveCopyTask>(config);
  if (config.kind == "text") return std::make_unique<TextStreamTask>(config);
  throw UserError("task.kind: must be one of mqar, needle, copy, text; got '" + config.kind + "'");
}

void check_knob(const char* knob, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    throw UserError(std::string(knob) + ": must be between " + std::to_string(lo) + " and " +
                    std::to_string(hi) + ", got " + std::to_string(value));
}

void check_knob_at_most(const char* knob, int64_t value, const char* other, int64_t limit) {
  if (value > limit)
    throw UserError(std::string(knob) + ": must be <= " + other + " (" + std::to_string(limit) + "), got " +
                    std::to_string(value));
}

}  // namespace memscope::model
