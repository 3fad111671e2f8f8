// The trainer's pieces on their own (src/train/{batches,replica_group,step,placement_check}.h):
// which rows a group reads, when groups share a replica, the cross-rank CPU check, one step
// run against a fake Distributed, and a random init's shape from the config's model.* keys.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "alloc/numa_alloc.h"
#include "common/error.h"
#include "config/config.h"
#include "data/token_file.h"
#include "kernels/kernels.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "test_util.h"
#include "topology/placement.h"
#include "topology/topology.h"
#include "train/batches.h"
#include "train/placement_check.h"
#include "train/replica_group.h"
#include "train/step.h"
#include "train/trainer.h"

namespace cputrain::train {
namespace {

std::string WriteTokens(const test::TempDir& dir, const std::vector<uint16_t>& tokens,
                        const std::string& name = "t.bin") {
  const std::string path = dir.path() + "/" + name;
  data::TokenFileWriter w(path);
  w.Append(tokens.data(), tokens.size());
  w.Commit();
  return path;
}

TEST(TokenWindows, RowsOfAWindowAreTheFileShiftedByOne) {
  test::TempDir dir;
  std::vector<uint16_t> tokens(2 * 4 * 3 + 5);  // B=4, T=3: 2 windows and 4 spare tokens
  std::iota(tokens.begin(), tokens.end(), 0);
  const TokenWindows w = TokenWindows::Open({WriteTokens(dir, tokens)}, "data.train", 100, 4, 3);
  ASSERT_EQ(w.windows(), 2u);
  int in[6], tgt[6];
  w.LoadRows(/*w=*/1, /*row0=*/2, /*rows=*/2, in, tgt);  // window 1 starts at token 12
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(in[i], 12 + 6 + i);
    EXPECT_EQ(tgt[i], 12 + 6 + i + 1);
  }
}

TEST(TokenWindows, RefusesAFileShorterThanOneWindow) {
  test::TempDir dir;
  const std::string path = WriteTokens(dir, std::vector<uint16_t>(12, 1));  // B*T+1 = 13
  EXPECT_THROW(TokenWindows::Open({path}, "data.train", 100, 4, 3), InputError);
  EXPECT_THROW(TokenWindows::Open({}, "data.train", 100, 4, 3), InputError);
  EXPECT_THROW(TokenWindows::Open({""}, "data.train", 100, 4, 3), InputError);
  EXPECT_THROW(TokenWindows::Open({path}, "data.train", 1, 2, 3), InputError);  // id 1 >= V=1
}

std::string InputErrorOf(const std::vector<std::string>& specs, int vocab) {
  try {
    TokenWindows::Open(specs, "data.train", vocab, 2, 3);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Three shards of unequal length (6, 7 and 5 windows of B*T = 6 tokens, with spare tails of 4, 0
// and 5 tokens) matched by a glob read exactly the windows of their concatenation that do not
// cross a shard boundary, in sorted path order (written out of order on purpose).
TEST(TokenWindows, AGlobOfShardsReadsTheConcatenationsWindowsThatCrossNoBoundary) {
  test::TempDir dir;
  const std::size_t lens[3] = {6 * 6 + 1 + 4, 7 * 6 + 1, 5 * 6 + 1 + 5};
  std::vector<uint16_t> all;
  std::vector<std::size_t> shard_start;
  for (std::size_t i = 0; i < 3; ++i) {
    shard_start.push_back(all.size());
    for (std::size_t t = 0; t < lens[i]; ++t)
      all.push_back(static_cast<uint16_t>((all.size() * 7) % 97));
  }
  for (int i : {2, 0, 1}) {  // creation order is not the reading order
    const std::vector<uint16_t> part(all.begin() + shard_start[i],
                                     all.begin() + shard_start[i] + lens[i]);
    WriteTokens(dir, part, fmt::format("x_train_{:06d}.bin", i));
  }
  WriteTokens(dir, {1, 2, 3}, "x_val_000000.bin");  // not matched
  const TokenWindows w =
      TokenWindows::Open({dir.path() + "/x_train_*.bin"}, "data.train", 97, 2, 3);
  ASSERT_EQ(w.shard_count(), 3u);
  ASSERT_EQ(w.windows(), 6u + 7u + 5u);
  // The expected windows: in the concatenation, every start s*6 of a window of 7 tokens that lies
  // inside one shard.
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t s = shard_start[i]; s + 7 <= shard_start[i] + lens[i]; s += 6)
      starts.push_back(s);
  }
  ASSERT_EQ(starts.size(), w.windows());
  for (std::size_t k = 0; k < w.windows(); ++k) {
    int in[6], tgt[6];
    w.LoadRows(k, 0, 2, in, tgt);
    for (int i = 0; i < 6; ++i) {
      ASSERT_EQ(in[i], all[starts[k] + i]) << "window " << k;
      ASSERT_EQ(tgt[i], all[starts[k] + i + 1]) << "window " << k;
    }
  }
  // A list of the same files in another order, one named twice, is the same index.
  const TokenWindows l =
      TokenWindows::Open({dir.path() + "/x_train_000002.bin", dir.path() + "/x_train_00000[01].bin",
                          dir.path() + "/x_train_000002.bin"},
                         "data.train", 97, 2, 3);
  EXPECT_EQ(l.windows(), w.windows());
  EXPECT_EQ(l.shard(0).path(), w.shard(0).path());
}

TEST(TokenWindows, AShardWithAnIdOutOfRangeOrAnEmptyGlobIsRefusedNamingIt) {
  test::TempDir dir;
  WriteTokens(dir, std::vector<uint16_t>(20, 3), "a_000.bin");
  std::vector<uint16_t> bad(20, 3);
  bad[11] = 50;
  WriteTokens(dir, bad, "a_001.bin");
  const std::string e = InputErrorOf({dir.path() + "/a_*.bin"}, 50);
  EXPECT_NE(e.find("a_001.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("token 11 (0-based, byte offset 1046) is 50"), std::string::npos) << e;
  EXPECT_EQ(InputErrorOf({dir.path() + "/a_*.bin"}, 51), "");
  const std::string none = InputErrorOf({dir.path() + "/a_*.bin", dir.path() + "/nope_*.bin"}, 51);
  EXPECT_NE(none.find("the pattern '" + dir.path() + "/nope_*.bin' matches no file"),
            std::string::npos)
      << none;
}

// Every window exactly once per epoch, a different order each epoch, the identity without
// shuffle, and the same permutation from a fresh object (another process, a resumed run).
TEST(WindowOrder, EachEpochIsAPermutationDrawnFromTheSeedAndTheEpoch) {
  const std::size_t n = 37;
  WindowOrder order(n, true, 1337), again(n, true, 1337), other(n, true, 1338);
  std::vector<std::size_t> e0, e1;
  for (uint64_t p = 0; p < 2 * n; ++p) (p < n ? e0 : e1).push_back(order.At(p));
  for (const auto* e : {&e0, &e1}) {
    std::vector<std::size_t> sorted = *e;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);
  }
  EXPECT_NE(e0, e1);
  std::vector<std::size_t> identity(n);
  std::iota(identity.begin(), identity.end(), std::size_t{0});
  EXPECT_NE(e0, identity);
  // Random access (a resume mid-epoch) gives the same windows.
  for (uint64_t p = 2 * n - 1; p + 1 > n; --p) EXPECT_EQ(again.At(p), e1[p - n]);
  EXPECT_EQ(again.At(3), e0[3]);
  bool differs = false;
  for (uint64_t p = 0; p < n; ++p) differs |= other.At(p) != e0[p];
  EXPECT_TRUE(differs);
  WindowOrder plain(n, false, 1337);
  for (uint64_t p = 0; p < 3 * n; ++p) EXPECT_EQ(plain.At(p), p % n);
  EXPECT_EQ(plain.EpochOf(2 * n), 2u);
}

topo::Plan PlanFor(const std::string& topology, const std::string& group_by) {
  topo::PlacementConfig pc;
  pc.group_by = group_by == "l3" ? topo::GroupBy::kL3 : topo::GroupBy::kSocket;
  return topo::PlanPlacement(topo::LoadTopology(topology), pc, nullptr);
}

TEST(ReplicaChoice, GroupsShareAReplicaOnlyWhenAllAreOnOneNode) {
  EXPECT_FALSE(ShareReplica(PlanFor("synthetic:pack:1 numa:1 core:2 pu:1", "socket")));  // G=1
  EXPECT_FALSE(ShareReplica(PlanFor("synthetic:pack:2 numa:1 core:1 pu:1", "socket")));
  EXPECT_TRUE(ShareReplica(PlanFor("synthetic:pack:1 numa:1 l3:2 core:1 pu:1", "l3")));
}

nlohmann::json Rank(int rank, const std::string& host, std::vector<int> cpus,
                    bool simulated = false) {
  return {{"rank", rank},
          {"host", host},
          {"simulated", simulated},
          {"groups", nlohmann::json::array({{{"cpus", cpus}}})}};
}

TEST(PlacementCheck, TwoRanksPinningOneCpuOfOneHostAreRefused) {
  const nlohmann::json ok = {Rank(0, "a", {0, 1}), Rank(1, "a", {2, 3}), Rank(2, "b", {0, 1})};
  EXPECT_NO_THROW(CheckNoSharedCpus(ok));
  const nlohmann::json sim = {Rank(0, "a", {0}, true), Rank(1, "a", {0}, true)};
  EXPECT_NO_THROW(CheckNoSharedCpus(sim));  // simulated machines pin nothing
  try {
    CheckNoSharedCpus({Rank(0, "a", {0, 1}), Rank(1, "b", {1}), Rank(2, "a", {1})});
    ADD_FAILURE() << "not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 0 and 2 on host a both pin a worker to CPU 1"),
              std::string::npos)
        << e.what();
  }
}

nlohmann::json Bound(int rank, const std::string& host, std::vector<int> allowed,
                     std::vector<int> cpuset) {
  nlohmann::json r = Rank(rank, host, allowed);
  r["allowed_cpus"] = allowed;
  r["cpuset_cpus"] = cpuset;
  return r;
}

// mpirun -n 2 --map-by ppr:2:node with its default --bind-to core on a 4-core host: each rank
// plans one core and two cores idle; rank 0 must say so, naming the flags.
TEST(PlacementCheck, RanksWhoseBindingsLeaveCpusIdleAreWarnedAbout) {
  const auto w =
      UnusedCpuWarnings({Bound(0, "a", {0}, {0, 1, 2, 3}), Bound(1, "a", {1}, {0, 1, 2, 3}),
                         Bound(2, "b", {0, 1}, {0, 1}), Bound(3, "b", {2}, {0, 1, 2})});
  ASSERT_EQ(w.size(), 1u);  // host b: its ranks' bindings cover its cpuset 0-2
  EXPECT_NE(w[0].find("host a: the bindings of its 2 ranks leave CPU(s) 2-3"), std::string::npos)
      << w[0];
  EXPECT_NE(w[0].find("--bind-to none"), std::string::npos) << w[0];
  // One rank per host is judged by the rank itself (topo::ReviewBinding); simulated ranks pin
  // nothing; ranks covering the cpuset leave nothing idle.
  EXPECT_TRUE(UnusedCpuWarnings({Bound(0, "a", {0}, {0, 1}), Bound(1, "b", {0}, {0, 1})}).empty());
  EXPECT_TRUE(UnusedCpuWarnings({Bound(0, "a", {0}, {0, 1}), Bound(1, "a", {1}, {0, 1})}).empty());
}

// A comm::Distributed of two processes whose other process holds exactly this one's data: every sum
// across ranks doubles (exact in binary floating point).
class MirrorDistributed final : public comm::Distributed {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void CheckConsistent(uint64_t, uint64_t, int) override {}
  double SumAcrossRanks(double v) override { return 2 * v; }
  void AllreduceShard(int, float* data, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) data[i] *= 2;
    ++shard_calls;
  }
  std::vector<std::string> Gather(const std::string& t) override { return {t, t}; }
  void SetStep(int) override {}
  int shard_calls = 0;
};

