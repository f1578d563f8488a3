#include "model/engine/engine.h"

#include "model/config/knobs.h"
#include "model/engine/branch.h"
#include "model/session/session_reader.h"
#include "model/session/session_writer.h"
#include "model/util/device.h"
#include "model/util/errors.h"

namespace memscope::model {

Engine::Engine(const EngineOptions& options) : TimelineSource(/*live=*/true) {
  if (!options.checkpoint.empty()) {
    branches_.push_back(std::make_unique<Branch>(0, std::filesystem::path(options.checkpoint), options.sets));
    if (!options.session.empty()) {  // the checkpoint is the nearest weights of the session's run
      const Preset recorded = SessionReader(options.session).preset();
      const std::string differs = restart_knob_changed(recorded, branches_.front()->preset());
      if (!differs.empty()) {
        const Knob& knob = *find_knob(differs);
        throw UserError("checkpoint " + options.checkpoint + " is from another run than session " + options.session +
                        " (" + differs + " = " + knob_value(branches_.front()->preset(), knob) + " there, " +
                        knob_value(recorded, knob) + " in the session)");
      }
    }
  } else if (!options.session.empty()) {
    const Preset recorded = SessionReader(options.session).preset();
    branches_.push_back(std::make_unique<Branch>(0, parse_preset(recorded.toml, recorded.name, options.sets)));
  } else {
    branches_.push_back(std::make_unique<Branch>(0, load_preset(options.preset, options.sets)));
  }
  if (options.train_step > 0) {
    branches_.front()->step_into(options.train_step, options.progress);
    const EvalResult r = branches_.front()->trainer().training_batch_loss(options.train_step);
    const Batch batch = branches_.front()->trainer().training_batch(options.train_step);
    step_into_ = {options.train_step, r.loss, r.acc, batch.tokens.numel(), (batch.targets != kIgnoreIndex).sum().item<int64_t>()};
  }
  publish_rings();
  set_recorder_factory([this](const std::string& path, const Preset& preset) -> std::shared_ptr<Recorder> {
    const Trainer& trainer = branches_.front()->trainer();
    const auto device = describe_device(trainer.model()->embedding.device());
    return std::make_shared<SessionWriter>(session_dir_for(path),
                                           session_info_for(preset, device, trainer.task().vocab_size()));
  });
  refresh_status();
}

Engine::~Engine() { stop_thread(); }

Preset Engine::preset() const { return branches_.front()->preset(); }

std::vector<int64_t> Engine::steps() const {
  std::vector<int64_t> out;
  for (const auto& b : branches_) out.push_back(b->step());
  return out;
}

std::string Engine::graphs() const { return branches_.front()->graph_summary(); }

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
    branch->set_side_job(side_job_for(branches_.size()));
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
    case K::SetKnob: {
      const Preset before = target->preset();
      target->apply(c);
      const std::string restart = restart_knob_changed(before, target->preset());
      if (!restart.empty()) end_recording("the run started over (" + restart + " is a restart knob)");
      break;
    }
    case K::ResetMomentum:
    case K::ResetMemory:
    case K::InjectNan:
    case K::ScaleMomentum:
    case K::CorruptBatch:
    case K::NanGate: target->apply(c); break;
    case K::LoadPreset:
    case K::LoadCheckpoint: {
      end_recording(std::string("a new run was loaded (") + (c.kind == K::LoadPreset ? "preset " : "checkpoint ") +
                    c.path + ")");
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
      // A recording keeps everything it was given; this marker tells its reader where the
      // timeline was cut back to (even when the keyframe was the step itself and nothing re-ran).
      Event marker = source_event(c.step, c.timeline,
                                  "timeline " + std::to_string(c.timeline) + " continues from step " + std::to_string(c.step) +
                                      " (re-run from the keyframe at " + std::to_string(from) + ")");
      marker.tensor = kRewindMarker;
      events.push_back(std::move(marker));
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
