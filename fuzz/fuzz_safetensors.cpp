// libFuzzer entry for the safetensors header parser. Rejecting an input is always allowed, but only
// as a UserError with one line naming the source; anything else escaping reaches libFuzzer as a
// crash. An accepted header must describe disjoint tensors inside the buffer, whose bytes are
// then read so that ASan checks the bounds the parser let through.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "model/session/safetensors_reader.h"
#include "model/util/errors.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace memscope::model;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  StHeader header;
  try {
    header = parse_safetensors_header(bytes, size, "fuzz");
  } catch (const UserError& e) {
    const std::string_view message = e.what();
    require(message.size() > 6 && message.substr(0, 6) == "fuzz: ");
    require(message.find_first_of("\n\r") == std::string_view::npos);
    return 0;
  }
  require(header.data_start >= 8 && header.data_start <= size);
  const std::uint64_t data_size = size - header.data_start;
  std::uint64_t cursor = 0;
  unsigned sum = 0;
  for (const auto& t : header.tensors) {  // sorted by begin, as the header promises
    require(t.begin <= t.end && t.end <= data_size && t.begin >= cursor);
    require(t.end - t.begin == t.elements() * st_dtype_size(t.dtype));
    for (std::uint64_t i = t.begin; i < t.end; ++i) sum += data[header.data_start + i];
    cursor = t.end;
  }
  volatile unsigned sink = sum;  // keeps the reads
  (void)sink;
  return 0;
}
