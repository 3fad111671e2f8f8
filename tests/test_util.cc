#include "test_util.h"

#include <fcntl.h>
#include <hwloc.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace cputrain::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/cputrain-test-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string CliPath() { return std::string(CPUTRAIN_BINARY_DIR) + "/src/cli/cputrain-numa"; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliResult RunCli(const std::vector<std::string>& args, const std::vector<std::string>& env,
                 int timeout_s) {
  TempDir dir;
  const std::string out = dir.path() + "/out", err = dir.path() + "/err";
  std::vector<std::string> argv_s = {CliPath()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  env_s.insert(env_s.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  CliResult r;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    throw std::runtime_error("cannot start " + argv_s[0]);
  }
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  if (timeout_s > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        r.timed_out = true;
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } else {
    waitpid(pid, &status, 0);
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

std::string SyntheticXml(const std::string& desc) {
  hwloc_topology_t t;
  hwloc_topology_init(&t);
  if (hwloc_topology_set_synthetic(t, desc.c_str()) != 0 || hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    throw std::runtime_error("bad synthetic description " + desc);
  }
  char* buf = nullptr;
  int len = 0;
  hwloc_topology_export_xmlbuffer(t, &buf, &len, 0);
  std::string xml(buf, static_cast<std::size_t>(len > 0 ? len - 1 : 0));
  hwloc_free_xmlbuffer(t, buf);
  hwloc_topology_destroy(t);
  return xml;
}

std::string WithAllowedCpuset(const std::string& xml, const std::string& hex_mask) {
  // Only the root (Machine) object carries allowed_cpuset.
  return std::regex_replace(xml, std::regex("allowed_cpuset=\"[^\"]*\""),
                            "allowed_cpuset=\"" + hex_mask + "\"",
                            std::regex_constants::format_first_only);
}

}  // namespace cputrain::test
