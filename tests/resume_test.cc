// Runs that survive (issue 12): a run stopped after step N/2 and resumed to N gives the metrics,
// weights and AdamW moments of a run that never stopped, bit for bit — with 1 group, with 2
// groups, and (within 1e-6 relative) when a 1-group checkpoint resumes on 2 groups. A resumed
// config that changes the model or the data is refused naming the key; so is a second run into a
// locked out_dir and `train.resume: never` on a used one. Temporaries of a dead run are removed
// at the next start, metrics rows past the checkpoint are dropped, a damaged state.bin is refused,
// a diverging run stops without saving (or skips its steps), and non-finite weights are never
// loaded. Issue 24: a flipped bit in either file of a checkpoint (CRC32C) or a missing state.bin
// is refused naming it, or skipped for the checkpoint before it when train.resume_fallback asks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/error.h"
#include "common/files.h"
#include "common/stop.h"
#include "config/config.h"
#include "kernels/bf16.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "task_test_util.h"
#include "test_util.h"
#include "train/run_lock.h"
#include "train/train_state.h"
#include "train/trainer.h"
#include "train_run.h"

namespace cputrain::train {
namespace {

namespace fs = std::filesystem;
using ::cputrain::test::Slurp;
using ::cputrain::test::TrainFor;

constexpr int kSteps = 12;
const char* kTwoGroups = "topology=synthetic:pack:2 numa:1 core:1 pu:1";

std::string Fixture(const std::string& file) {
  return std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/odd/" + file;
}

// The odd fixture's run (cosine schedule, warmup, clipping, weight decay, evaluations), 12 steps.
Config OddConfig(const std::string& out_dir, std::vector<std::string> sets = {}) {
  std::vector<std::string> all = {
      "model.init_from=" + Fixture("model.bin"), "data.train=" + Fixture("train.bin"),
      "data.val=" + Fixture("val.bin"),          "train.out_dir=" + out_dir,
      "train.steps=" + std::to_string(kSteps),   "train.eval_every=5"};
  all.insert(all.end(), sets.begin(), sets.end());
  return LoadConfig(Fixture("config.yaml"), all);
}

// metrics.jsonl without the timing fields.
std::vector<nlohmann::json> Rows(const std::string& out_dir) { return test::MetricsRows(out_dir); }

std::vector<float> ReadWeights(const std::string& out_dir) {
  const std::string file = model::ResolveModelFile(out_dir);
  model::ParamLayout layout(model::ReadCheckpointShape(file));
  std::vector<float> p(layout.total());
  model::LoadCheckpoint(file, layout, p.data());
  return p;
}

// Straight through vs stopped after step 6 and resumed (train.resume: auto): the same rows, the
// same weights and moments, bit for bit.
void ExpectExactResume(const std::vector<std::string>& sets) {
  test::TempDir straight, resumed;
  TrainFor(OddConfig(straight.path(), sets));
  TrainResult first = TrainFor(OddConfig(resumed.path(), sets), kSteps / 2);
  ASSERT_TRUE(first.stopped);
  ASSERT_EQ(first.last_step, kSteps / 2);
  EXPECT_EQ(first.checkpoint, resumed.path() + "/checkpoints/step_00000006");
  // A crash after step 7's row was logged but before its checkpoint, mid-way through a line:
  // the resumed run drops both.
  std::ofstream(resumed.path() + "/metrics.jsonl", std::ios::app)
      << "{\"step\":7,\"loss\":1.0}\n{\"step\":8,\"lo";
  TrainResult second = TrainFor(OddConfig(resumed.path(), sets));
  EXPECT_EQ(second.resumed_from, kSteps / 2);
  EXPECT_EQ(second.steps.size(), static_cast<std::size_t>(kSteps / 2));
  EXPECT_EQ(Rows(straight.path()), Rows(resumed.path()));
  EXPECT_EQ(Slurp(model::ResolveModelFile(straight.path())),
            Slurp(model::ResolveModelFile(resumed.path())));
  const auto a = test::ReadOptimizerState(straight.path()),
             b = test::ReadOptimizerState(resumed.path());
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the optimizer's state differs";
}

TEST(Resume, StoppedAndResumedIsBitIdenticalOneGroup) { ExpectExactResume({}); }

// Shuffled (the checkpoint holds the data position; the permutation comes from the seed and the
// epoch), and with 2 micro-batches a step: 24 windows of 7 in 12 steps, resumed mid-epoch.
TEST(Resume, StoppedAndResumedIsBitIdenticalShuffledWithAccumulation) {
  ExpectExactResume({"data.shuffle=true", "data.seed=9"});
  ExpectExactResume({"data.shuffle=true", "train.grad_accum_steps=2", kTwoGroups,
                     "placement.threads_per_group=1"});
}

TEST(Resume, StoppedAndResumedIsBitIdenticalTwoGroups) {
  ExpectExactResume({kTwoGroups, "placement.threads_per_group=1"});
}

// train.precision: bf16 keeps fp32 master weights in the checkpoint; the bf16 copy is made from
// them at the start, as after every update, so a resumed bf16 run is the straight one, bit for
// bit: with 1 group, 2 replicas, and 2 groups sharing one replica (each refreshes its shard).
TEST(Resume, StoppedAndResumedIsBitIdenticalInBf16) {
  if (!kernels::DetectBf16().trains()) GTEST_SKIP() << kernels::DetectBf16().Describe();
  ExpectExactResume({"train.precision=bf16"});
  ExpectExactResume({"train.precision=bf16", kTwoGroups, "placement.threads_per_group=1"});
  ExpectExactResume({"train.precision=bf16", "topology=synthetic:pack:1 numa:1 l3:2 core:1 pu:1",
                     "placement.group_by=l3"});
}

// The same on a Llama (random init: RMSNorm, rotary embeddings, grouped-query attention with one
// KV head for three query heads, SwiGLU, an untied head; the family checkpoint format): straight
// vs stopped and resumed, with 1 group, 2 groups, and in bf16.
const std::vector<std::string> kLlama = {"model.init_from=",
                                         "model.arch=llama",
                                         "model.kv_heads=1",
                                         "model.ffn_hidden=96",
                                         "model.tied_embeddings=false",
                                         "model.rope_theta=500"};
std::vector<std::string> Llama(std::vector<std::string> more) {
  more.insert(more.begin(), kLlama.begin(), kLlama.end());
  return more;
}
TEST(Resume, LlamaStoppedAndResumedIsBitIdentical) {
  ExpectExactResume(Llama({}));
  ExpectExactResume(Llama({"data.shuffle=true", "train.grad_accum_steps=2", kTwoGroups,
                           "placement.threads_per_group=1"}));
  if (kernels::DetectBf16().trains()) ExpectExactResume(Llama({"train.precision=bf16"}));
}

// Issue 42: the optimizers beside AdamW resume exactly too, their state re-sharded like AdamW's:
// Adafactor (factored moments of the matrices a shard boundary cuts, which both shards keep
// whole; its relative step and parameter scale; then the schedule's lr, a first moment and
// weight decay) and SGD with momentum and with Nesterov momentum.
TEST(Resume, AdafactorStoppedAndResumedIsBitIdentical) {
  ExpectExactResume({"optim.name=adafactor"});
  ExpectExactResume({"optim.name=adafactor", kTwoGroups, "placement.threads_per_group=1"});
  ExpectExactResume(
      Llama({"optim.name=adafactor", "optim.adafactor.relative_step=false",
             "optim.adafactor.scale_parameter=false", "optim.adafactor.beta1=0.9",
             "optim.weight_decay=0.01", kTwoGroups, "placement.threads_per_group=1"}));
}

TEST(Resume, SgdStoppedAndResumedIsBitIdentical) {
  ExpectExactResume({"optim.name=sgd", "optim.momentum=0.9"});
  ExpectExactResume({"optim.name=sgd", "optim.momentum=0.9", "optim.nesterov=true", kTwoGroups,
                     "placement.threads_per_group=1"});
}

// ZeRO-1 with Adafactor: 1, 2 and 4 groups cut the matrices in different places; the statistics
// of a cut tensor are summed across the groups, so every group count trains the same model (to
// the order of the sums: 1e-5 relative in the losses), and the whole-model state the groups write
// together is the same state. A wrong cut (a shard's row sums alone) moves the losses by far more.
TEST(Resume, AdafactorTrainsTheSameModelOnOneTwoAndFourGroups) {
  const std::vector<std::string> ada = {"optim.name=adafactor", "optim.adafactor.beta1=0.9"};
  std::vector<std::vector<double>> losses;
  std::vector<std::vector<std::vector<float>>> states;
  for (const char* topology : {"", kTwoGroups, "topology=synthetic:pack:4 numa:1 core:1 pu:1"}) {
    test::TempDir out;
    std::vector<std::string> sets = ada;
    if (*topology) sets.insert(sets.end(), {topology, "placement.threads_per_group=1"});
    TrainFor(OddConfig(out.path(), sets));
    losses.emplace_back();
    for (const nlohmann::json& row : Rows(out.path())) {
      if (row.contains("loss")) losses.back().push_back(row["loss"].get<double>());
    }
    states.push_back(test::ReadOptimizerState(out.path()));
  }
  // exp_avg (slot 0) follows the parameters elementwise. GPT-2's key bias has no gradient but
  // rounding (softmax does not see a constant added to every score of a query), and Adafactor
  // normalizes a 1-D tensor's update elementwise (g / sqrt(mean g^2)): there it follows the
  // rounding's sign, whatever the group count. Every other element must agree.
  const model::ParamLayout layout(model::ReadCheckpointShape(Fixture("model.bin")));
  const std::size_t C = static_cast<std::size_t>(layout.shape().C);
  auto key_bias = [&](std::size_t i) {
    for (int l = 0; l < layout.shape().L; ++l) {
      const std::size_t k = layout.offset(model::kQkvb, l) + C;
      if (i >= k && i < k + C) return true;
    }
    return false;
  };
  for (std::size_t k = 1; k < losses.size(); ++k) {
    ASSERT_EQ(losses[k].size(), losses[0].size());
    for (std::size_t s = 0; s < losses[0].size(); ++s)
      EXPECT_NEAR(losses[k][s], losses[0][s], 1e-5 * std::abs(losses[0][s])) << k << " " << s;
    ASSERT_EQ(states[k].size(), states[0].size());
    for (std::size_t j = 0; j < states[0].size(); ++j) {
      ASSERT_EQ(states[k][j].size(), states[0][j].size());
      double worst = 0, scale = 0;
      for (std::size_t i = 0; i < states[0][j].size(); ++i) {
        if (j == 0 && key_bias(i)) continue;
        worst = std::max(worst, std::abs(double(states[k][j][i]) - states[0][j][i]));
        scale = std::max(scale, std::abs(double(states[0][j][i])));
      }
      EXPECT_LE(worst, 1e-4 * scale) << "slot " << j << " on " << k;
    }
  }
}

// A checkpoint of one optimizer resumed with another (or with other slots) is refused naming
// both, before any step.
TEST(Resume, AnotherOptimizerIsRefused) {
  test::TempDir out;
  TrainFor(OddConfig(out.path()), kSteps / 2);
  try {
    TrainFor(OddConfig(out.path(), {"optim.name=adafactor"}));
    FAIL() << "resumed AdamW's state as Adafactor's";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer adamw; this run's optimizer is adafactor"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("optim.name"), std::string::npos) << e.hint();
  }
  test::TempDir ada;
  TrainFor(OddConfig(ada.path(), {"optim.name=adafactor"}), kSteps / 2);
  EXPECT_THROW(
      TrainFor(OddConfig(ada.path(), {"optim.name=adafactor", "optim.adafactor.beta1=0.9"})),
      InputError);
}

// A 1-group checkpoint resumed on 2 groups: each group takes its shard of the full moments. The
// sums then run in another order, so the rows match a straight 1-group run to 1e-6 relative.
TEST(Resume, OneGroupCheckpointResumesOnTwoGroups) {
  test::TempDir straight, resumed;
  TrainFor(OddConfig(straight.path()));
  TrainFor(OddConfig(resumed.path()), kSteps / 2);
  TrainResult r =
      TrainFor(OddConfig(resumed.path(), {kTwoGroups, "placement.threads_per_group=1"}));
  EXPECT_EQ(r.resumed_from, kSteps / 2);
  const auto a = Rows(straight.path()), b = Rows(resumed.path());
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (const char* k : {"loss", "grad_norm", "val_loss"}) {
      if (!a[i].contains(k)) continue;
      const double x = a[i][k], y = b[i][k];
      EXPECT_LE(std::abs(x - y), 1e-6 * std::abs(x)) << "row " << i << " " << k;
    }
  }
  const std::vector<float> wa = ReadWeights(straight.path()), wb = ReadWeights(resumed.path());
  for (std::size_t i = 0; i < wa.size(); ++i) {
    ASSERT_LE(std::abs(wa[i] - wb[i]), 1e-5 * std::max(1.0f, std::abs(wa[i]))) << i;
  }
}

std::string InputErrorOf(const Config& c) {
  try {
    TrainFor(c);
  } catch (const InputError& e) {
    return std::string(e.what()) + "\nhint: " + e.hint();
  }
  return "(no InputError)";
}

TEST(Resume, ChangedModelOrDataIsRefusedNamingTheKey) {
  test::TempDir out;
  TrainFor(OddConfig(out.path()), 3);
  EXPECT_NE(InputErrorOf(OddConfig(out.path(), {"data.batch_size=8"})).find("data.batch_size"),
            std::string::npos);
  EXPECT_NE(InputErrorOf(OddConfig(out.path(), {"data.seq_len=20"})).find("data.seq_len"),
            std::string::npos);
  EXPECT_NE(
      InputErrorOf(OddConfig(out.path(), {"data.train=" + Fixture("val.bin")})).find("data.train"),
      std::string::npos);
  // The shards: the same file plus another is another corpus.
  EXPECT_NE(InputErrorOf(OddConfig(out.path(), {"data.train=[" + Fixture("train.bin") + ", " +
                                                Fixture("val.bin") + "]"}))
                .find("data.train"),
            std::string::npos);
  // The order: shuffling (the checkpoint's run read the file in order), or another seed.
  const std::string shuffled = InputErrorOf(OddConfig(out.path(), {"data.shuffle=true"}));
  EXPECT_NE(shuffled.find("data.shuffle is true but the checkpoint"), std::string::npos)
      << shuffled;
  test::TempDir seeded;
  TrainFor(OddConfig(seeded.path(), {"data.shuffle=true", "data.seed=1"}), 2);
  EXPECT_NE(InputErrorOf(OddConfig(seeded.path(), {"data.shuffle=true", "data.seed=2"}))
                .find("data.seed"),
            std::string::npos);
  // Another shape: random init of a wider model.
  EXPECT_NE(InputErrorOf(OddConfig(out.path(), {"model.init_from=", "model.channels=60"}))
                .find("model.channels"),
            std::string::npos);
  // The refused starts left the run as it was: it still resumes.
  EXPECT_EQ(TrainFor(OddConfig(out.path())).resumed_from, 3);
}

TEST(Resume, NeverRefusesAUsedOutDirAndPathResumesFromThere) {
  test::TempDir a, b;
  TrainFor(OddConfig(a.path()), 4);
  const std::string err = InputErrorOf(OddConfig(a.path(), {"train.resume=never"}));
  EXPECT_NE(err.find("already holds a run"), std::string::npos) << err;
  // Another out_dir resumes from a's checkpoint (a PATH), and goes on on its own.
  TrainResult r = TrainFor(OddConfig(b.path(), {"train.resume=" + a.path()}));
  EXPECT_EQ(r.resumed_from, 4);
  EXPECT_EQ(r.last_step, kSteps);
  EXPECT_TRUE(fs::exists(b.path() + "/checkpoints/step_00000012/state.bin"));
  // Back in a from its step 2: steps 3 and 4 (checkpoints, metrics rows) are dropped and
  // trained again.
  test::TempDir c;
  TrainFor(OddConfig(c.path(), {"train.checkpoint_every=1", "data.val="}), 4);
  r = TrainFor(OddConfig(
      c.path(), {"train.checkpoint_every=1", "data.val=", "optim.schedule=constant",
                 "train.steps=3", "train.resume=" + c.path() + "/checkpoints/step_00000002"}));
  EXPECT_EQ(r.resumed_from, 2);
  EXPECT_EQ(Slurp(c.path() + "/latest"), "checkpoints/step_00000003\n");
  EXPECT_FALSE(fs::exists(c.path() + "/checkpoints/step_00000004"));
  EXPECT_EQ(Rows(c.path()).size(), 3u);
}

TEST(Resume, ALockedOutDirIsRefusedNamingThePid) {
  test::TempDir out;
  RunLock held(out.path());  // as another run would
  const std::string err = InputErrorOf(OddConfig(out.path()));
  EXPECT_NE(err.find("in use by another run (pid " + std::to_string(::getpid()) + ")"),
            std::string::npos)
      << err;
}

TEST(Resume, KeepsTheNewestCheckpointsAndRemovesTemporariesOfADeadRun) {
  test::TempDir out;
  const std::string ck = out.path() + "/checkpoints";
  fs::create_directories(ck + "/step_00000099.tmp.999999");
  std::ofstream(out.path() + "/latest.tmp.999999") << "half";
  std::ofstream(out.path() + "/metrics.jsonl.tmp.1") << "half";
  TrainFor(OddConfig(out.path(), {"train.checkpoint_every=2", "train.keep_checkpoints=2"}));
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(out.path())) {
    left.push_back(fs::relative(e.path(), out.path()).string());
  }
  std::sort(left.begin(), left.end());
  const std::vector<std::string> want = {".lock",
                                         "checkpoints",
                                         "checkpoints/step_00000010",
                                         "checkpoints/step_00000010/model.bin",
                                         "checkpoints/step_00000010/state.bin",
                                         "checkpoints/step_00000012",
                                         "checkpoints/step_00000012/model.bin",
                                         "checkpoints/step_00000012/state.bin",
                                         "config.yaml",
                                         "latest",
                                         "metrics.jsonl",
                                         "placement.json",
                                         "trainer_state.json"};
  EXPECT_EQ(left, want);
  EXPECT_EQ(Slurp(out.path() + "/latest"), "checkpoints/step_00000012\n");
}

