// The payloads of the wire's messages (wire.h) and their codecs. Decoders check every field's
// presence, type and range and throw WireError naming the peer and the field: the decoding side
// closes that connection only. Torch-free (the preset travels as its TOML and is parsed by the
// viewer), so fuzz/fuzz_wire.cpp drives every decoder here.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/engine/command.h"
#include "model/probe/event.h"
#include "model/probe/frame.h"
#include "model/remote/wire.h"

namespace memscope::model {

struct Hello {
  std::string token;   // must equal the run's; compared in constant time
  std::string client;  // "memscope 0.x (pid N)", for the run's log
};

struct Welcome {
  std::string server;   // "memscope-cli train (pid 1234)"
  std::string run_id;   // new for every start of the serving process: a viewer that reconnects to
                        // another run starts its view over
  std::string label;    // "train demo-mqar"
  // Commands the run refuses from a viewer, by name ("rewind", "fork", "load preset"), with why.
  std::map<std::string, std::string> refused;
};

// What the run says about itself every ~100 ms, and after each command it takes.
struct RemoteStatus {
  bool running = false, idle = true;
  int64_t pending_steps = 0;
  std::vector<int64_t> steps = {0};  // per timeline; a run not heard from yet is at step 0
  std::string preset_name, preset_toml;  // the main timeline's knobs in force (Preset::toml)
  std::string last_error;
  std::vector<Breakpoint> breakpoints;
  std::string recording;
  double busy_seconds = 0;  // how long the step or command in flight has run (0: none)
  std::string busy_with;
  std::string graphs;          // EngineStatus::graphs; absent from a run older than it
  int64_t commands_taken = 0;  // the sequence number of the last command this viewer sent that the run took
  int64_t frames_missed = 0;   // frames the run dropped for this viewer (never for a recording)
  int64_t events_missed = 0;
};

std::string encode_hello(const Hello& hello);
Hello decode_hello(const std::string& payload, const std::string& peer);
std::string encode_welcome(const Welcome& welcome);
Welcome decode_welcome(const std::string& payload, const std::string& peer);
// Refuse, Notice and Bye carry one line.
std::string encode_reason(const std::string& reason);
std::string decode_reason(const std::string& payload, const std::string& peer);

// `seq` numbers the viewer's commands from 1; the run's status echoes the last one taken.
std::string encode_command(const Command& command, int64_t seq);
Command decode_command(const std::string& payload, const std::string& peer, int64_t& seq);
// The name a Welcome's `refused` uses for a command kind ("rewind", "load preset").
std::string command_name(Command::Kind kind);
// The name a Welcome's `refused` uses for setting any restart knob (a served training run's).
inline constexpr const char* kRestartKnob = "restart knob";

std::string encode_status(const RemoteStatus& status);
RemoteStatus decode_status(const std::string& payload, const std::string& peer);

std::string encode_events(const std::vector<Event>& events);
std::vector<Event> decode_events(const std::string& payload, const std::string& peer);

// Frames, in order, as chunks: one payload per run of frames that share a probe layout.
std::vector<std::string> encode_frames(const std::vector<std::shared_ptr<const Frame>>& frames);
std::vector<Frame> decode_frames(std::string payload, const std::string& peer);

}  // namespace memscope::model
