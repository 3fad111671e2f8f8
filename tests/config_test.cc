// The strict YAML config: defaults, every key parsed, errors with file:line and the valid keys,
// --set overrides, the YAML round trip, and docs/config.md listing every key with its default.
#include "config/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "common/error.h"
#include "test_util.h"

namespace cputrain {
namespace {

std::string ErrorOf(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    ParseConfig(yaml, "x.yaml", sets);
  } catch (const InputError& e) {
    return std::string(e.what()) + " | hint: " + e.hint();
  }
  return "(no error)";
}

TEST(Config, BuiltinDefaultParses) {
  Config c = LoadConfig("", {});
  EXPECT_EQ(c.topology, "this");
  EXPECT_EQ(c.placement.group_by, topo::GroupBy::kSocket);
  EXPECT_FALSE(c.placement.groups.has_value());
  EXPECT_FALSE(c.placement.threads_per_group_set);
  EXPECT_FALSE(c.data.train.empty());
}

TEST(Config, EmptyFileIsAllDefaults) {
  Config c = ParseConfig("", "empty.yaml", {});
  Config d;
  EXPECT_EQ(ConfigToYaml(c), ConfigToYaml(d));
}

TEST(Config, EveryKeyParses) {
  const std::string yaml = R"(
topology: "synthetic:pack:2 numa:1 core:4 pu:2"
placement:
  group_by: numa
  groups: 2
  threads_per_group: 3
  hyperthreads: true
  comm_threads: 1
  cpus: [[0, 1], [2, 3]]
model:
  init_from: ckpt.bin
  layers: 3
  channels: 48
  heads: 3
  vocab_size: 300
  max_seq_len: 40
  seed: 7
data: {train: a.bin, val: b.bin, batch_size: 8, seq_len: 24}
optim:
  lr: 0.003
  min_lr: 0.0003
  schedule: constant
  warmup_steps: 5
  beta1: 0.8
  beta2: 0.9
  eps: 1.0e-6
  weight_decay: 0.2
  grad_clip: 0.5
train: {steps: 20, eval_every: 5, eval_batches: 2, checkpoint_every: 10, out_dir: o}
comm: {bucket_mb: 4}
mpi: {enabled: on, watchdog_seconds: 30}
)";
  Config c = ParseConfig(yaml, "full.yaml", {});
  EXPECT_EQ(c.topology, "synthetic:pack:2 numa:1 core:4 pu:2");
  EXPECT_EQ(c.placement.group_by, topo::GroupBy::kNuma);
  EXPECT_EQ(c.placement.groups, 2);
  EXPECT_EQ(c.placement.threads_per_group, 3);
  EXPECT_TRUE(c.placement.threads_per_group_set);
  EXPECT_TRUE(c.placement.hyperthreads);
  EXPECT_EQ(c.placement.comm_threads, 1);
  EXPECT_EQ(c.placement.cpus, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(c.model.init_from, "ckpt.bin");
  EXPECT_EQ(c.model.layers, 3);
  EXPECT_EQ(c.model.channels, 48);
  EXPECT_EQ(c.model.heads, 3);
  EXPECT_EQ(c.model.vocab_size, 300);
  EXPECT_EQ(c.model.max_seq_len, 40);
  EXPECT_EQ(c.model.seed, 7u);
  EXPECT_EQ(c.data.train, std::vector<std::string>{"a.bin"});
  EXPECT_EQ(c.data.val, std::vector<std::string>{"b.bin"});
  EXPECT_EQ(c.data.batch_size, 8);
  EXPECT_EQ(c.data.seq_len, 24);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.003);
  EXPECT_DOUBLE_EQ(c.optim.min_lr, 0.0003);
  EXPECT_EQ(c.optim.schedule, Schedule::kConstant);
  EXPECT_EQ(c.optim.warmup_steps, 5);
  EXPECT_DOUBLE_EQ(c.optim.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optim.beta2, 0.9);
  EXPECT_DOUBLE_EQ(c.optim.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 0.2);
  EXPECT_DOUBLE_EQ(c.optim.grad_clip, 0.5);
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.train.eval_every, 5);
  EXPECT_EQ(c.train.eval_batches, 2);
  EXPECT_EQ(c.train.checkpoint_every, 10);
  EXPECT_EQ(c.train.out_dir, "o");
  EXPECT_DOUBLE_EQ(c.comm.bucket_mb, 4);
  EXPECT_EQ(c.mpi.enabled, MpiMode::kOn);
  EXPECT_DOUBLE_EQ(c.mpi.watchdog_seconds, 30);
  // The effective-config dump parses back to the same config.
  Config again = ParseConfig(ConfigToYaml(c), "dump.yaml", {});
  EXPECT_EQ(ConfigToYaml(again), ConfigToYaml(c));
}