// lr 1e4 makes the odd model diverge within a few steps.
TEST(Resume, ADivergingRunStopsWithTheLastGoodCheckpointKept) {
  test::TempDir out;
  Config c = OddConfig(out.path(), {"optim.lr=1e4", "optim.grad_clip=0", "train.checkpoint_every=1",
                                    "train.keep_checkpoints=0", "train.steps=200"});
  try {
    TrainFor(c);
    FAIL() << "the run did not stop";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("training diverged"), std::string::npos) << e.what();
  }
  const std::vector<float> w = ReadWeights(out.path());  // loads: finite
  for (float x : w) ASSERT_TRUE(std::isfinite(x));
}

TEST(Resume, SkipStepSkipsNonFiniteUpdatesAndLogsThem) {
  test::TempDir out;
  Config c = OddConfig(out.path(), {"optim.lr=1e4", "optim.grad_clip=0", "train.steps=40",
                                    "train.on_nonfinite=skip_step", "data.val="});
  TrainResult r;
  try {
    r = TrainFor(c);
  } catch (const RuntimeError& e) {
    GTEST_SKIP() << "diverged to non-finite weights before a non-finite norm: " << e.what();
  }
  int skipped = 0;
  for (const nlohmann::json& row : Rows(out.path())) {
    if (row.value("skipped", false)) {
      EXPECT_EQ(row["skipped_steps"], ++skipped);
    }
  }
  EXPECT_GT(skipped, 0);
  EXPECT_EQ(r.steps.back().skipped_steps, skipped);
}