struct StepRun {
  std::vector<double> losses, norms;
  std::vector<float> params;
};

// `steps` steps of a small GPT-2 on one group of `rows` rows, the global batch being B rows.
StepRun RunSteps(int B, int rows, comm::Distributed* dist, int steps) {
  kernels::InitBlas();
  const topo::Topology topology = topo::LoadTopology("synthetic:pack:1 numa:1 core:2 pu:1");
  const topo::Plan plan = topo::PlanPlacement(topology, {}, nullptr);
  alloc::Configure(alloc::OptionsFor(topology));
  const model::Shape shape{16, 50, model::Shape::PadVocab(50), 2, 2, 16};
  const int T = 8;
  ReplicaGroups groups(topology, plan, shape, rows, T, {});
  groups.InitParams(
      [&](WorkerPool& pool, float* p) { model::RandomInit(pool, groups.layout(), 7, p); });
  Stepper stepper(groups, B, T, /*bucket_floats=*/1000, dist);
  StepRun run;
  for (int s = 0; s < steps; ++s) {
    auto load = [&](ReplicaGroup& g, int) {
      for (int i = 0; i < rows * T; ++i) {
        g.act->inputs[i] = (s * 7 + i * 3) % 50;
        g.act->targets[i] = (s * 5 + i * 11) % 50;
      }
    };
    const StepResult r = stepper.Step(s, load, {1e-3, s + 1}, 1.0);
    run.losses.push_back(r.loss);
    run.norms.push_back(r.grad_norm);
  }
  run.params.assign(groups[0].weights, groups[0].weights + groups.layout().total());
  return run;
}

