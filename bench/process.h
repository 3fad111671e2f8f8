// Running a helper program (mpirun and the MPI worker) and reading its standard output.
#pragma once

#include <string>
#include <vector>

namespace cputrain::bench {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number if a signal ended it
  std::string out;     // everything it wrote on stdout
};

// Runs argv[0] (searched in PATH when it has no '/') with argv, stdin from /dev/null, stdout
// captured, stderr passed through. Throws RuntimeError if it cannot be started.
ProcessResult RunProcess(const std::vector<std::string>& argv);

// The full path of `program` found in PATH, or "" if it is not there.
std::string FindInPath(const std::string& program);

// The directory holding the running executable (from /proc/self/exe), or "".
std::string ExecutableDir();

}  // namespace cputrain::bench