// state.bin is checked like every binary format: magic, version, length against its header.
TEST(Resume, ADamagedStateFileIsRefusedWithAHint) {
  test::TempDir out;
  TrainFor(OddConfig(out.path()), 3);
  const std::string state = out.path() + "/checkpoints/step_00000003/state.bin";
  const std::string good = Slurp(state);
  std::ofstream(state, std::ios::binary) << good.substr(0, good.size() - 4);
  std::string err = InputErrorOf(OddConfig(out.path()));
  EXPECT_NE(err.find("do not match its header"), std::string::npos) << err;
  EXPECT_NE(err.find("resume from an older checkpoint"), std::string::npos) << err;
  std::ofstream(state, std::ios::binary) << "XXXXXXXX" + good.substr(8);
  err = InputErrorOf(OddConfig(out.path()));
  EXPECT_NE(err.find("bad magic (expected CPTNSTAT)"), std::string::npos) << err;
  std::string v5 = good;
  v5[8] = 5;
  std::ofstream(state, std::ios::binary) << v5;
  err = InputErrorOf(OddConfig(out.path()));
  EXPECT_NE(err.find("version 5 is not supported"), std::string::npos) << err;
  // Version 4's slots must add up to the floats its header counts.
  uint64_t meta_bytes = 0;
  std::memcpy(&meta_bytes, good.data() + 16, 8);
  nlohmann::json meta = nlohmann::json::parse(good.substr(32, meta_bytes));
  meta["optimizer"]["slots"][1]["floats"] = 7;
  std::string meta2 = meta.dump();
  meta2.resize(meta_bytes, ' ');
  std::ofstream(state, std::ios::binary)
      << good.substr(0, 32) + meta2 + good.substr(32 + meta_bytes);
  err = InputErrorOf(OddConfig(out.path()));
  EXPECT_NE(err.find("its optimizer slots hold"), std::string::npos) << err;
}

