#include "train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "alloc/numa_alloc.h"
#include "comm/comm.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "data/token_file.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"
#include "optim/optim.h"
#include "runtime/worker_pool.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/grad_sync.h"
#include "train/progress.h"

namespace cputrain::train {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
extern "C" void OnSigint(int) {
  if (g_interrupted.exchange(true)) std::_Exit(130);  // a second Ctrl-C: stop now
}

// A replica group: its pinned workers and its memory, all on its NUMA node.
struct Group {
  int index = 0;
  int node = 0;
  int rows = 0;  // B/G sequences of each step's window
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<WorkerPool> comm_pool;               // comm_threads >= 1 and G > 1
  alloc::NodeBuffer<float> params, grads, m, v, acts;  // params: only if replica == index
  // The parameter replica this group reads and updates: its own, or (when every group is on one
  // NUMA node, where a copy per group buys no locality) group 0's, shared by all.
  int replica = 0;
  float* weights = nullptr;
  alloc::NodeBuffer<int> tokens;
  std::unique_ptr<model::Activations> act;
  comm::Range owned;
  // Results of the group's last step, read by the main thread after Wait().
  double loss_sum = 0;
  double grad_norm = 0;
  double forward_ms = 0, backward_ms = 0, comm_ms = 0, optimizer_ms = 0;
  alloc::NodeBuffer<float> scalars;  // 16 floats for the sum-of-squares allreduce

