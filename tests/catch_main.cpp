// The one translation unit that holds Catch2's main.
//
// MEMSCOPE_TEST_DEVICE=cuda runs every model the tests build on the GPU (issue 23): it becomes
// MEMSCOPE_DEVICE, which model::default_device() and every memscope-cli a test starts read.
// Unset, the tests run on the CPU, whatever MEMSCOPE_DEVICE the shell has.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

int main(int argc, char** argv) {
  const char* device = std::getenv("MEMSCOPE_TEST_DEVICE");
  setenv("MEMSCOPE_DEVICE", device && *device ? device : "cpu", 1);
  return Catch::Session().run(argc, argv);
}