// A version-1 state.bin (one train file and its bytes, no shuffle state; written before shards
// and shuffling) still resumes, with data.shuffle: false; with shuffling on it is refused naming
// data.shuffle.
TEST(Resume, AVersionOneStateResumesWithoutShuffle) {
  test::TempDir out, straight;
  TrainFor(OddConfig(straight.path()));
  TrainFor(OddConfig(out.path()), kSteps / 2);
  const std::string state = model::ResolveCheckpointDir(out.path()) + "/" + model::kStateFile;
  const std::string v4 = Slurp(state);
  uint64_t meta_bytes = 0, floats = 0;
  std::memcpy(&meta_bytes, v4.data() + 16, 8);
  std::memcpy(&floats, v4.data() + 24, 8);
  nlohmann::json meta = nlohmann::json::parse(v4.substr(32, meta_bytes));
  ASSERT_EQ(meta["optimizer"]["name"], "adamw");
  meta.erase("optimizer");  // version 1 held AdamW's m and v: n floats each
  ASSERT_EQ(meta["data"]["train"].size(), 1u);
  const std::string path = meta["data"]["train"][0]["path"];
  const uint64_t tokens = meta["data"]["train"][0]["tokens"];
  meta["data"]["train"] = path;
  meta["data"]["train_bytes"] = 1024 + 2 * tokens;
  for (const char* k : {"epoch", "shuffle", "data_seed", "tokens"}) meta.erase(k);
  const std::string meta1 = meta.dump();
  // Version 1: no trailer of checksums after the moments.
  std::string v1 =
      v4.substr(0, 32) + meta1 +
      v4.substr(32 + meta_bytes, v4.size() - 32 - meta_bytes - model::kStateTrailerBytes);
  v1[8] = 1;
  const uint64_t n1 = meta1.size(), per_moment = floats / 2;
  std::memcpy(v1.data() + 16, &n1, 8);
  std::memcpy(v1.data() + 24, &per_moment, 8);
  std::ofstream(state, std::ios::binary) << v1;
  const std::string err = InputErrorOf(OddConfig(out.path(), {"data.shuffle=true"}));
  EXPECT_NE(err.find("data.shuffle is true but the checkpoint"), std::string::npos) << err;
  TrainFor(OddConfig(out.path()));
  EXPECT_EQ(Rows(straight.path()), Rows(out.path()));
}

