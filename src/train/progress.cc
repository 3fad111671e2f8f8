#include "train/progress.h"

#include <fmt/format.h>

#include <cstdio>

#include "common/log.h"

namespace cputrain::train {

std::string FormatEta(double s) {
  if (s < 0) s = 0;
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, static_cast<int>((t % 3600) / 60));
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, static_cast<int>(t % 60));
  return fmt::format("{}s", t);
}

std::string FormatCount(uint64_t n) {
  const double x = static_cast<double>(n);
  if (n >= 1000000000) return fmt::format("{:.2f}B", x / 1e9);
  if (n >= 1000000) return fmt::format("{:.2f}M", x / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{}", n);
}

ProgressDisplay::ProgressDisplay(int total_steps, bool bar, bool quiet)
    : total_(total_steps),
      bar_(bar),
      quiet_(quiet),
      every_(total_steps <= 50 ? 1 : total_steps / 50),
      start_(std::chrono::steady_clock::now()) {}

ProgressDisplay::~ProgressDisplay() { Finish(); }

void ProgressDisplay::Clear() {
  if (bar_ && drawn_) {
    std::fputs("\r\033[K", stderr);
    drawn_ = false;
  }
}

void ProgressDisplay::Step(int step, double loss, double tps, double lr, uint64_t tokens,
                           uint64_t epoch) {
  if (quiet_) return;
  last_tps_ = tps;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = step > 0 ? elapsed / step * (total_ - step) : 0;
  if (bar_) {
    constexpr int kWidth = 24;
    const int filled = total_ > 0 ? step * kWidth / total_ : kWidth;
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr,
                 "\r\033[K[%s] step %d/%d | loss %.4f | %s tok, epoch %llu | %.0f tok/s | lr %.2e "
                 "| ETA %s",
                 bar.c_str(), step, total_, loss, FormatCount(tokens).c_str(),
                 static_cast<unsigned long long>(epoch), tps, lr, FormatEta(eta).c_str());
    std::fflush(stderr);
    drawn_ = true;
    return;
  }
  if (step % every_ == 0 || step == total_ || step == 1) {
    std::fprintf(stderr,
                 "%sstep %d/%d | loss %.4f | %s tok, epoch %llu | %.0f tok/s | lr %.2e | ETA %s\n",
                 log::Stamp().c_str(), step, total_, loss, FormatCount(tokens).c_str(),
                 static_cast<unsigned long long>(epoch), tps, lr, FormatEta(eta).c_str());
  }
}

void ProgressDisplay::Eval(int step, double val_loss) {
  if (quiet_) return;
  Clear();
  std::fprintf(stderr, "%sstep %d/%d | val loss %.4f\n", log::Stamp().c_str(), step, total_,
               val_loss);
}

void ProgressDisplay::Message(const std::string& line) {
  if (quiet_) return;
  Clear();
  std::fprintf(stderr, "%s%s\n", log::Stamp().c_str(), line.c_str());
}

void ProgressDisplay::Finish() {
  if (bar_ && drawn_) {
    std::fputs("\n", stderr);
    drawn_ = false;
  }
}

}  // namespace cputrain::train
