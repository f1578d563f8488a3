// Errors reach the user as one clear line (DESIGN "Conventions"). LibTorch's messages carry
// a C++ backtrace after the first line; these helpers keep what a user needs.
#pragma once
#include <stdexcept>
#include <string>

namespace memscope::model {

// A user-facing error at a boundary (config, files, CLI): the message already names what and where.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The first line of a message, without LibTorch's "Exception raised from …" backtrace.
std::string one_line(const std::string& message);

}  // namespace memscope::model