TEST(Resume, NonFiniteWeightsAreRefusedOnLoad) {
  test::TempDir out;
  std::string model = Slurp(Fixture("model.bin"));
  const float nan = std::nanf("");
  std::memcpy(model.data() + 1024 + 4 * 100, &nan, sizeof(nan));  // past the 1 KiB header
  const std::string bad = out.path() + "/nan.bin";
  std::ofstream(bad, std::ios::binary) << model;
  const std::string err = InputErrorOf(OddConfig(out.path() + "/run", {"model.init_from=" + bad}));
  EXPECT_NE(err.find("tensor wte, element 100 is nan (value 100 of the file"), std::string::npos)
      << err;
}

// The checksum of checkpoints is CRC32C (RFC 3720's check value), whatever the length (the three
// interleaved stripes, the tail) and however the data is split.
TEST(Resume, Crc32cIsCastagnolisAndJoinsPieces) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  std::vector<unsigned char> data(100000);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<unsigned char>(i * 7 + i / 13);
  const auto bitwise = [&](std::size_t n) {  // the textbook definition, one bit at a time
    uint32_t c = ~0u;
    for (std::size_t i = 0; i < n; ++i) {
      c ^= data[i];
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
  };
  for (std::size_t n : {0, 1, 7, 8, 24575, 24576, 24577, 100000}) {
    const uint32_t whole = Crc32c(0, data.data(), n);
    EXPECT_EQ(whole, bitwise(n)) << n;
    const std::size_t a = n / 3;
    EXPECT_EQ(Crc32c(Crc32c(0, data.data(), a), data.data() + a, n - a), whole) << n;
  }
}

