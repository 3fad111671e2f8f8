// Helpers shared by the tests: temporary directories, reading files, running the CLI, hwloc XML
// fixtures.
#pragma once

#include <string>
#include <vector>

namespace cputrain::test {

// A fresh directory under $TMPDIR, removed with everything in it at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The whole file's bytes ("" if it cannot be read: the caller's assertions say what was expected).
std::string Slurp(const std::string& path);

struct CliResult {
  int exit_code = -1;
  std::string out, err;
  bool timed_out = false;  // killed after timeout_s (exit_code is then 128 + SIGKILL)
};
// Runs the built cputrain-numa with `args` (no shell; env additions as NAME=VALUE). With
// timeout_s > 0 the process is killed after that many seconds, so a test of a hang fails
// instead of hanging.
CliResult RunCli(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                 int timeout_s = 0);
std::string CliPath();

// hwloc XML of a synthetic machine, and the same with its allowed_cpuset replaced.
std::string SyntheticXml(const std::string& synthetic_desc);
std::string WithAllowedCpuset(const std::string& xml, const std::string& hex_mask);

}  // namespace cputrain::test
