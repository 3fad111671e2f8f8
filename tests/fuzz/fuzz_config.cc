// Fuzz target: the YAML config parser and --set overrides (src/config/config.h).
//
// Input: YAML text, then optionally NUL-separated `--set` strings ("section.key=value"), at
// most 8. A rejection is an InputError. A config that parses must survive its own dump:
// ConfigToYaml is written next to a run's outputs and hashed by the MPI bridge to check that the
// ranks agree, so parsing the dump must give the same dump back.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (parts.size() < 9) {
    std::size_t nul = input.find('\0', begin);
    if (nul == std::string::npos || parts.size() == 8) {
      parts.push_back(input.substr(begin));
      break;
    }
    parts.push_back(input.substr(begin, nul - begin));
    begin = nul + 1;
  }
  const std::vector<std::string> sets(parts.begin() + 1, parts.end());
  cputrain::Config config;
  try {
    config = cputrain::ParseConfig(parts[0], "fuzz.yaml", sets);
  } catch (const cputrain::InputError&) {
    return 0;
  }
  const std::string dump = cputrain::ConfigToYaml(config);
  std::string again;
  try {
    again = cputrain::ConfigToYaml(cputrain::ParseConfig(dump, "dump.yaml", {}));
  } catch (const cputrain::InputError& e) {
    std::fprintf(stderr, "the dump of an accepted config is rejected: %s\n%s\n", e.what(),
                 dump.c_str());
    std::abort();
  }
  if (again != dump) {
    std::fprintf(stderr, "config dump does not round-trip:\n%s\n---\n%s\n", dump.c_str(),
                 again.c_str());
    std::abort();
  }
  return 0;
}
