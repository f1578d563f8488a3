#include "model/engine/command.h"

#include <cstdlib>

#include "model/util/errors.h"

namespace memscope::model {

const char* to_string(Breakpoint::Kind kind) {
  switch (kind) {
    case Breakpoint::Kind::Spike: return "spike";
    case Breakpoint::Kind::NonFinite: return "nan";
    case Breakpoint::Kind::NsError: return "ns_error";
    case Breakpoint::Kind::NormGrowth: return "norm_growth";
    case Breakpoint::Kind::AnyDetector: return "any";
    case Breakpoint::Kind::Step: return "step";
  }
  return "?";
}

Breakpoint parse_breakpoint(const std::string& text) {
  Breakpoint b;
  auto number_after = [&](size_t at) {
    const std::string rest = text.substr(at);
    char* end = nullptr;
    const double v = std::strtod(rest.c_str(), &end);
    if (rest.empty() || *end != '\0') throw UserError("breakpoint '" + text + "': expected a number after the operator");
    return v;
  };
  if (text == "nan" || text == "inf" || text == "nonfinite") b.kind = Breakpoint::Kind::NonFinite;
  else if (text == "spike") b.kind = Breakpoint::Kind::Spike;
  else if (text == "ns_error") b.kind = Breakpoint::Kind::NsError;
  else if (text.rfind("ns_error>", 0) == 0) {
    b.kind = Breakpoint::Kind::NsError;
    b.threshold = number_after(9);
  } else if (text == "norm_growth") b.kind = Breakpoint::Kind::NormGrowth;
  else if (text == "any") b.kind = Breakpoint::Kind::AnyDetector;
  else if (text.rfind("step==", 0) == 0 || text.rfind("step=", 0) == 0) {
    b.kind = Breakpoint::Kind::Step;
    const double v = number_after(text[5] == '=' ? 6 : 5);
    if (v < 0 || v != static_cast<double>(static_cast<int64_t>(v)))
      throw UserError("breakpoint '" + text + "': the step must be a whole number >= 0");
    b.step = static_cast<int64_t>(v);
  } else {
    throw UserError("unknown breakpoint '" + text + "' (expected nan, spike, ns_error, ns_error>X, norm_growth, any, step==N)");
  }
  return b;
}

std::string describe(const Breakpoint& b) {
  switch (b.kind) {
    case Breakpoint::Kind::Step: return "step==" + std::to_string(b.step);
    case Breakpoint::Kind::NsError:
      return b.threshold > 0 ? "ns_error>" + std::to_string(b.threshold) : std::string("ns_error");
    default: return to_string(b.kind);
  }
}

namespace {

std::string where(const Command& c) {
  if (c.layer < 0) return "all layers";
  return "layer " + std::to_string(c.layer) + (c.head < 0 ? std::string(", all heads") : " head " + std::to_string(c.head));
}

std::string joined(const std::vector<std::string>& sets) {
  std::string out;
  for (const auto& s : sets) out += (out.empty() ? "" : " ") + s;
  return out;
}

}  // namespace

std::string describe(const Command& c) {
  using K = Command::Kind;
  switch (c.kind) {
    case K::Run: return "run";
    case K::Pause: return "pause";
    case K::Step: return "step " + std::to_string(c.count);
    case K::SetKnob: return "set " + c.knob + " = " + c.value;
    case K::ResetMomentum: return "reset momentum (" + where(c) + ")";
    case K::ResetMemory: return "reset memory (" + where(c) + ")";
    case K::LoadPreset: return "load preset " + c.path + (c.sets.empty() ? "" : " with " + joined(c.sets));
    case K::SaveCheckpoint: return "save checkpoint " + c.path;
    case K::LoadCheckpoint: return "load checkpoint " + c.path + (c.sets.empty() ? "" : " with " + joined(c.sets));
    case K::AddBreakpoint: return "break on " + describe(c.breakpoint);
    case K::RemoveBreakpoint: return "remove breakpoint " + std::to_string(c.breakpoint.id);
    case K::Rewind: return "rewind to step " + std::to_string(c.step);
    case K::Fork: return "fork at step " + std::to_string(c.step) + (c.sets.empty() ? "" : " with " + joined(c.sets));
    case K::StartRecording: return "start recording " + c.path;
    case K::StopRecording: return "stop recording";
    case K::InjectNan: return "inject NaN (" + where(c) + ")";
    case K::ScaleMomentum: return "scale momentum by " + c.value + " (" + where(c) + ")";
    case K::CorruptBatch: return "corrupt the next training batch";
    case K::NanGate: return "NaN in the " + c.value + " gate (" + where(c) + ") for the next step";
  }
  return "?";
}

bool changes_state(const Command& c) {
  using K = Command::Kind;
  return c.kind == K::SetKnob || c.kind == K::ResetMomentum || c.kind == K::ResetMemory || c.kind == K::InjectNan ||
         c.kind == K::ScaleMomentum || c.kind == K::CorruptBatch || c.kind == K::NanGate ||
         c.kind == K::LoadPreset || c.kind == K::LoadCheckpoint;
}

}  // namespace memscope::model
