#include "cli/train_job.h"

#include <fmt/format.h>

#include <csignal>
#include <exception>

#include "cli/signals.h"
#include "common/error.h"

namespace cputrain::cli {

train::Progress ProgressFromFlag(const std::string& value) {
  return value == "bar"     ? train::Progress::kBar
         : value == "lines" ? train::Progress::kLines
         : value == "quiet" ? train::Progress::kQuiet
                            : train::Progress::kAuto;
}

train::TrainResult TrainAsJob(const Config& cfg, train::TrainOptions o, mpi::Bridge* bridge,
                              const std::string& resume) {
  o.dist = bridge;
  const bool job = bridge && bridge->size() > 1;
  train::TrainResult r;
  try {
    r = train::Train(cfg, o);
  } catch (const Error& e) {
    // The other ranks wait for this one: end the whole job with this error's exit code.
    if (job) {
      bridge->Abort(e.exit_code(), fmt::format("error: {}{}", e.what(),
                                               e.hint().empty() ? "" : "\nhint: " + e.hint()));
    }
    if (bridge) bridge->Finish();
    throw;
  } catch (const std::exception& e) {
    if (job) bridge->Abort(1, fmt::format("error: {}", e.what()));
    if (bridge) bridge->Finish();
    throw;
  }
  if (bridge) bridge->Finish();
  if (r.stopped) {
    const int signo = r.stop_reason > 0 ? r.stop_reason : SIGTERM;
    throw StopExit(
        128 + signo,
        fmt::format("stopped by {} after step {}; checkpoint {}; resume: {}",
                    r.stop_reason > 0 ? SignalName(r.stop_reason) : "a signal on another rank",
                    r.last_step, r.checkpoint.empty() ? "saved by rank 0" : r.checkpoint,
                    job ? "the same mpirun command (train.resume: auto)" : resume));
  }
  return r;
}

}  // namespace cputrain::cli
