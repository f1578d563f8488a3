// libFuzzer entry for the viewer/run wire (issue 22): fuzz/wire_input.h says what one input is.
#include "fuzz/wire_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  memscope::fuzz::decode_wire_input(data, size);
  return 0;
}