// Rows duplicated on a mirrored second process: the global batch doubles, and the mean loss,
// the gradients (scaled by 1/(2B*T), then summed over the two processes) and so every update
// are those of one process alone — to the bit, since the only differences are factors of two.
TEST(Stepper, AFakeSecondProcessWithTheSameRowsChangesNoBit) {
  const StepRun alone = RunSteps(/*B=*/2, /*rows=*/2, nullptr, 3);
  MirrorDistributed mirror;
  const StepRun mirrored = RunSteps(/*B=*/4, /*rows=*/2, &mirror, 3);
  EXPECT_GT(mirror.shard_calls, 0);
  EXPECT_EQ(alone.losses, mirrored.losses);
  EXPECT_EQ(alone.norms, mirrored.norms);
  EXPECT_EQ(alone.params, mirrored.params);
  EXPECT_LT(alone.losses.back(), alone.losses.front());  // it trains
}

// The gradient of one step (lr 0: the weights stay) over 4 rows of a small GPT-2, taken as
// k micro-batches of 4/k rows, and its loss.
std::pair<std::vector<float>, double> OneStepGradient(int k) {
  kernels::InitBlas();
  const topo::Topology topology = topo::LoadTopology("synthetic:pack:1 numa:1 core:2 pu:1");
  const topo::Plan plan = topo::PlanPlacement(topology, {}, nullptr);
  alloc::Configure(alloc::OptionsFor(topology));
  const model::Shape shape{16, 50, model::Shape::PadVocab(50), 2, 2, 16};
  const int T = 8, rows = 4 / k;
  ReplicaGroups groups(topology, plan, shape, rows, T, {});
  groups.InitParams(
      [&](WorkerPool& pool, float* p) { model::RandomInit(pool, groups.layout(), 7, p); });
  Stepper stepper(groups, rows, T, /*bucket_floats=*/1000, nullptr, k);
  auto load = [&](ReplicaGroup& g, int j) {
    for (int i = 0; i < rows * T; ++i) {
      const int at = j * rows * T + i;  // position in the one big batch
      g.act->inputs[i] = (at * 7 + 3) % 50;
      g.act->targets[i] = (at * 11 + 5) % 50;
    }
  };
  const StepResult r = stepper.Step(0, load, {0.0, 1}, 0.0);
  const float* g = groups[0].grads.data();
  return {std::vector<float>(g, g + groups.layout().total()), r.loss};
}

