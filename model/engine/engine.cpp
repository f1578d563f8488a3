#include "model/engine/engine.h"

#include "model/engine/branch.h"
#include "model/session/session_writer.h"
#include "model/util/device.h"
#include "model/util/errors.h"

namespace memscope::model {

Engine::Engine(const EngineOptions& options) : TimelineSource(/*live=*/true) {
  if (options.checkpoint.empty())
    branches_.push_back(std::make_unique<Branch>(0, load_preset(options.preset, options.sets)));
  else
    branches_.push_back(std::make_unique<Branch>(0, std::filesystem::path(options.checkpoint), options.sets));
  publish_rings();
  set_recorder_factory([this](const std::string& path, const Preset& preset) -> std::shared_ptr<Recorder> {
    const Trainer& trainer = branches_.front()->trainer();
    const auto device = describe_device(trainer.model()->embedding.device());
    return std::make_shared<SessionWriter>(session_dir_for(path),
                                           session_info_for(preset, device, trainer.task().vocab_size()));
  });
}

Engine::~Engine() { stop_thread(); }

Preset Engine::preset() const { return branches_.front()->preset(); }

std::vector<int64_t> Engine::steps() const {
  std::vector<int64_t> out;
  for (const auto& b : branches_) out.push_back(b->step());
  return out;
}

void Engine::publish_rings() {
  std::vector<std::shared_ptr<FrameRing>> rings;
  for (const auto& b : branches_) rings.push_back(b->ring());
  set_rings(std::move(rings));
}

std::vector<Event> Engine::step() {
  std::vector<Event> fired;  // breakpoints and NaN pauses, emitted after the step's own events
  for (auto& branch : branches_) {
    std::vector<Event> events;
    std::shared_ptr<const Frame> frame;
    try {
      frame = branch->advance(events);
    } catch (const std::exception& e) {
      const std::string message = one_line(e.what());
      set_last_error(message);
      pause_with(source_event(branch->step(), branch->id(),
                              "paused: step " + std::to_string(branch->step() + 1) + " failed: " + message,
                              EventKind::Error));
      return {};
    }
    emit_frame(*frame);
    publish(events, fired);
    check_step_breakpoints(branch->id(), branch->step(), fired);
  }
  return fired;
}

void Engine::apply(const Command& c, std::vector<Event>& events) {
  using K = Command::Kind;
  Branch* target = branches_[static_cast<size_t>(c.timeline)].get();
  auto on_frame = [this](const Frame& f) { emit_frame(f); };
  switch (c.kind) {
    case K::SetKnob:
    case K::ResetMomentum:
    case K::ResetMemory:
    case K::InjectNan: target->apply(c); break;
    case K::LoadPreset:
    case K::LoadCheckpoint: {
      auto branch = c.kind == K::LoadPreset ? std::make_unique<Branch>(0, load_preset(c.path, c.sets))
                                            : std::make_unique<Branch>(0, std::filesystem::path(c.path), c.sets);
      branches_.clear();
      branches_.push_back(std::move(branch));
      publish_rings();
      break;
    }
    case K::SaveCheckpoint: target->trainer().save(c.path); break;
    case K::Rewind: {
      const int64_t from = target->rewind(c.step, events, on_frame);
      // The detector events after the keyframe were re-made by the re-run: keep one copy.
      erase_events([&](const Event& e) { return e.timeline == c.timeline && e.is_detector() && e.step > from; });
      break;
    }
    case K::Fork:
      branches_.push_back(target->fork(static_cast<int>(branches_.size()), c.step, c.sets, events, on_frame));
      publish_rings();
      break;
    default: throw UserError(describe(c) + ": not an engine command");
  }
}

}  // namespace memscope::model
