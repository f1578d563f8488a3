#include "model/remote/wire.h"

#include <cstring>

namespace memscope::model {

namespace {

uint16_t read_u16(const char* p) {
  return static_cast<uint16_t>(static_cast<unsigned char>(p[0]) | static_cast<unsigned char>(p[1]) << 8);
}

uint32_t read_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(p[i]);
  return v;
}

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i) & 0xff));
}

bool known(uint16_t type) {
  return type >= static_cast<uint16_t>(MessageType::Hello) && type <= static_cast<uint16_t>(MessageType::Bye);
}

}  // namespace

const char* to_string(MessageType type) {
  switch (type) {
    case MessageType::Hello: return "hello";
    case MessageType::Welcome: return "welcome";
    case MessageType::Refuse: return "refuse";
    case MessageType::Command: return "command";
    case MessageType::Status: return "status";
    case MessageType::Events: return "events";
    case MessageType::Frames: return "frames";
    case MessageType::Notice: return "notice";
    case MessageType::Bye: return "bye";
  }
  return "?";
}

size_t max_payload(MessageType type) {
  switch (type) {
    case MessageType::Frames: return size_t{256} << 20;  // a chunk of full-size HOPE snapshots
    case MessageType::Events: return size_t{16} << 20;   // a long run's whole event log on connect
    case MessageType::Status: return size_t{4} << 20;    // carries the preset's TOML
    default: return size_t{1} << 20;
  }
}

std::string encode_message(MessageType type, std::string_view payload) {
  if (payload.size() > max_payload(type))
    throw WireError(std::string("a ") + to_string(type) + " message of " + std::to_string(payload.size()) +
                    " bytes is above the wire's bound of " + std::to_string(max_payload(type)));
  std::string out(kWireMagic, sizeof kWireMagic);
  out.reserve(kWireHeaderBytes + payload.size());
  put_le(out, kWireVersion, 2);
  put_le(out, static_cast<uint16_t>(type), 2);
  put_le(out, payload.size(), 4);
  out.append(payload);
  return out;
}

void WireDecoder::feed(const char* data, size_t size) {
  buffer_.append(data, size);
  parse();
}

WireMessage WireDecoder::pop() {
  WireMessage m = std::move(ready_.front());
  ready_.pop_front();
  return m;
}

void WireDecoder::parse() {
  size_t at = 0;
  while (buffer_.size() - at >= kWireHeaderBytes) {
    const char* h = buffer_.data() + at;
    if (std::memcmp(h, kWireMagic, sizeof kWireMagic) != 0)
      throw WireError(peer_ + " does not speak memscope's wire (no \"MSCP\" header)");
    const uint16_t version = read_u16(h + 4), type = read_u16(h + 6);
    const uint32_t length = read_u32(h + 8);
    if (version != kWireVersion)
      throw WireError(peer_ + " speaks memscope wire version " + std::to_string(version) + ", this memscope speaks " +
                      std::to_string(kWireVersion) + ": run the same memscope version on both ends");
    if (!known(type)) throw WireError(peer_ + " sent a message of unknown type " + std::to_string(type));
    const auto t = static_cast<MessageType>(type);
    if (length > max_payload(t))
      throw WireError(peer_ + " sent a " + to_string(t) + " message of " + std::to_string(length) +
                      " bytes, above the bound of " + std::to_string(max_payload(t)));
    if (buffer_.size() - at - kWireHeaderBytes < length) break;  // the rest has not arrived yet
    ready_.push_back({t, buffer_.substr(at + kWireHeaderBytes, length)});
    at += kWireHeaderBytes + length;
  }
  buffer_.erase(0, at);
}

}  // namespace memscope::model
