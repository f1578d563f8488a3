// One fuzz input for the wire (issue 22), shared by fuzz_wire.cpp and the mutation test in
// tests/session/test_wire.cpp: the first byte sets how the rest is cut into reads (1–256 bytes
// each, as a socket would deliver it), the rest is the byte stream a peer sent. Every message
// decoded goes through the decoder of its type, as the run or the viewer would use it.
//
// Rejecting is always allowed, but only as a UserError (WireError is one) with one line; anything
// else escaping is a crash to the fuzzer. What is accepted must survive a round trip.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/remote/wire.h"
#include "model/remote/wire_messages.h"

namespace memscope::fuzz {

inline void wire_require(bool ok) {
  if (!ok) std::abort();
}

inline void decode_wire_message(const model::WireMessage& m) {
  using model::MessageType;
  const std::string peer = "fuzz";
  switch (m.type) {
    case MessageType::Hello: model::decode_hello(m.payload, peer); break;
    case MessageType::Welcome: model::decode_welcome(m.payload, peer); break;
    case MessageType::Refuse:
    case MessageType::Notice:
    case MessageType::Bye: model::decode_reason(m.payload, peer); break;
    case MessageType::Command: {
      int64_t seq = 0;
      const model::Command c = model::decode_command(m.payload, peer, seq);
      int64_t again = 0;
      const model::Command d = model::decode_command(model::encode_command(c, seq), peer, again);
      wire_require(again == seq && d.kind == c.kind && d.count == c.count && d.knob == c.knob && d.value == c.value &&
                   d.sets == c.sets && d.breakpoint.kind == c.breakpoint.kind);
      break;
    }
    case MessageType::Status: {
      const model::RemoteStatus s = model::decode_status(m.payload, peer);
      wire_require(!s.steps.empty());
      break;
    }
    case MessageType::Events: {
      const auto events = model::decode_events(m.payload, peer);
      wire_require(model::decode_events(model::encode_events(events), peer).size() == events.size());
      break;
    }
    case MessageType::Frames: {
      const auto frames = model::decode_frames(m.payload, peer);
      for (const auto& f : frames) wire_require(f.head_metrics.size() == static_cast<size_t>(f.layers) * f.heads * model::kHeadMetricCount);
      break;
    }
  }
}

inline void decode_wire_input(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return;
  const std::size_t piece = static_cast<std::size_t>(data[0]) + 1;
  model::WireDecoder decoder("fuzz");
  try {
    for (std::size_t at = 1; at < size; at += piece) {
      const std::size_t n = std::min(piece, size - at);
      decoder.feed(reinterpret_cast<const char*>(data + at), n);
      while (decoder.has_message()) {
        const model::WireMessage m = decoder.pop();
        wire_require(m.payload.size() <= model::max_payload(m.type));
        try {
          decode_wire_message(m);
        } catch (const model::UserError& e) {
          wire_require(std::string(e.what()).find('\n') == std::string::npos);
        }
      }
    }
  } catch (const model::UserError& e) {
    wire_require(std::string(e.what()).find('\n') == std::string::npos);
  }
}

}  // namespace memscope::fuzz
