// What the task commands' end-to-end tests share (qa_train_test.cc, classify_test.cc): models and
// data a script makes with transformers in the peers' environment, cached per build; run_*.py
// style command lines; the rows of a run's metrics.jsonl. Header-only: the paths come from each
// test's compile definitions (CPUTRAIN_SOURCE_DIR, CPUTRAIN_BINARY_DIR, CPUTRAIN_PEERS_PYTHON).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "common/subprocess.h"
#include "test_util.h"

namespace cputrain::test {

inline const std::vector<std::string>& PeersEnv() {
  static const std::vector<std::string> env = {
      "OMP_NUM_THREADS=1",    "MKL_NUM_THREADS=1",      "TOKENIZERS_PARALLELISM=false",
      "HF_HUB_OFFLINE=1",     "TRANSFORMERS_OFFLINE=1", "PYTHONDONTWRITEBYTECODE=1",
      "HF_DATASETS_OFFLINE=1"};
  return env;
}

// The directory `maker` (a script under tests/, run with the peers' Python and the directory as
// its argument) writes, made once per build and kept: ctest runs each test in its own process,
// and making it per process would run transformers a dozen times. Keyed by the CRC32C of the
// maker and of `also` (scripts it runs), so editing either makes a new one; made in a temporary
// directory and renamed into place, so concurrent tests never see half of it. `name`: its folder
// under the build's tests/; `probe`: a file inside that says it is complete. "" on failure.
inline std::string MadeByPeers(const std::string& maker, const std::vector<std::string>& also,
                               const std::string& name, const std::string& probe) {
  namespace fs = std::filesystem;
  const std::string python = CPUTRAIN_PEERS_PYTHON;
  if (!fs::exists(python)) {
    ADD_FAILURE() << python << " is missing: run scripts/install-deps.sh --peers";
    return "";
  }
  std::string code = Slurp(maker);
  for (const std::string& f : also) code += Slurp(f);
  char key[16];
  std::snprintf(key, sizeof(key), "%08x", Crc32c(0, code.data(), code.size()));
  const std::string done = std::string(CPUTRAIN_BINARY_DIR) + "/tests/" + name + "/" + key;
  std::error_code ec;
  if (fs::exists(done + "/" + probe, ec)) return done;
  fs::create_directories(fs::path(done).parent_path(), ec);
  const std::string tmp = done + ".tmp" + std::to_string(getpid());
  SubprocessOptions opts;
  opts.env = PeersEnv();
  const SubprocessResult r = RunSubprocess({python, maker, tmp}, opts);
  if (r.exit_code != 0) {
    ADD_FAILURE() << maker << " failed (" << r.exit_code << "):\n" << r.err;
    fs::remove_all(tmp, ec);
    return "";
  }
  fs::rename(tmp, done, ec);  // fails if another test made it first: theirs is the same
  fs::remove_all(tmp, ec);
  return done;
}

// Flags and their values ("" for a switch, kLeaveOut to drop a default one).
using Flags = std::vector<std::pair<std::string, std::string>>;
inline const std::string kLeaveOut = "(left out)";

// command (e.g. {"qa", "train"}) with the flags `defaults`, each replaced by its value in `more`
// (CLI11 refuses a repeated option) or added from it; --set always adds.
inline std::vector<std::string> TaskCommandLine(std::vector<std::string> command, Flags defaults,
                                                const Flags& more) {
  for (const auto& m : more) {
    auto it = std::find_if(defaults.begin(), defaults.end(),
                           [&](const auto& x) { return x.first == m.first; });
    if (it != defaults.end() && m.first != "--set") {
      it->second = m.second;
    } else {
      defaults.push_back(m);
    }
  }
  for (const auto& [flag, value] : defaults) {
    if (value == kLeaveOut) continue;
    command.push_back(flag);
    if (!value.empty()) command.push_back(value);
  }
  return command;
}

// metrics.jsonl without the timing fields (resume_test.cc's Rows).
inline std::vector<nlohmann::json> MetricsRows(const std::string& out) {
  std::ifstream in(out + "/metrics.jsonl");
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* t :
         {"ms", "tokens_per_s", "forward_ms", "backward_ms", "comm_ms", "optimizer_ms", "time"}) {
      j.erase(t);
    }
    rows.push_back(j);
  }
  return rows;
}

inline std::vector<double> MetricsLosses(const std::string& out) {
  std::vector<double> l;
  for (const nlohmann::json& r : MetricsRows(out)) l.push_back(r.at("loss").get<double>());
  return l;
}

}  // namespace cputrain::test