// One exit-code rule for a failed write, by errno, not by when it happens (README): a path at
// fault is the input's (2), a storage failure under a good path is an I/O failure (1).
TEST(Resume, AFailedWritesExitCodeIsItsErrnos) {
  for (int err : {ENOENT, ENOTDIR, EACCES, EPERM, EROFS}) {
    EXPECT_THROW(ThrowWriteError("w", err, "/x/y", "hint"), InputError) << err;
  }
  for (int err : {ENOSPC, EDQUOT, EIO}) {
    EXPECT_THROW(ThrowWriteError("w", err, "/x/y", "hint"), RuntimeError) << err;
  }
}

// Flips one bit of `file` at `offset`.
void FlipBit(const std::string& file, std::size_t offset) {
  std::string bytes = Slurp(file);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x10);
  std::ofstream(file, std::ios::binary) << bytes;
}

// Issue 24: a flipped bit in model.bin's weights or state.bin's moments was resumed from with
// rc 0. Both files' CRC32C are recorded in state.bin's trailer and checked before a resume: a
// mismatch is refused naming the file, unless train.resume_fallback asks for the checkpoint before
// it (a warning names the skipped one and why); then the abandoned checkpoint is removed.
TEST(Resume, AFlippedBitInEitherFileIsRefusedOrSkippedWhenAsked) {
  for (const char* file : {model::kModelFile, model::kStateFile}) {
    SCOPED_TRACE(file);
    test::TempDir straight, out;
    TrainFor(OddConfig(straight.path()));
    TrainFor(OddConfig(out.path(), {"train.checkpoint_every=3"}), kSteps / 2);
    const std::string newest = out.path() + "/checkpoints/step_00000006";
    const std::string damaged = newest + "/" + file;
    FlipBit(damaged, fs::file_size(damaged) / 2);  // in the weights, or in v's moments
    std::string err = InputErrorOf(OddConfig(out.path()));
    EXPECT_NE(err.find("cannot resume from " + newest), std::string::npos) << err;
    EXPECT_NE(err.find("'" + damaged + "' is damaged: its CRC32C is"), std::string::npos) << err;
    EXPECT_NE(err.find("train --resume-fallback"), std::string::npos) << err;
    EXPECT_NE(err.find("next: " + out.path() + "/checkpoints/step_00000003"), std::string::npos)
        << err;
    // Asked for: the run resumes from step 3 and ends as one that never stopped.
    TrainResult r = TrainFor(OddConfig(out.path(), {"train.resume_fallback=true"}));
    EXPECT_EQ(r.resumed_from, 3);
    EXPECT_FALSE(fs::exists(newest)) << "the skipped checkpoint belongs to an abandoned run";
    EXPECT_EQ(Rows(straight.path()), Rows(out.path()));
  }
}

