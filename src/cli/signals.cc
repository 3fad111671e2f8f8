#include "cli/signals.h"

#include <fmt/format.h>
#include <string.h>

#include <atomic>

namespace cputrain::cli {
namespace {

// The token the handler writes to. An atomic pointer, so the handler reads a fully published
// value: the constructor stores it (release) before installing the handler, and the handler
// loads it (acquire). Lock-free, hence async-signal-safe.
std::atomic<StopToken*> g_token{nullptr};

extern "C" void OnStopSignal(int signo) {
  if (StopToken* t = g_token.load(std::memory_order_acquire)) t->Request(signo);
}

}  // namespace

StopOnSignals::StopOnSignals(StopToken& token) {
  token.Reset();
  g_token.store(&token, std::memory_order_release);
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second signal of the same kind: the default action, at once
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
}

StopOnSignals::~StopOnSignals() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
  g_token.store(nullptr, std::memory_order_release);
}

std::string SignalName(int signo) {
  switch (signo) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return fmt::format("signal {}", signo);
  }
}

}  // namespace cputrain::cli
