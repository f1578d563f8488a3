#include "model/remote/wire_messages.h"

#include <nlohmann/json.hpp>

#include "model/probe/frame_json.h"
#include "model/session/frame_chunk.h"
#include "model/session/safetensors_reader.h"

namespace memscope::model {

namespace {

using nlohmann::json;

// Field access that names what is wrong: every decoder below reads through one of these.
class Reader {
 public:
  Reader(const std::string& payload, const std::string& peer, const char* what) : peer_(peer), what_(what) {
    j_ = json::parse(payload, nullptr, false);
    if (j_.is_discarded()) fail("is not JSON");
  }
  Reader(json j, const std::string& peer, const char* what) : j_(std::move(j)), peer_(peer), what_(what) {}

  const json& root() const { return j_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw WireError(peer_ + " sent a malformed " + what_ + " message: " + why);
  }
  const json& at(const char* key) const {
    if (!j_.is_object()) fail("not a JSON object");
    const auto it = j_.find(key);
    if (it == j_.end()) fail(std::string("no \"") + key + "\"");
    return *it;
  }
  bool has(const char* key) const { return j_.is_object() && j_.contains(key); }
  std::string text(const char* key, size_t max = 1 << 20) const {
    const json& v = at(key);
    if (!v.is_string()) fail(std::string("\"") + key + "\" is not a string");
    const auto& s = v.get_ref<const std::string&>();
    if (s.size() > max) fail(std::string("\"") + key + "\" is too long");
    return s;
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail(std::string("\"") + key + "\" is not an integer");
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? hi + 1 : v.get<int64_t>();
    if (x < lo || x > hi) fail(std::string("\"") + key + "\" = " + v.dump() + " is out of range");
    return x;
  }
  double number(const char* key) const {
    const json& v = at(key);
    if (!v.is_number()) fail(std::string("\"") + key + "\" is not a number");
    return v.get<double>();
  }
  bool boolean(const char* key) const {
    const json& v = at(key);
    if (!v.is_boolean()) fail(std::string("\"") + key + "\" is not true or false");
    return v.get<bool>();
  }
  std::vector<std::string> texts(const char* key) const {
    const json& v = at(key);
    if (!v.is_array() || v.size() > 4096) fail(std::string("\"") + key + "\" is not a list of strings");
    std::vector<std::string> out;
    for (const auto& e : v) {
      if (!e.is_string()) fail(std::string("\"") + key + "\" is not a list of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }

 private:
  json j_;
  const std::string& peer_;
  const char* what_;
};

constexpr int64_t kMaxStep = int64_t{1} << 50;

const std::vector<std::pair<Command::Kind, const char*>>& command_names() {
  using K = Command::Kind;
  static const std::vector<std::pair<K, const char*>> names = {
      {K::Run, "run"},
      {K::Pause, "pause"},
      {K::Step, "step"},
      {K::SetKnob, "set knob"},
      {K::ResetMomentum, "reset momentum"},
      {K::ResetMemory, "reset memory"},
      {K::LoadPreset, "load preset"},
      {K::SaveCheckpoint, "save checkpoint"},
      {K::LoadCheckpoint, "load checkpoint"},
      {K::AddBreakpoint, "add breakpoint"},
      {K::RemoveBreakpoint, "remove breakpoint"},
      {K::Rewind, "rewind"},
      {K::Fork, "fork"},
      {K::StartRecording, "start recording"},
      {K::StopRecording, "stop recording"},
      {K::InjectNan, "inject nan"},
      {K::ScaleMomentum, "scale momentum"},
      {K::CorruptBatch, "corrupt batch"},
      {K::NanGate, "nan gate"},
  };
  return names;
}

const std::vector<Breakpoint::Kind>& breakpoint_kinds() {
  using B = Breakpoint::Kind;
  static const std::vector<B> kinds = {B::Spike, B::NonFinite, B::NsError, B::NormGrowth, B::AnyDetector, B::Step};
  return kinds;
}

json breakpoint_json(const Breakpoint& b) {
  return {{"kind", to_string(b.kind)}, {"threshold", b.threshold}, {"step", b.step}, {"id", b.id}};
}

Breakpoint read_breakpoint(const Reader& r) {
  Breakpoint b;
  const std::string kind = r.text("kind", 32);
  bool known = false;
  for (auto k : breakpoint_kinds())
    if (kind == to_string(k)) b.kind = k, known = true;
  if (!known) r.fail("unknown breakpoint kind \"" + kind + "\"");
  b.threshold = r.number("threshold");
  b.step = r.integer("step", 0, kMaxStep);
  b.id = static_cast<int>(r.integer("id", 0, 1 << 30));
  return b;
}

}  // namespace

std::string command_name(Command::Kind kind) {
  for (const auto& [k, name] : command_names())
    if (k == kind) return name;
  return "?";
}

std::string encode_hello(const Hello& h) { return json{{"version", kWireVersion}, {"token", h.token}, {"client", h.client}}.dump(); }

Hello decode_hello(const std::string& payload, const std::string& peer) {
  Reader r(payload, peer, "hello");
  Hello h;
  h.token = r.text("token", 4096);
  h.client = r.text("client", 256);
  return h;
}

std::string encode_welcome(const Welcome& w) {
  return json{{"server", w.server}, {"run_id", w.run_id}, {"label", w.label}, {"refused", w.refused}}.dump();
}

Welcome decode_welcome(const std::string& payload, const std::string& peer) {
  Reader r(payload, peer, "welcome");
  Welcome w;
  w.server = r.text("server", 256);
  w.run_id = r.text("run_id", 256);
  w.label = r.text("label", 256);
  const json& refused = r.at("refused");
  if (!refused.is_object() || refused.size() > 64) r.fail("\"refused\" is not an object of reasons");
  for (const auto& [name, why] : refused.items()) {
    if (!why.is_string()) r.fail("\"refused\" is not an object of reasons");
    w.refused[name] = why.get<std::string>();
  }
  return w;
}

std::string encode_reason(const std::string& reason) { return json{{"reason", reason}}.dump(); }

std::string decode_reason(const std::string& payload, const std::string& peer) {
  return Reader(payload, peer, "reason").text("reason", 4096);
}

std::string encode_command(const Command& c, int64_t seq) {
  return json{{"seq", seq},
              {"kind", command_name(c.kind)},
              {"count", c.count},
              {"step", c.step},
              {"knob", c.knob},
              {"value", c.value},
              {"path", c.path},
              {"sets", c.sets},
              {"layer", c.layer},
              {"head", c.head},
              {"breakpoint", breakpoint_json(c.breakpoint)},
              {"timeline", c.timeline}}
      .dump();
}

Command decode_command(const std::string& payload, const std::string& peer, int64_t& seq) {
  Reader r(payload, peer, "command");
  Command c;
  const std::string kind = r.text("kind", 32);
  bool known = false;
  for (const auto& [k, name] : command_names())
    if (kind == name) c.kind = k, known = true;
  if (!known) r.fail("unknown command \"" + kind + "\"");
  seq = r.integer("seq", 1, INT64_MAX);
  c.count = r.integer("count", 0, kMaxStep);
  c.step = r.integer("step", 0, kMaxStep);
  c.knob = r.text("knob", 256);
  c.value = r.text("value", 4096);
  c.path = r.text("path", 4096);
  c.sets = r.texts("sets");
  c.layer = static_cast<int>(r.integer("layer", -1, 1 << 16));
  c.head = static_cast<int>(r.integer("head", -1, 1 << 16));
  c.breakpoint = read_breakpoint(Reader(r.at("breakpoint"), peer, "command's breakpoint"));
  c.timeline = static_cast<int>(r.integer("timeline", 0, 1 << 16));
  return c;
}

std::string encode_status(const RemoteStatus& s) {
  json breakpoints = json::array();
  for (const auto& b : s.breakpoints) breakpoints.push_back(breakpoint_json(b));
  return json{{"running", s.running},
              {"idle", s.idle},
              {"pending_steps", s.pending_steps},
              {"steps", s.steps},
              {"preset_name", s.preset_name},
              {"preset_toml", s.preset_toml},
              {"last_error", s.last_error},
              {"breakpoints", breakpoints},
              {"recording", s.recording},
              {"busy_seconds", s.busy_seconds},
              {"busy_with", s.busy_with},
              {"graphs", s.graphs},
              {"commands_taken", s.commands_taken},
              {"frames_missed", s.frames_missed},
              {"events_missed", s.events_missed}}
      .dump();
}

RemoteStatus decode_status(const std::string& payload, const std::string& peer) {
  Reader r(payload, peer, "status");
  RemoteStatus s;
  s.running = r.boolean("running");
  s.idle = r.boolean("idle");
  s.pending_steps = r.integer("pending_steps", 0, INT64_MAX);
  const json& steps = r.at("steps");
  if (!steps.is_array() || steps.empty() || steps.size() > 4096) r.fail("\"steps\" is not a list of step counts");
  s.steps.clear();
  for (const auto& v : steps) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) r.fail("\"steps\" is not a list of step counts");
    s.steps.push_back(v.get<int64_t>());
  }
  s.preset_name = r.text("preset_name", 256);
  s.preset_toml = r.text("preset_toml", max_payload(MessageType::Status));
  s.last_error = r.text("last_error", 4096);
  const json& breakpoints = r.at("breakpoints");
  if (!breakpoints.is_array() || breakpoints.size() > 4096) r.fail("\"breakpoints\" is not a list");
  for (const auto& b : breakpoints) s.breakpoints.push_back(read_breakpoint(Reader(b, peer, "status's breakpoint")));
  s.recording = r.text("recording", 4096);
  s.busy_seconds = r.number("busy_seconds");
  s.busy_with = r.text("busy_with", 4096);
  if (r.has("graphs")) s.graphs = r.text("graphs", 4096);
  s.commands_taken = r.integer("commands_taken", 0, INT64_MAX);
  s.frames_missed = r.integer("frames_missed", 0, INT64_MAX);
  s.events_missed = r.integer("events_missed", 0, INT64_MAX);
  return s;
}

std::string encode_events(const std::vector<Event>& events) {
  json out = json::array();
  for (const auto& e : events) out.push_back(event_to_json(e));
  return out.dump();
}

std::vector<Event> decode_events(const std::string& payload, const std::string& peer) {
  Reader r(payload, peer, "events");
  if (!r.root().is_array()) r.fail("not a list of events");
  std::vector<Event> out;
  out.reserve(r.root().size());
  for (const auto& j : r.root()) {
    Event e;
    if (!event_from_json(j, e)) r.fail("entry " + std::to_string(out.size()) + " is not an event");
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::string> encode_frames(const std::vector<std::shared_ptr<const Frame>>& frames) {
  // F32 and every snapshot: the viewer shows what a local engine's ring would hold.
  RecordConfig config;
  ChunkBuilder chunk(config);
  std::vector<std::string> out;
  auto flush = [&] {
    if (chunk.empty()) return;
    out.push_back(chunk.encode("the frames for a viewer", -1.0));
    chunk.clear();
  };
  for (const auto& f : frames) {
    if (!chunk.fits(*f)) flush();
    chunk.add(*f);
  }
  flush();
  return out;
}

std::vector<Frame> decode_frames(std::string payload, const std::string& peer) {
  try {
    return decode_chunk(SafetensorsFile::from_bytes(std::move(payload), "the frames " + peer + " sent"));
  } catch (const WireError&) {
    throw;
  } catch (const UserError& e) {
    throw WireError(one_line(e.what()));
  }
}

}  // namespace memscope::model
