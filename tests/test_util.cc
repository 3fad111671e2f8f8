#include "test_util.h"

#include <hwloc.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "common/subprocess.h"

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
  std::vector<std::string> argv = {CliPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  SubprocessOptions opts;
  opts.env = env;
  opts.timeout_seconds = timeout_s;
  const SubprocessResult r = RunSubprocess(argv, opts);
  return {r.exit_code, r.out, r.err, r.timed_out};
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