// A step directory without state.bin silently resumed from the one before it: now refused,
// naming it, unless asked for.
TEST(Resume, AStepDirectoryWithoutStateIsNamedNotSilentlySkipped) {
  test::TempDir out;
  TrainFor(OddConfig(out.path(), {"train.checkpoint_every=3"}), kSteps / 2);
  const std::string newest = out.path() + "/checkpoints/step_00000006";
  fs::remove(newest + "/" + model::kStateFile);
  std::string err = InputErrorOf(OddConfig(out.path()));
  EXPECT_NE(err.find("checkpoint '" + newest + "' is incomplete: it has no state.bin"),
            std::string::npos)
      << err;
  EXPECT_EQ(TrainFor(OddConfig(out.path(), {"train.resume_fallback=true"})).resumed_from, 3);
  // Nothing good left to fall back to: refused, not a fresh start over the old run.
  test::TempDir lone;
  TrainFor(OddConfig(lone.path()), 3);
  fs::remove(lone.path() + "/checkpoints/step_00000003/" + std::string(model::kStateFile));
  err = InputErrorOf(OddConfig(lone.path(), {"train.resume_fallback=true"}));
  EXPECT_NE(err.find("no checkpoint of '" + lone.path() + "' can be resumed from"),
            std::string::npos)
      << err;
}

// model.init_from of a run directory (and eval, generate, export: the same LoadCheckpoint) checks
// model.bin against the checksum beside it; llm.c's own model.bin, with no state.bin, loads.
TEST(Resume, InitFromADamagedRunIsRefusedNamingModelBin) {
  test::TempDir run, next;
  TrainFor(OddConfig(run.path()), 3);
  const std::string model = run.path() + "/checkpoints/step_00000003/model.bin";
  FlipBit(model, 1024 + 4 * 1000);
  const std::string err = InputErrorOf(OddConfig(next.path(), {"model.init_from=" + run.path()}));
  EXPECT_NE(err.find("checkpoint '" + model + "' is damaged: its CRC32C is"), std::string::npos)
      << err;
  EXPECT_NO_THROW(ReadWeights(Fixture("model.bin")));
}

}  // namespace
}  // namespace cputrain::train