TEST(Config, TypoedKeyNamesFileLineAndValidKeys) {
  std::string e = ErrorOf("optim:\n  lr: 0.1\n  lrr: 0.2\n");
  EXPECT_NE(e.find("x.yaml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'lrr' in section 'optim'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'lr'?"), std::string::npos) << e;
  EXPECT_NE(e.find("valid keys: lr, min_lr, schedule"), std::string::npos) << e;
  e = ErrorOf("modle:\n  layers: 2\n");
  EXPECT_NE(e.find("x.yaml:1: unknown top-level key 'modle' (did you mean 'model'?)"),
            std::string::npos)
      << e;
}

TEST(Config, WrongTypesNameTheKeyAndLine) {
  std::string e = ErrorOf("model:\n  layers: two\n");
  EXPECT_NE(e.find("x.yaml:2: model.layers must be an integer >= 1, not 'two'"), std::string::npos)
      << e;
  e = ErrorOf("placement:\n  hyperthreads: maybe\n");
  EXPECT_NE(e.find("placement.hyperthreads must be true or false"), std::string::npos) << e;
  e = ErrorOf("placement:\n  cpus: [0, 1]\n");
  EXPECT_NE(e.find("placement.cpus[0] must be a list of lists"), std::string::npos) << e;
  e = ErrorOf("optim:\n  schedule: linearly\n");
  EXPECT_NE(e.find("optim.schedule must be one of constant, cosine, linear, not 'linearly'"),
            std::string::npos)
      << e;
  e = ErrorOf("train: 5\n");
  EXPECT_NE(e.find("section 'train' must be a mapping"), std::string::npos) << e;
  e = ErrorOf("model:\n  layers: 0\n");
  EXPECT_NE(e.find("model.layers must be an integer >= 1, not '0'"), std::string::npos) << e;
  e = ErrorOf("model: [1, 2\n");
  EXPECT_NE(e.find("not valid YAML"), std::string::npos) << e;
}

// Issue 43, item 15: report_to=[wandb] was refused as "must be a list of: none, tensorboard,
// all, not a list": the entry that is not supported is named, with the ones that are.
TEST(Config, ReportToWandbWasRefusedAsNotAList) {
  for (const std::string& e : {ErrorOf("", {"train.report_to=[wandb]"}),
                               ErrorOf("train:\n  report_to: [tensorboard, wandb]\n"),
                               ErrorOf("", {"train.report_to=wandb"})}) {
    EXPECT_NE(e.find("train.report_to names 'wandb', which is not supported: cputrain-numa "
                     "reports to none, tensorboard or all"),
              std::string::npos)
        << e;
    EXPECT_EQ(e.find("not a list"), std::string::npos) << e;
  }
  EXPECT_EQ(ErrorOf("", {"train.report_to=[tensorboard]"}), "(no error)");
}

