// The wire between a served run and an attached viewer (issue 22): length-prefixed, versioned
// messages with bounded sizes. Every message is a 12-byte header, then its payload:
//
//   magic "MSCP" (4 bytes) · version u16 · type u16 · payload length u32 (all little-endian)
//
// Payloads are JSON, except Frames: a frames chunk in the session's own safetensors layout
// (frame_chunk.h), so the wire and a recording share one fuzzed decoder. A decoder trusts nothing:
// a wrong magic, another version, an unknown type or a length above the type's bound is a
// WireError that closes that connection only. Torch-free, so it fuzzes fast (fuzz/fuzz_wire.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include "model/util/errors.h"

namespace memscope::model {

inline constexpr char kWireMagic[4] = {'M', 'S', 'C', 'P'};
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kWireHeaderBytes = 12;

enum class MessageType : uint16_t {
  Hello = 1,    // viewer → run: {"version", "token", "client"}
  Welcome = 2,  // run → viewer: who serves, what it refuses and why (wire_messages.h)
  Refuse = 3,   // run → viewer, then the run closes: {"reason"} (a wrong token, a full server)
  Command = 4,  // viewer → run: one engine Command
  Status = 5,   // run → viewer: the EngineStatus, and what this viewer missed
  Events = 6,   // run → viewer: a JSON array of events, in logged order
  Frames = 7,   // run → viewer: a frames chunk (safetensors bytes) of one or more frames
  Notice = 8,   // run → viewer: {"message"}: a command it refused, shown as an error event
  Bye = 9,      // run → viewer, then the run closes: {"reason"} ("the run finished at step 1500")
};
const char* to_string(MessageType type);

// The most a payload of this type may hold: frames chunks get room for full-size matrix
// snapshots, everything else is small.
size_t max_payload(MessageType type);

struct WireMessage {
  MessageType type = MessageType::Hello;
  std::string payload;
};

// A malformed or hostile message: the connection that sent it is closed, nothing else.
class WireError : public UserError {
 public:
  using UserError::UserError;
};

// Header and payload as one buffer. Throws WireError when the payload exceeds max_payload(type).
std::string encode_message(MessageType type, std::string_view payload);

// Splits a byte stream into messages as it arrives, in any pieces.
class WireDecoder {
 public:
  // `peer` names the other side in errors ("viewer 127.0.0.1:51234").
  explicit WireDecoder(std::string peer) : peer_(std::move(peer)) {}

  // Appends received bytes. Throws WireError as soon as a header is wrong, before its payload
  // arrives, so a hostile length never makes the decoder wait for or hold gigabytes.
  void feed(const char* data, size_t size);
  bool has_message() const { return !ready_.empty(); }
  WireMessage pop();  // requires has_message()
  size_t buffered() const { return buffer_.size(); }

 private:
  void parse();
  std::string peer_;
  std::string buffer_;
  std::deque<WireMessage> ready_;
};

}  // namespace memscope::model
