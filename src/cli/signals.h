// Signals belong to the CLI: the library takes a StopToken (common/stop.h) and polls it.
//
// StopOnSignals routes SIGINT, SIGTERM and SIGHUP to a StopToken while it lives: the first of
// them requests a stop (the command finishes its current unit of work and says what it kept);
// the handler is installed with SA_RESETHAND, so a second signal of the same kind ends the
// process at once with the default action (exit status 128 + signal, what shells and mpirun
// expect), without waiting for the library. The previous handlers are restored on destruction.
//
// Thread safety: one StopOnSignals per process at a time (it owns process-wide handlers);
// construct and destroy it on the main thread.
#pragma once

#include <signal.h>

#include <string>

#include "common/stop.h"

namespace cputrain::cli {

class StopOnSignals {
 public:
  explicit StopOnSignals(StopToken& token);
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3]{};
};

// "SIGTERM" for SIGTERM, "signal 42" for others.
std::string SignalName(int signo);

// Thrown by a command that ends by a request rather than by an error (a stop by signal):
// main() prints the message as it is, not as an "error:", and exits with `code`.
class StopExit {
 public:
  StopExit(int code, std::string message) : code_(code), message_(std::move(message)) {}
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  int code_;
  std::string message_;
};

}  // namespace cputrain::cli