// Gradient accumulation: k micro-batches of B/k rows (the first writes the gradient, the others
// add into it, each scaled 1/(k*B*T)) give one batch of B rows' gradient within 1e-6 of its
// largest element, and its loss within 1e-6 relative. (A micro-batch that wrote instead of
// adding, or a wrong scale, is off by tens of percent.)
TEST(Stepper, AccumulatedGradientsEqualOneBigBatch) {
  const auto [whole, loss] = OneStepGradient(1);
  float largest = 0;
  for (float v : whole) largest = std::max(largest, std::fabs(v));
  ASSERT_GT(largest, 0.f);
  for (int k : {2, 4}) {
    const auto [acc, acc_loss] = OneStepGradient(k);
    ASSERT_EQ(acc.size(), whole.size());
    double worst = 0;
    for (std::size_t i = 0; i < whole.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(acc[i] - whole[i])));
    EXPECT_LT(worst / largest, 1e-6) << "k=" << k;
    EXPECT_NEAR(acc_loss, loss, 1e-6 * loss) << "k=" << k;
  }
}

// The model.* keys go through the family's table (model/family.h, from_config): the config
// knows no family, so an unknown name, a head the family has not, and keys the family cannot
// run are refused here, naming the key, before anything is built.
std::string ShapeError(const std::string& yaml) {
  try {
    ShapeFromConfig(ParseConfig(yaml, "x.yaml", {}).model);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// model.rope_scaling from a config (issue 42: the keys had dropped out of the key table, and
// Gemma 3's linear kind was not among the values): llama3 with its four factors, linear with its
// factor, on the families that take them.
TEST(ShapeFromConfig, RopeScalingKindsFromTheConfig) {
  auto shape = [](const std::string& arch, const std::string& keys) {
    return ShapeFromConfig(ParseConfig("model: {arch: " + arch +
                                           ", layers: 2, channels: 64, heads: 4, kv_heads: 2, "
                                           "ffn_hidden: 96, vocab_size: 64, " +
                                           keys + "}",
                                       "x", {})
                               .model);
  };
  const model::Shape g = shape("gemma3", "head_dim: 16, rope_scaling: linear, rope_factor: 8");
  EXPECT_EQ(g.rope_scaling.kind, model::RopeScaling::kLinear);
  EXPECT_EQ(g.rope_scaling.factor, 8.f);
  const model::Shape l =
      shape("llama", "rope_scaling: llama3, rope_factor: 32, rope_original_max_position: 1024");
  EXPECT_EQ(l.rope_scaling.kind, model::RopeScaling::kLlama3);
  EXPECT_EQ(l.rope_scaling.factor, 32.f);
  EXPECT_EQ(l.rope_scaling.original_max_position, 1024);
  EXPECT_NE(ShapeError("model: {rope_scaling: yarn}").find("one of none, llama3, linear"),
            std::string::npos);
}

TEST(ShapeFromConfig, TheFamilyTableDecidesWhatTheKeysMean) {
  EXPECT_NE(ShapeError("model: {arch: mamba}")
                .find("model.arch is 'mamba': the families are gpt2, "
                      "llama, bert, distilbert"),
            std::string::npos);
  EXPECT_NE(ShapeError("model: {arch: bert}").find("model.arch bert with model.head lm"),
            std::string::npos);
  EXPECT_NE(ShapeError("model: {arch: gpt2, head: qa}").find("model.arch gpt2 with model.head qa"),
            std::string::npos);
  EXPECT_NE(ShapeError("model: {kv_heads: 4}").find("model.arch gpt2 has kv_heads = heads"),
            std::string::npos);
  EXPECT_NE(ShapeError("model: {tied_embeddings: false}").find("model.arch gpt2 has"),
            std::string::npos);
  // GPT-2 keeps its six dimensions; Llama its keys without biases; BERT its encoder keys.
  const model::Shape g = ShapeFromConfig(
      ParseConfig("model: {layers: 2, channels: 64, heads: 4, norm_eps: 1e-6}", "x", {}).model);
  EXPECT_TRUE(g == model::Shape(1024, 50257, model::Shape::PadVocab(50257), 2, 4, 64));
  EXPECT_EQ(g.norm_eps, 1e-5f);
  const model::Shape l = ShapeFromConfig(
      ParseConfig("model: {arch: llama, layers: 2, channels: 64, heads: 4, kv_heads: 2, "
                  "ffn_hidden: 96, tied_embeddings: false, rope_theta: 500000}",
                  "x", {})
          .model);
  EXPECT_EQ(l.arch, model::ArchFromName("llama"));
  EXPECT_EQ(l.kv_heads(), 2);
  EXPECT_EQ(l.ffn(), 96);
  EXPECT_FALSE(l.tied);
  EXPECT_FALSE(l.attn_bias || l.mlp_bias);
  EXPECT_EQ(l.types, 0);
  EXPECT_EQ(l.rope_theta, 500000.f);
  const model::Shape b = ShapeFromConfig(
      ParseConfig("model: {arch: bert, head: qa, layers: 2, channels: 64, heads: 4, "
                  "ffn_hidden: 128, token_types: 3, hidden_dropout: 0.1}",
                  "x", {})
          .model);
  EXPECT_TRUE(b.encoder());
  EXPECT_EQ(b.types, 3);
  EXPECT_EQ(b.head, model::Head::kSpan);
  EXPECT_FALSE(b.tied);
  EXPECT_EQ(b.hidden_dropout, 0.1f);
  const model::Shape d = ShapeFromConfig(
      ParseConfig("model: {arch: distilbert, head: qa, layers: 2, channels: 64, heads: 4, "
                  "token_types: 3}",
                  "x", {})
          .model);
  EXPECT_EQ(d.types, 0);
  // The decoder families' own: a head size apart from channels / heads (model.head_dim), the
  // q/k/v biases Qwen2 always has, Gemma 3's scalars.
  const model::Shape q3 = ShapeFromConfig(
      ParseConfig("model: {arch: qwen3, layers: 2, channels: 64, heads: 4, kv_heads: 2, "
                  "head_dim: 32, ffn_hidden: 96}",
                  "x", {})
          .model);
  EXPECT_EQ(q3.head_size(), 32);
  EXPECT_EQ(q3.attn_width(), 128);
  EXPECT_EQ(q3.Problem(), "");
  const model::Shape q2 = ShapeFromConfig(
      ParseConfig("model: {arch: qwen2, layers: 2, channels: 64, heads: 4}", "x", {}).model);
  EXPECT_TRUE(q2.attn_bias);
  const model::Shape g3 = ShapeFromConfig(
      ParseConfig("model: {arch: gemma3, layers: 2, channels: 64, heads: 4, head_dim: 32}", "x", {})
          .model);
  EXPECT_EQ(g3.attn_scalar, 32.f);
  EXPECT_EQ(g3.pad_token, 0);
  EXPECT_EQ(g3.Problem(), "");
  EXPECT_NE(ShapeError("model: {head_dim: 32}").find("head_dim = channels / heads"),
            std::string::npos);
  EXPECT_NE(ShapeError("model: {channels: 60, heads: 8}").find("must divide model.channels"),
            std::string::npos);
  // model.preset: a named shape whole (Gemma 3's windows and local RoPE base included, which no
  // other key sets), the positions model.max_seq_len's; an unknown name refused naming them.
  const model::Shape gp =
      ShapeFromConfig(ParseConfig("model: {preset: gemma3-270m, max_seq_len: 256}", "x", {}).model);
  model::Shape want = model::FindPreset("gemma3-270m")->shape;
  want.maxT = 256;
  EXPECT_TRUE(gp == want) << gp.ToString();
  EXPECT_EQ(gp.window, 512);
  EXPECT_EQ(gp.rope_local_theta, 10000.f);
  EXPECT_NE(ShapeError("model: {preset: qwen9}").find("model.preset is 'qwen9'"),
            std::string::npos);
}

}  // namespace
}  // namespace cputrain::train
