// The project's one error model.
//
// Every failure is a C++ exception derived from cputrain::Error. Library code throws and never
// calls exit(); only main() turns an Error into an exit code:
//   InputError   -> exit 2: the user's input is wrong (command line, config, data file,
//                   checkpoint, placement). The message names the input and what is wrong;
//                   hint() says how to fix it.
//   RuntimeError -> exit 1: the input was fine but something failed while running (an I/O
//                   error, a peer rank that died, an internal invariant that did not hold).
// Any other std::exception escaping to main() is reported as a runtime failure (exit 1).
#pragma once

#include <stdexcept>
#include <string>

namespace cputrain {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string hint, int exit_code)
      : std::runtime_error(std::move(message)), hint_(std::move(hint)), exit_code_(exit_code) {}
  const std::string& hint() const { return hint_; }
  int exit_code() const { return exit_code_; }

 private:
  std::string hint_;
  int exit_code_;
};

// Bad input: exit code 2. `message` names the input (file, key, flag) and the problem;
// `hint` says what to do about it ("" if the message already does).
class InputError : public Error {
 public:
  explicit InputError(std::string message, std::string hint = "")
      : Error(std::move(message), std::move(hint), 2) {}
};

// Failure while running: exit code 1.
class RuntimeError : public Error {
 public:
  explicit RuntimeError(std::string message, std::string hint = "")
      : Error(std::move(message), std::move(hint), 1) {}
};

// Internal invariant check that stays on in release builds; throws RuntimeError carrying the
// file, line and failed expression (as gloo's GLOO_ENFORCE does).
[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace cputrain

#define CPUTRAIN_CHECK(cond, msg)                                           \
  do {                                                                      \
    if (!(cond)) ::cputrain::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
