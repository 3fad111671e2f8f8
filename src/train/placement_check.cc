#include "train/placement_check.h"

#include <fmt/format.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <utility>

#include "common/error.h"
#include "topology/topology.h"

namespace cputrain::train {

nlohmann::json GatherPlacement(comm::Distributed& dist, nlohmann::json mine) {
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

std::vector<std::string> UnusedCpuWarnings(const nlohmann::json& ranks) {
  struct Host {
    int ranks = 0;
    std::set<int> cpuset, used;
  };
  std::map<std::string, Host> hosts;
  for (const auto& r : ranks) {
    if (r["simulated"].get<bool>()) continue;
    Host& h = hosts[r["host"].get<std::string>()];
    ++h.ranks;
    for (int c : r.value("cpuset_cpus", nlohmann::json::array())) h.cpuset.insert(c);
    for (int c : r.value("allowed_cpus", nlohmann::json::array())) h.used.insert(c);
  }
  std::vector<std::string> out;
  for (const auto& [name, h] : hosts) {
    std::vector<int> idle;
    for (int c : h.cpuset) {
      if (!h.used.count(c)) idle.push_back(c);
    }
    if (h.ranks < 2 || idle.empty()) continue;
    out.push_back(fmt::format(
        "host {}: the bindings of its {} ranks leave CPU(s) {} of its cpuset unused (mpirun binds "
        "each rank to a core by default): run one rank per host with `--map-by ppr:1:node "
        "--bind-to none`, or one per socket with `--map-by ppr:1:socket --bind-to socket` "
        "(docs/multi-node.md)",
        name, h.ranks, topo::Topology::FormatCpuList(idle)));
  }
  return out;
}

}  // namespace cputrain::train
