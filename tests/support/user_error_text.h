// The message of the UserError that f throws, or "(no error)": tests check what an error names.
#pragma once
#include <functional>
#include <string>

#include "model/util/errors.h"

namespace memscope::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const model::UserError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace memscope::test