  // What OnAllGroups runs on the group's driver: (*fn)(*group), and on failure (*abort)(why)
  // so the other groups stop waiting for this one.
  struct Job {
    FunctionRef<void(Group&)>* fn = nullptr;
    FunctionRef<void(const std::string&)>* abort = nullptr;
    Group* group = nullptr;
    void operator()() const {
      try {
        (*fn)(*group);
      } catch (const std::exception& e) {
        (*abort)(fmt::format("group {} failed: {}", group->index, e.what()));
        throw;
      }
    }
  } job;
};

// Copies rows [row0, row0 + rows) of window `w` into inputs/targets.
void LoadRows(const data::TokenFile& file, std::size_t window, int B, int T, int row0, int rows,
              int* inputs, int* targets) {
  const uint16_t* base =
      file.data() + window * static_cast<std::size_t>(B) * T + static_cast<std::size_t>(row0) * T;
  const std::size_t n = static_cast<std::size_t>(rows) * T;
  for (std::size_t i = 0; i < n; ++i) {
    inputs[i] = base[i];
    targets[i] = base[i + 1];
  }
}

std::size_t Windows(const data::TokenFile& f, int B, int T) {
  return (f.size() - 1) / (static_cast<std::size_t>(B) * T);
}

data::TokenFile OpenTokens(const std::string& path, const char* key, int vocab, int B, int T) {
  if (path.empty()) {
    throw InputError(fmt::format("{} is not set", key),
                     "set it to a token file (cputrain-numa prepare-data writes them), e.g. "
                     "--set data.train=data/kjv/train.bin");
  }
  data::TokenFile f = data::TokenFile::Open(path);
  f.CheckBelow(vocab);
  if (Windows(f, B, T) == 0) {
    throw InputError(fmt::format("{} '{}' has {} tokens: fewer than one batch of B*T+1 = {} tokens",
                                 key, path, f.size(), static_cast<std::size_t>(B) * T + 1),
                     "use a larger file, or lower data.batch_size or data.seq_len");
  }
  return f;
}

// Runs fn(g) on every group's driver at once and waits for all; if one fails, `abort` wakes the
// others (so nobody waits forever on a dead peer) and the first error is rethrown. Allocates
// nothing: each group's job object lives in the group.
void OnAllGroups(std::vector<Group>& groups, FunctionRef<void(Group&)> fn,
                 FunctionRef<void(const std::string&)> abort) {
  for (Group& g : groups) {
    g.job = {&fn, &abort, &g};
    g.pool->Start(g.job);
  }
  std::exception_ptr first;
  for (Group& g : groups) {
    try {
      g.pool->Wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

nlohmann::json NodesJson(const void* p, std::size_t bytes) {
  return alloc::NodesBacking(p, bytes).nodes();
}

class MetricsFile {
 public:
  explicit MetricsFile(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "w")) {
    if (!f_) {
      throw InputError(fmt::format("cannot write '{}'", path), "check train.out_dir");
    }
  }
  ~MetricsFile() {
    if (f_) std::fclose(f_);
  }
  // One JSON object per line, written with one call and flushed: a reader (or a crash) never
  // sees half a line.
  void Write(const nlohmann::json& j) {
    const std::string line = j.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
      throw RuntimeError(fmt::format("writing '{}' failed", path_), "check free disk space");
    }
  }

 private:
  std::string path_;
  std::FILE* f_;
};

}  // namespace

TrainResult Train(const Config& cfg, const TrainOptions& options) {
  kernels::InitBlas();
  Distributed* dist = options.dist;
  const int R = dist ? dist->size() : 1;
  const int rank = dist ? dist->rank() : 0;
  const bool writer = rank == 0;  // only rank 0 writes out_dir and shows progress
  const topo::Topology topology = topo::LoadTopology(cfg.topology);
  const topo::Plan plan =
      topo::PlanPlacement(topology, cfg.placement, std::getenv("OMP_NUM_THREADS"));
  for (const std::string& w : plan.warnings) log::Warn("{}", w);
  const int G = static_cast<int>(plan.groups.size());

  // ---- model shape: from the checkpoint, or the config
  model::Shape shape;
  if (!cfg.model.init_from.empty()) {
    shape = model::ReadCheckpointShape(cfg.model.init_from);
  } else {
    shape = {
        cfg.model.max_seq_len, cfg.model.vocab_size, model::Shape::PadVocab(cfg.model.vocab_size),
        cfg.model.layers,      cfg.model.heads,      cfg.model.channels};
  }
  const model::ParamLayout layout(shape);
  const int B = cfg.data.batch_size, T = cfg.data.seq_len;
  if (T > shape.maxT) {
    throw InputError(
        fmt::format("data.seq_len ({}) is larger than the model's max_seq_len ({})", T, shape.maxT),
        "lower data.seq_len");
  }
  if (B % (R * G) != 0) {
    throw InputError(
        R == 1 ? fmt::format("data.batch_size ({}) is not divisible by the {} replica groups of "
                             "the placement plan",
                             B, G)
               : fmt::format("data.batch_size ({}) is not divisible by {} processes x {} replica "
                             "groups",
                             B, R, G),
        fmt::format("use a batch size that is a multiple of {}, or change placement.groups",
                    R * G));
  }
  const data::TokenFile train_file = OpenTokens(cfg.data.train, "data.train", shape.V, B, T);
  std::unique_ptr<data::TokenFile> val_file;
  int eval_windows = 0;
  if (!cfg.data.val.empty()) {
    val_file =
        std::make_unique<data::TokenFile>(OpenTokens(cfg.data.val, "data.val", shape.V, B, T));
    eval_windows =
        static_cast<int>(std::min<std::size_t>(cfg.train.eval_batches, Windows(*val_file, B, T)));
    if (eval_windows < cfg.train.eval_batches) {
      log::NoticeOnce("eval-windows", fmt::format("data.val has {} windows of B*T tokens; "
                                                  "evaluating on those instead of {}",
                                                  eval_windows, cfg.train.eval_batches));
    }
  }
  const std::size_t train_windows = Windows(train_file, B, T);

  // ---- outputs (rank 0 only)
  const std::string out = cfg.train.out_dir;
  if (writer) {
    MakeDirs(out);
    WriteFileAtomic(out + "/config.yaml", ConfigToYaml(cfg));
  }

  // ---- groups: pinned pools, NUMA-local memory, first touch on the group's own workers
  alloc::Configure(alloc::OptionsFor(topology));
  std::unique_ptr<topo::Binder> binder = topo::MakeBinder(topology);
  const bool sync_groups = G > 1 || dist != nullptr;
  std::vector<Group> groups(G);
  // Groups that share a NUMA node gain nothing from a parameter replica each: the copies sit in
  // the same memory, and keeping them equal costs an allgather of the whole model per step plus
  // twice the weight traffic in the GEMMs. When all groups are on one node (a one-node machine
  // split by cpus or by L3), they train on group 0's replica: each group's AdamW updates its
  // shard in place and there is no allgather. Gradients stay one buffer per group
  // (backward writes them concurrently). Groups on different nodes keep a replica each.
  bool share_replica = G > 1 && plan.groups[0].numa_node >= 0;
  for (int g = 1; g < G; ++g) share_replica &= plan.groups[g].numa_node == plan.groups[0].numa_node;
  for (int g = 0; g < G; ++g) {
    const topo::Group& pg = plan.groups[g];
    Group& grp = groups[g];
    grp.index = g;
    grp.node = pg.numa_node >= 0 ? pg.numa_node : 0;
    grp.rows = B / (R * G);
    grp.pool = std::make_unique<WorkerPool>(pg.cpus, binder.get(), fmt::format("g{}", g));
    if (sync_groups && !pg.comm_cpus.empty()) {
      grp.comm_pool =
          std::make_unique<WorkerPool>(pg.comm_cpus, binder.get(), fmt::format("c{}", g));
    }
    grp.owned = comm::ShardBounds(layout.total(), G, g);  // all of it when G = 1
    grp.act = std::make_unique<model::Activations>(shape, grp.rows, T, grp.pool->size());
    grp.replica = share_replica ? 0 : g;
    if (grp.replica == g) grp.params = alloc::NodeBuffer<float>(grp.node, layout.total());
    grp.grads = alloc::NodeBuffer<float>(grp.node, layout.total());
    grp.m = alloc::NodeBuffer<float>(grp.node, grp.owned.size());
    grp.v = alloc::NodeBuffer<float>(grp.node, grp.owned.size());
    grp.acts = alloc::NodeBuffer<float>(grp.node, grp.act->floats());
    grp.tokens = alloc::NodeBuffer<int>(grp.node, 2 * static_cast<std::size_t>(grp.rows) * T);
    grp.scalars = alloc::NodeBuffer<float>(grp.node, 16);
    grp.act->Bind(grp.acts.data(), grp.tokens.data());
  }
  auto no_abort = [](const std::string&) {};
  OnAllGroups(
      groups,
      [&](Group& grp) {
        for (alloc::NodeBuffer<float>* b :
             {&grp.params, &grp.grads, &grp.m, &grp.v, &grp.acts, &grp.scalars}) {
          // The other groups' own replicas are first touched by the copy of group 0's below (the
          // same workers, the same split); a group without a replica of its own has none.
          if (b == &grp.params && grp.index != 0) continue;
          float* p = b->data();
          grp.pool->ParallelFor(b->size(), [&](std::size_t lo, std::size_t hi, int) {
            std::fill(p + lo, p + hi, 0.f);
          });
        }
        std::fill(grp.tokens.begin(), grp.tokens.end(), 0);
      },
      no_abort);
  // Initial parameters in group 0, then copied by every other group's own workers.
  groups[0].pool->Run([&] {
    if (cfg.model.init_from.empty()) {
      model::RandomInit(*groups[0].pool, layout, cfg.model.seed, groups[0].params.data());
    } else {
      model::LoadCheckpoint(cfg.model.init_from, layout, groups[0].params.data());
    }
  });
  for (Group& grp : groups) grp.weights = groups[grp.replica].params.data();
  OnAllGroups(
      groups,
      [&](Group& grp) {
        if (grp.index == 0 || grp.replica != grp.index) return;
        const float* src = groups[0].params.data();
        float* dst = grp.params.data();
        grp.pool->ParallelFor(layout.total(), [&](std::size_t lo, std::size_t hi, int) {
          std::copy(src + lo, src + hi, dst + lo);
        });
      },
      no_abort);

  // ---- placement.json: what the plan asked for and where the memory actually is
  {
    nlohmann::json gj = nlohmann::json::array();
    for (const Group& grp : groups) {
      gj.push_back({{"cpus", plan.groups[grp.index].cpus},
                    {"comm_cpus", plan.groups[grp.index].comm_cpus},
                    {"numa_node", grp.node},
                    {"worker_bindings", grp.pool->BindingsReadBack()},
                    {"worker_cpus_seen", grp.pool->CpusSeenAtStart()},
                    {"param_replica", grp.replica},
                    {"memory_nodes",
                     {{"params", NodesJson(grp.weights, layout.total() * sizeof(float))},
                      {"grads", NodesJson(grp.grads.data(), grp.grads.bytes())},
                      {"optimizer", NodesJson(grp.m.data(), grp.m.bytes())},
                      {"activations", NodesJson(grp.acts.data(), grp.acts.bytes())}}}});
    }
    nlohmann::json pj = {{"groups", gj},
                         {"simulated", topology.simulated},
                         {"topology", cfg.topology},
                         {"threads_source", plan.threads_source},
                         {"allocator", alloc::BackendName()}};
    if (dist) {
      // Every process's own placement, gathered to rank 0 (the top level is rank 0's).
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      pj["rank"] = rank;
      pj["host"] = host;
      nlohmann::json ranks = nlohmann::json::array();
      for (const std::string& one : dist->Gather(pj.dump()))
        ranks.push_back(nlohmann::json::parse(one));
      pj["ranks"] = ranks;
      // Two processes on one host pinning the same CPU would halve both silently (e.g. mpirun
      // --bind-to none with two processes per machine: each plans the whole box). Every rank
      // sees the same gathered list, so every rank refuses alike.
      std::map<std::pair<std::string, int>, int> pinned;  // (host, cpu) -> rank
      for (const auto& r : ranks) {
        if (r["simulated"].get<bool>()) continue;
        for (const auto& grp : r["groups"]) {
          for (int cpu : grp["cpus"]) {
            auto [it, fresh] = pinned.emplace(std::make_pair(r["host"].get<std::string>(), cpu),
                                              r["rank"].get<int>());
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
    if (writer) WriteFileAtomic(out + "/placement.json", pj.dump(2) + "\n");
  }

  // ---- communication between groups
  std::unique_ptr<GradSync> sync;
  std::unique_ptr<comm::Communicator> comm;
  if (sync_groups) {
    std::vector<WorkerPool*> pools, comm_pools;
    std::vector<float*> grads;
    bool all_comm = true;
    for (Group& grp : groups) {
      pools.push_back(grp.pool.get());
      grads.push_back(grp.grads.data());
      all_comm &= grp.comm_pool != nullptr;
      if (grp.comm_pool) comm_pools.push_back(grp.comm_pool.get());
    }
    if (!all_comm) comm_pools.clear();
    const std::size_t bucket_floats =
        static_cast<std::size_t>(cfg.comm.bucket_mb * 1e6 / sizeof(float));
    sync = std::make_unique<GradSync>(layout, pools, comm_pools, grads, bucket_floats, dist);
    if (G > 1) {
      std::vector<int> threads;
      for (Group& grp : groups) threads.push_back(grp.pool->size());
      comm = std::make_unique<comm::Communicator>(threads);
    }
  }
  if (dist) {
    // Every process must train the same thing from the same start.
    const std::string effective = ConfigToYaml(cfg);
    dist->CheckConsistent(Hash64(effective.data(), effective.size()),
                          HashFloats(groups[0].params.data(), layout.total()), G);
  }
  auto abort_all = [&](const std::string& reason) {
    if (sync) sync->Abort(reason);
    if (comm) comm->Abort(reason);
  };

  if (R > 1) {
    log::Info(
        "training {} on {} processes x {} group(s) [{}], B={} T={}, {} parameters, {} train "
        "windows",
        shape.ToString(), R, G, plan.threads_source, B, T, layout.total(), train_windows);
  } else {
    log::Info("training {} on {} group(s) [{}], B={} T={}, {} parameters, {} train windows",
              shape.ToString(), G, plan.threads_source, B, T, layout.total(), train_windows);
  }
  std::unique_ptr<MetricsFile> metrics;
  if (writer) metrics = std::make_unique<MetricsFile>(out + "/metrics.jsonl");
  const bool bar = options.progress == Progress::kBar ||
                   (options.progress == Progress::kAuto && isatty(STDERR_FILENO));
  ProgressDisplay progress(cfg.train.steps, bar, options.progress == Progress::kQuiet || !writer);
  struct sigaction old_action {};
  if (options.handle_sigint) {
    g_interrupted.store(false);
    struct sigaction sa {};
    sa.sa_handler = OnSigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_action);
  }
  struct RestoreSignal {
    bool active;
    struct sigaction old;
    ~RestoreSignal() {
      if (active) sigaction(SIGINT, &old, nullptr);
    }
  } restore{options.handle_sigint, old_action};

  TrainResult result;
  const float dloss = 1.0f / (static_cast<float>(B) * T);

  // This process's first row of every window; group g takes the next grp.rows after g*rows.
  const int rank_row0 = rank * (B / R);
  auto evaluate = [&](int after_steps) {
    double sum = 0;
    for (int w = 0; w < eval_windows; ++w) {
      OnAllGroups(
          groups,
          [&](Group& grp) {
            LoadRows(*val_file, static_cast<std::size_t>(w), B, T, rank_row0 + grp.index * grp.rows,
                     grp.rows, grp.act->inputs, grp.act->targets);
            grp.loss_sum =
                model::Forward(*grp.pool, layout, grp.weights, *grp.act, grp.rows, T, true);
          },
          abort_all);
      for (const Group& grp : groups) sum += grp.loss_sum;
    }
    if (dist) sum = dist->SumAcrossRanks(sum);
    const double val = sum / (static_cast<double>(eval_windows) * B * T);
    result.evals.push_back({after_steps, val});
    if (metrics) metrics->Write({{"step", after_steps}, {"val_loss", val}});
    progress.Eval(after_steps, val);
  };
  auto checkpoint = [&] {
    if (writer) model::SaveCheckpoint(out + "/model.bin", layout, groups[0].params.data());
  };

  if (val_file) evaluate(0);
  for (int s = 0; s < cfg.train.steps; ++s) {
    const auto t0 = Clock::now();
    const double lr = optim::LearningRate(cfg.optim, s, cfg.train.steps);
    const std::size_t window = static_cast<std::size_t>(s) % train_windows;
    if (dist) dist->SetStep(s + 1);
    if (options.step_probe) options.step_probe(true);
    OnAllGroups(
        groups,
        [&](Group& grp) {
          const int g = grp.index;
          WorkerPool& pool = *grp.pool;
          auto ms_since = [](Clock::time_point t) {
            return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
          };
          LoadRows(train_file, window, B, T, rank_row0 + g * grp.rows, grp.rows, grp.act->inputs,
                   grp.act->targets);
          auto t = Clock::now();
          grp.loss_sum = model::Forward(pool, layout, grp.weights, *grp.act, grp.rows, T, true);
          grp.forward_ms = ms_since(t);
          double comm_ms = 0;  // inline bucket reductions happen inside backward: counted here
          t = Clock::now();
          if (sync) sync->BeginStep(g, static_cast<uint64_t>(s));
          model::Backward(pool, layout, grp.weights, grp.grads.data(), *grp.act, grp.rows, T, dloss,
                          [&](std::size_t from) {
                            if (!sync) return;
                            const auto c = Clock::now();
                            sync->OnBackwardReady(g, static_cast<uint64_t>(s), from);
                            comm_ms += ms_since(c);
                          });
          grp.backward_ms = ms_since(t) - comm_ms;
          t = Clock::now();
          if (sync) sync->FinishStep(g, static_cast<uint64_t>(s));
          // Global gradient norm: each owner's shard, combined in group order.
          double sumsq = optim::SumOfSquares(pool, grp.grads.data(), grp.owned.lo, grp.owned.hi);
          if (comm) {
            grp.scalars[0] = static_cast<float>(sumsq);
            pool.ForEachThread(
                [&](int th) { comm->Allreduce(g, th, grp.scalars.data(), grp.scalars.data(), 1); });
            sumsq = grp.scalars[0];
          }
          grp.grad_norm = std::sqrt(sumsq);
          comm_ms += ms_since(t);
          t = Clock::now();
          optim::AdamWStep step{lr,
                                cfg.optim.beta1,
                                cfg.optim.beta2,
                                cfg.optim.eps,
                                cfg.optim.weight_decay,
                                s + 1,
                                optim::ClipCoefficient(grp.grad_norm, cfg.optim.grad_clip)};
          optim::AdamWUpdate(pool, layout, grp.weights, grp.grads.data(), grp.m.data(),
                             grp.v.data(), grp.owned.lo, grp.owned.hi, step);
          grp.optimizer_ms = ms_since(t);
          if (comm && !share_replica) {
            // Every group pulls the other shards into its replica before the next forward. (With
            // one shared replica the shards are already in place: this OnAllGroups returns only
            // after every group's update, so they all happen before any group's next forward. And
            // no group updates while another still reads the weights in backward: the
            // sum-of-squares allreduce above is a barrier after every group's backward.)
            t = Clock::now();
            pool.ForEachThread([&](int th) {
              comm->Allgather(g, th, grp.weights + grp.owned.lo, grp.weights, layout.total());
            });
            comm_ms += ms_since(t);
          }
          grp.comm_ms = comm_ms;
        },
        abort_all);
    if (options.step_probe) options.step_probe(false);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    double loss_sum = 0;
    for (const Group& grp : groups) loss_sum += grp.loss_sum;
    if (dist) loss_sum = dist->SumAcrossRanks(loss_sum);
    StepRecord rec{s + 1,
                   loss_sum / (static_cast<double>(B) * T),
                   lr,
                   groups[0].grad_norm,
                   B * T / secs,
                   secs * 1e3,
                   groups[0].forward_ms,
                   groups[0].backward_ms,
                   groups[0].comm_ms,
                   groups[0].optimizer_ms};
    result.steps.push_back(rec);
    if (metrics)
      metrics->Write({{"step", rec.step},
                      {"loss", rec.loss},
                      {"lr", rec.lr},
                      {"grad_norm", rec.grad_norm},
                      {"tokens_per_s", rec.tokens_per_s},
                      {"ms", rec.ms},
                      {"forward_ms", rec.forward_ms},
                      {"backward_ms", rec.backward_ms},
                      {"comm_ms", rec.comm_ms},
                      {"optimizer_ms", rec.optimizer_ms}});
    progress.Step(rec.step, rec.loss, rec.tokens_per_s, rec.lr);
    if (!std::isfinite(rec.loss)) {
      checkpoint();
      throw RuntimeError(
          fmt::format("the loss is {} at step {}: training diverged", rec.loss, rec.step),
          "lower optim.lr, raise optim.warmup_steps or set optim.grad_clip");
    }
    const bool last = s + 1 == cfg.train.steps;
    if (val_file && (last || (cfg.train.eval_every > 0 && (s + 1) % cfg.train.eval_every == 0))) {
      evaluate(s + 1);
    }
    if (!last && cfg.train.checkpoint_every > 0 && (s + 1) % cfg.train.checkpoint_every == 0) {
      checkpoint();
    }
    // Ctrl-C reaches every process at a slightly different step: stop together, at the first
    // step any of them saw it.
    bool stop = options.handle_sigint && g_interrupted.load();
    if (dist) stop = dist->SumAcrossRanks(stop ? 1.0 : 0.0) > 0;
    if (stop) {
      progress.Message(fmt::format("interrupted after step {}: saving {}/model.bin", s + 1, out));
      result.interrupted = true;
      break;
    }
  }
  checkpoint();
  progress.Finish();
  return result;
}

}  // namespace cputrain::train