TEST(Config, CrossFieldRules) {
  EXPECT_NE(ErrorOf("model: {channels: 48, heads: 5}").find("model.heads (5) must divide"),
            std::string::npos);
  EXPECT_NE(ErrorOf("model: {max_seq_len: 16}\ndata: {seq_len: 32}")
                .find("larger than model.max_seq_len"),
            std::string::npos);
  EXPECT_NE(ErrorOf("optim: {lr: 0.1, min_lr: 0.2}").find("optim.min_lr (0.2) is larger"),
            std::string::npos);
  EXPECT_NE(ErrorOf("optim: {warmup_steps: 10}\ntrain: {steps: 10}").find("warmup_steps (10)"),
            std::string::npos);
  EXPECT_NE(ErrorOf("model: {vocab_size: 5000000}").find("more than 4194304"), std::string::npos);
  EXPECT_NE(ErrorOf("model: {head: span}").find("it is lm, qa or classify"), std::string::npos);
  EXPECT_NE(ErrorOf("model: {problem_type: ordinal}").find("model.problem_type is 'ordinal'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("model: {heads: 12, kv_heads: 5}").find("must divide model.heads"),
            std::string::npos);
}

// Regression: yaml-cpp keeps both pairs of a repeated key and the last one silently won,
// though the config is documented as strict.
TEST(Config, DuplicateKeysWereAcceptedLastOneWinning) {
  std::string e = ErrorOf("model:\n  layers: 2\n  heads: 1\n  layers: 3\n");
  EXPECT_NE(e.find("x.yaml:4: duplicate key 'model.layers' (first set at x.yaml:2)"),
            std::string::npos)
      << e;
  e = ErrorOf("model:\n  layers: 2\ntrain:\n  steps: 20\nmodel:\n  heads: 1\n");
  EXPECT_NE(e.find("x.yaml:5: duplicate key 'model' (first set at x.yaml:1)"), std::string::npos)
      << e;
  e = ErrorOf("optim: {lr: 0.1, lr: 0.2}\n");
  EXPECT_NE(e.find("duplicate key 'optim.lr'"), std::string::npos) << e;
  e = ErrorOf("topology: this\ntopology: this\n");
  EXPECT_NE(e.find("x.yaml:2: duplicate key 'topology'"), std::string::npos) << e;
}

// Regression: model.channels=600000000 overflowed 4*C (an int) in the tensor table, and
// model.layers=1e9 ended in std::bad_alloc (exit 1); both are refused here, naming the limit.
TEST(Config, HugeModelDimensionsOverflowedOrExhaustedMemory) {
  std::string e = ErrorOf("", {"model.channels=600000000"});
  EXPECT_NE(e.find("--set model.channels=600000000: model.channels is 600000000, more than 65536"),
            std::string::npos)
      << e;
  e = ErrorOf("model:\n  layers: 1000000000\n");
  EXPECT_NE(e.find("x.yaml:2: model.layers is 1000000000, more than 4096"), std::string::npos) << e;
  e = ErrorOf("model: {max_seq_len: 200000}\n");
  EXPECT_NE(e.find("model.max_seq_len is 200000, more than 131072"), std::string::npos) << e;
  EXPECT_EQ(ErrorOf("model: {layers: 4096, channels: 65536, heads: 65536, max_seq_len: 131072}"),
            "(no error)");
}

// Regression: --config /dev/zero read until std::bad_alloc, and a FIFO blocked forever (the
// CLI tests in hostile_input_test.cc cover the FIFO without risking a hang here).
TEST(Config, DeviceOrDirectoryAsConfigFileIsRefused) {
  for (const std::string path : {"/dev/zero", "/tmp"}) {
    std::string e = "(no error)";
    try {
      LoadConfig(path, {});
    } catch (const InputError& err) {
      e = err.what();
    }
    EXPECT_NE(e.find("config file '" + path + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("expected a YAML file"), std::string::npos) << e;
  }
}

TEST(Config, SetOverridesTheFile) {
  Config c = ParseConfig(
      "optim: {lr: 0.1}\n", "x.yaml",
      {"optim.lr=0.5", "placement.cpus=[[0,1],[2,3]]", "topology=synthetic:pack:2 core:2",
       "placement.threads_per_group=auto", "mpi.enabled=off"});
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.5);
  EXPECT_EQ(c.placement.cpus.size(), 2u);
  EXPECT_EQ(c.topology, "synthetic:pack:2 core:2");
  EXPECT_TRUE(c.placement.threads_per_group_set);
  EXPECT_FALSE(c.placement.threads_per_group.has_value());
  EXPECT_EQ(c.mpi.enabled, MpiMode::kOff);
  std::string e = ErrorOf("", {"optim.lrr=1"});
  EXPECT_NE(e.find("--set optim.lrr=1: unknown key 'lrr' in section 'optim'"), std::string::npos)
      << e;
  e = ErrorOf("", {"optim.lr"});
  EXPECT_NE(e.find("expected section.key=value"), std::string::npos) << e;
  e = ErrorOf("", {"model.layers=x"});
  EXPECT_NE(e.find("--set model.layers=x: model.layers must be an integer"), std::string::npos)
      << e;
  e = ErrorOf("", {"nosuch.key=1"});
  EXPECT_NE(e.find("unknown top-level key 'nosuch'"), std::string::npos) << e;
  // A section given a value: said so, not "unknown top-level key 'optim' (did you mean 'optim'?)".
  e = ErrorOf("", {"optim=1"});
  EXPECT_NE(e.find("--set optim=1: section 'optim' must be a mapping of keys"), std::string::npos)
      << e;
  EXPECT_EQ(e.find("unknown"), std::string::npos) << e;
}

TEST(Config, MissingFileIsAnInputError) {
  try {
    LoadConfig("/nonexistent/run.yaml", {});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/run.yaml"), std::string::npos);
  }
}

// The keys the user chose, with where: a config file's (file:line) and --set's, not the
// built-in default config's (the trainer refuses only chosen keys a checkpoint contradicts).
TEST(Config, ExplicitKeysAreThoseOfTheFileAndSetNotTheBuiltinDefaults) {
  const Config c = ParseConfig("model:\n  layers: 3\ntopology: this\n", "run.yaml",
                               {"model.heads=4", "optim.lr=1e-3"});
  EXPECT_EQ(c.explicit_keys.at("model.layers"), "run.yaml:2");
  EXPECT_EQ(c.explicit_keys.at("topology"), "run.yaml:3");
  EXPECT_EQ(c.explicit_keys.at("model.heads"), "--set model.heads=4");
  EXPECT_EQ(c.explicit_keys.count("model.channels"), 0u);
  const Config builtin = LoadConfig("", {"model.layers=2"});
  ASSERT_EQ(builtin.explicit_keys.size(), 1u);
  EXPECT_EQ(builtin.explicit_keys.begin()->first, "model.layers");
}

TEST(Config, ShippedConfigsParse) {
  for (const char* name :
       {"quickstart.yaml", "two-socket.yaml", "multi-node.yaml", "smollm2-135m.yaml"}) {
    const std::string path = std::string(CPUTRAIN_SOURCE_DIR) + "/configs/" + name;
    EXPECT_NO_THROW(LoadConfig(path, {})) << path;
  }
}

// docs/config.md documents every key with its default: each key appears in a table row
// "| `section.key` | type | `default` | ... |".
// The other way round: every key docs/config.md's tables list is one the config reads. Issue
// 42: model.rope_scaling and its four factors were documented (and validated) but no longer in
// the key table, so a config could not set them ("unknown key").
TEST(Config, EveryKeyTheDocsListIsAKey) {
  std::ifstream in(std::string(CPUTRAIN_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  std::set<std::string> keys;
  for (const ConfigKeyInfo& k : ConfigKeys())
    keys.insert(k.section.empty() ? k.key : k.section + "." + k.key);
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::size_t end = line.find("` |", 3);
    if (end == std::string::npos) continue;
    const std::string name = line.substr(3, end - 3);
    if (name.find(' ') != std::string::npos) continue;  // a table of values, not of keys
    ++rows;
    EXPECT_TRUE(keys.count(name)) << "docs/config.md lists " << name << ", which is no key";
  }
  EXPECT_GE(rows, static_cast<int>(keys.size()));
  const Config c = ParseConfig("model: {rope_scaling: linear, rope_factor: 8}\n", "t", {});
  EXPECT_EQ(c.model.rope_scaling, "linear");
  EXPECT_EQ(c.model.rope_factor, 8);
  EXPECT_EQ(ParseConfig(ConfigToYaml(c), "dump", {}).model.rope_scaling, "linear");
}

TEST(Config, DocsListEveryKeyWithItsDefault) {
  std::ifstream in(std::string(CPUTRAIN_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const ConfigKeyInfo& k : ConfigKeys()) {
    const std::string name = k.section.empty() ? k.key : k.section + "." + k.key;
    const std::string row = "| `" + name + "` |";
    auto pos = doc.find(row);
    ASSERT_NE(pos, std::string::npos) << "docs/config.md has no row for " << name;
    const std::string line = doc.substr(pos, doc.find('\n', pos) - pos);
    EXPECT_NE(line.find("`" + k.default_value + "`"), std::string::npos)
        << "docs/config.md row for " << name << " does not show the default `" << k.default_value
        << "`: " << line;
  }
}

}  // namespace
}  // namespace cputrain
