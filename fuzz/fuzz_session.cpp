// libFuzzer entry for the rest of a recorded session (DESIGN "Sessions"): the first byte picks the
// sub-target, the remaining bytes are its input.
//   even: a frames chunk. The bytes go to a per-process temp file, opened as a SafetensorsFile and
//         decoded with read_chunk_steps and decode_chunk.
//   odd:  events.jsonl. Each line is parsed (no exceptions) and given to event_from_json; an
//         accepted event must survive event_to_json → event_from_json.
// session.json (parse_session_info) is not fuzzed here: session_info.h includes model/config/preset.h,
// which reaches ATen through model/memory/newton_schulz.h, and session_info.cpp needs the knob
// registry, so it cannot be linked without Torch.
//
// Rejecting an input is always allowed, but only as a UserError with one line naming the file;
// anything else escaping reaches libFuzzer as a crash. A decoded chunk is checked for consistency.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/probe/frame_json.h"
#include "model/session/frame_chunk.h"
#include "model/session/safetensors_reader.h"
#include "model/util/errors.h"

namespace {

using namespace memscope::model;

void require(bool ok) {
  if (!ok) std::abort();
}

// Reused for every input; libFuzzer leaves it behind when it exits.
const std::string& temp_path() {
  static const std::string path = "/tmp/memscope-fuzz-session-" + std::to_string(::getpid()) + ".safetensors";
  return path;
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  require(fd >= 0);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    require(n > 0);
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

void fuzz_chunk(const std::uint8_t* data, std::size_t size) {
  const std::string& path = temp_path();
  write_file(path, data, size);
  try {
    SafetensorsFile file(path);
    std::vector<int64_t> steps;
    std::vector<int32_t> timelines;
    read_chunk_steps(file, steps, timelines);
    require(steps.size() == timelines.size());
    const std::vector<Frame> frames = decode_chunk(file);
    require(frames.size() == steps.size());
    require(static_cast<std::size_t>(std::stoll(file.header().metadata.at("rows"))) == frames.size());
    for (std::size_t r = 0; r < frames.size(); ++r) {
      const Frame& f = frames[r];
      require(f.step == steps[r] && f.timeline == timelines[r]);
      if (!f.head_metrics.empty()) {
        require(f.layers > 0 && f.heads > 0 && !f.weights.empty());
        const auto lh = static_cast<std::size_t>(f.layers) * static_cast<std::size_t>(f.heads);
        require(f.head_metrics.size() == lh * kHeadMetricCount);
        require(f.weight_metrics.size() == lh * f.weights.size() * kWeightMetricCount);
      }
      for (const auto& m : f.matrices) {
        require(m.rows >= 0 && m.cols >= 0);
        require(m.values.size() == static_cast<std::size_t>(m.rows) * static_cast<std::size_t>(m.cols));
      }
    }
  } catch (const UserError& e) {
    const std::string_view message = e.what();
    require(message.size() > path.size() + 2 && message.substr(0, path.size() + 2) == path + ": ");
    require(message.find_first_of("\n\r") == std::string_view::npos);
  }
}

void fuzz_events(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    Event e;
    if (!j.is_discarded() && event_from_json(j, e)) {
      require(e.timeline >= 0);
      Event again;
      require(event_from_json(event_to_json(e), again));
      require(again.kind == e.kind && again.step == e.step && again.timeline == e.timeline &&
              again.message == e.message && again.layer == e.layer && again.head == e.head && again.tensor == e.tensor);
    }
    start = end + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) fuzz_chunk(data + 1, size - 1);
  else fuzz_events(data + 1, size - 1);
  return 0;
}
