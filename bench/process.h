// Running a helper program (mpirun and the MPI worker, PyTorch's training script) and reading its
// standard output.
#pragma once

#include <string>
#include <vector>

namespace cputrain::bench {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number if a signal ended it
  std::string out;     // everything it wrote on stdout
};

// Runs argv[0] (searched in PATH when it has no '/') with argv, stdin from /dev/null, stdout
// captured, stderr passed through (or discarded with quiet_stderr). `env` entries "NAME=VALUE"
// are set on top of this process's environment. Throws RuntimeError if it cannot be started.
ProcessResult RunProcess(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {}, bool quiet_stderr = false);

// The full path of `program` found in PATH, or "" if it is not there.
std::string FindInPath(const std::string& program);

// The directory holding the running executable (from /proc/self/exe), or "".
std::string ExecutableDir();

}  // namespace cputrain::bench
