#include "train/placement_check.h"

#include <fmt/format.h>
#include <unistd.h>

#include <map>
#include <string>
#include <utility>

#include "common/error.h"

namespace cputrain::train {

nlohmann::json GatherPlacement(Distributed& dist, nlohmann::json mine) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  mine["rank"] = dist.rank();
  mine["host"] = host;
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::string& one : dist.Gather(mine.dump())) {
    ranks.push_back(nlohmann::json::parse(one));
  }
  mine["ranks"] = std::move(ranks);
  return mine;
}

void CheckNoSharedCpus(const nlohmann::json& ranks) {
  std::map<std::pair<std::string, int>, int> pinned;  // (host, cpu) -> rank
  for (const auto& r : ranks) {
    if (r["simulated"].get<bool>()) continue;
    for (const auto& grp : r["groups"]) {
      for (int cpu : grp["cpus"]) {
        auto [it, fresh] =
            pinned.emplace(std::make_pair(r["host"].get<std::string>(), cpu), r["rank"].get<int>());
        if (!fresh) {
          throw InputError(
              fmt::format("ranks {} and {} on host {} both pin a worker to CPU {}", it->second,
                          r["rank"].get<int>(), it->first.first, cpu),
              "give each process its own CPUs: one process per machine, or mpirun "
              "--map-by socket --bind-to socket for one per socket (docs/multi-node.md)");
        }
      }
    }
  }
}

}  // namespace cputrain::train
