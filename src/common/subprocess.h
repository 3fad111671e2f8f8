// Running another program: argv with an optional stdin text, extra environment and a timeout;
// stdout and stderr captured (or inherited, or discarded); the exit status or the signal that
// ended it. The one process-spawning helper of the tree: the benchmarks start mpirun, the MPI
// worker and PyTorch with it, the tests start the CLI with it.
//
// Thread safety: a Subprocess is used by one thread. The child is started with posix_spawnp, so
// a multithreaded caller is fine (no fork of a threaded process).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace cputrain {

struct SubprocessOptions {
  enum class Output { kCapture, kInherit, kDiscard };
  Output out = Output::kCapture;  // the child's stdout
  Output err = Output::kCapture;  // the child's stderr
  // Written to the child's stdin, which is then closed; with no text, stdin is /dev/null.
  std::string stdin_text;
  // "NAME=VALUE" entries set on top of this process's environment (replacing a NAME it has).
  std::vector<std::string> env;
  // Past this many seconds the child gets SIGKILL and the result says timed_out (0 = no limit).
  double timeout_seconds = 0;
};

struct SubprocessResult {
  int exit_code = -1;   // the exit status, or 128 + the signal's number if a signal ended it
  int term_signal = 0;  // the signal that ended it, 0 if it exited
  bool timed_out = false;
  std::string out, err;  // what it wrote, for the streams captured
};

// A running child. Destroying one that was not waited for kills (SIGKILL) and reaps it.
class Subprocess {
 public:
  // Starts argv[0] (searched in PATH when it has no '/'). Throws RuntimeError naming the program
  // if it cannot be started.
  Subprocess(const std::vector<std::string>& argv, const SubprocessOptions& options = {});
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `sig` to the child (no effect once it has been waited for).
  void Signal(int sig);
  // Feeds stdin, reads the captured streams to their end, reaps the child. Call once.
  SubprocessResult Wait();

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1;  // our ends of the pipes, -1 when none
  std::string stdin_text_;
  double timeout_seconds_ = 0;
  double start_ = 0;
};

// Starts argv, waits for it, returns what it did.
SubprocessResult RunSubprocess(const std::vector<std::string>& argv,
                               const SubprocessOptions& options = {});

// The full path of `program` found in PATH, or "" if it is not there.
std::string FindInPath(const std::string& program);

// The directory holding the running executable (from /proc/self/exe), or "".
std::string ExecutableDir();

}  // namespace cputrain
