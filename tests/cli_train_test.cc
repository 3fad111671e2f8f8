// `cputrain-numa train`, `generate` and `plot` end to end, as a user runs them: a short run
// writes its outputs and they feed generate and plot; every bad input the issue lists (wrong
// magic or version, truncated file, header disagreeing with the size, token id >= vocab,
// seq_len > max_seq_len) exits 2 with the file named and a hint, and leaves no checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_util.h"

namespace cputrain {
namespace {

std::string Fixture(const std::string& f) {
  return std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/odd/" + f;
}

using ::cputrain::test::Slurp;

// Train args for the odd fixture writing into out, plus extra --set overrides.
std::vector<std::string> TrainArgs(const std::string& out, std::vector<std::string> sets) {
  std::vector<std::string> a = {"train",
                                "--config",
                                Fixture("config.yaml"),
                                "--progress",
                                "quiet",
                                "--set",
                                "model.init_from=" + Fixture("model.bin"),
                                "--set",
                                "data.train=" + Fixture("train.bin"),
                                "--set",
                                "data.val=" + Fixture("val.bin"),
                                "--set",
                                "train.out_dir=" + out};
  for (const std::string& s : sets) {
    a.push_back("--set");
    a.push_back(s);
  }
  return a;
}

void ExpectInputError(const test::CliResult& r, const std::string& needle, const std::string& out) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out + "/checkpoints")) << "a failed run wrote a checkpoint";
}

TEST(CliTrain, ShortRunFeedsGenerateAndPlot) {
  test::TempDir dir;
  const std::string out = dir.path() + "/run";
  test::CliResult r = test::RunCli(TrainArgs(out, {"train.steps=6", "optim.warmup_steps=2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream metrics(out + "/metrics.jsonl");
  int steps = 0, evals = 0;
  for (std::string line; std::getline(metrics, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) {
      ++steps;
      EXPECT_EQ(j["step"], steps);
      for (const char* k : {"lr", "tokens_per_s", "ms", "grad_norm"})
        EXPECT_TRUE(j.contains(k)) << k;
    }
    evals += j.contains("val_loss");
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(evals, 2);  // before training and after the last step
  for (const char* f : {"latest", "checkpoints/step_00000006/model.bin",
                        "checkpoints/step_00000006/state.bin", "placement.json", "config.yaml"}) {
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  }
  // No temporary files left next to the outputs.
  for (const auto& e : std::filesystem::recursive_directory_iterator(out)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  test::CliResult p = test::RunCli({"plot", out + "/metrics.jsonl", "-o", out + "/loss.svg"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(Slurp(out + "/loss.svg").rfind("<svg", 0), 0u);
  // generate takes the run's out_dir (its newest checkpoint), a step directory or a model.bin.
  // odd's vocabulary (300) is not a tokenizer's: generate refuses gpt2 (50257 > 300)...
  test::CliResult g =
      test::RunCli({"generate", "--checkpoint", out, "--tokenizer", "gpt2", "--prompt", "hi"});
  EXPECT_EQ(g.exit_code, 2);
  EXPECT_NE(g.err.find("has a vocabulary of 300"), std::string::npos) << g.err;
  // ...and runs with bytes (ids < 256 < 300), printing the prompt and new text.
  g = test::RunCli({"generate", "--checkpoint", out, "--tokenizer", "bytes", "--prompt", "abc",
                    "--tokens", "10", "--temperature", "0"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("abc", 0), 0u) << g.out;
  EXPECT_GT(g.out.size(), 4u);
  // More tokens than the model's 40 positions: the window slides, all 100 are printed.
  g = test::RunCli({"generate", "--checkpoint", out, "--tokenizer", "bytes", "--prompt", "abc",
                    "--tokens", "100", "--seed", "3"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.size(), 3u + 100u + 1u) << g.out;  // prompt, 100 bytes, newline
}

// model.preset names a whole shape for a random init; a model.* key set beside it that disagrees
// is refused as one a checkpoint contradicts (the odd fixture's config sets L = 3, the tiny
// preset has 2), before the data are read.
TEST(CliTrain, APresetAndAKeyThatContradictsItIsExit2) {
  test::TempDir dir;
  const std::string out = dir.path() + "/run";
  test::CliResult r = test::RunCli(TrainArgs(out, {"model.init_from=\"\"", "model.preset=tiny"}));
  ExpectInputError(r, "model.layers is 3 (", out);
  EXPECT_NE(r.err.find("but model.preset 'tiny' has model.layers = 2"), std::string::npos) << r.err;
}

TEST(CliTrain, CheckpointErrorsExitTwoAndNameTheFile) {
  test::TempDir dir;
  const std::string out = dir.path() + "/run";
  // A token file given as the checkpoint: its magic gets its own hint.
  ExpectInputError(test::RunCli(TrainArgs(out, {"model.init_from=" + Fixture("train.bin")})),
                   "bad magic 20240520", out);
  const std::string model = Slurp(Fixture("model.bin"));
  // Truncated.
  const std::string cut = dir.path() + "/cut.bin";
  std::ofstream(cut, std::ios::binary) << model.substr(0, model.size() / 2);
  ExpectInputError(test::RunCli(TrainArgs(out, {"model.init_from=" + cut})), "but its header", out);
  // A header that disagrees with the size (trailing data).
  const std::string longer = dir.path() + "/long.bin";
  std::ofstream(longer, std::ios::binary) << model << "extra";
  ExpectInputError(test::RunCli(TrainArgs(out, {"model.init_from=" + longer})), "trailing data",
                   out);
  // An unknown version; and llm.c's bf16 version (5) on an fp32-sized body, which its size
  // check refuses (bf16 files load: bf16_test.cc).
  std::string v4 = model;
  v4[4] = 4;
  const std::string four = dir.path() + "/v4.bin";
  std::ofstream(four, std::ios::binary) << v4;
  test::CliResult r = test::RunCli(TrainArgs(out, {"model.init_from=" + four}));
  ExpectInputError(r, "version 4 is not supported", out);
  EXPECT_NE(r.err.find("5, llm.c's bf16"), std::string::npos) << r.err;
  std::string v5 = model;
  v5[4] = 5;
  const std::string bf16 = dir.path() + "/v5.bin";
  std::ofstream(bf16, std::ios::binary) << v5;
  ExpectInputError(test::RunCli(TrainArgs(out, {"model.init_from=" + bf16})), "trailing data", out);
  // Missing file.
  ExpectInputError(test::RunCli(TrainArgs(out, {"model.init_from=" + dir.path() + "/nope.bin"})),
                   "nope.bin", out);
}

// train.precision: bf16 on a CPU without AVX512_BF16 (forced off through kernels/bf16.h's test
// hook, so this runs on every CPU) is refused before anything is written, naming what is
// missing and the fix; a misspelled precision is a config error.
TEST(CliTrain, Bf16WithoutTheInstructionSetExitsTwo) {
  test::TempDir dir;
  const std::string out = dir.path() + "/run";
  test::CliResult r =
      test::RunCli(TrainArgs(out, {"train.precision=bf16"}), {"CPUTRAIN_DISABLE_BF16=1"});
  ExpectInputError(r, "train.precision is bf16 but this CPU lacks AVX512_BF16", out);
  EXPECT_NE(r.err.find("set train.precision: fp32"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out + "/metrics.jsonl")) << r.err;
  ExpectInputError(test::RunCli(TrainArgs(out, {"train.precision=bfloat16"})), "train.precision",
                   out);
}

TEST(CliTrain, DataErrorsExitTwoAndNameTheFile) {
  test::TempDir dir;
  const std::string out = dir.path() + "/run";
  // A checkpoint given as the training data.
  ExpectInputError(test::RunCli(TrainArgs(out, {"data.train=" + Fixture("model.bin")})),
                   "model.bin", out);
  // Token ids >= the vocabulary: odd's data has ids up to 299, a fresh model with V=256.
  ExpectInputError(test::RunCli(TrainArgs(out, {"model.init_from=", "model.vocab_size=256"})),
                   "train.bin", out);
  // seq_len beyond the checkpoint's 40 positions.
  ExpectInputError(test::RunCli(TrainArgs(out, {"data.seq_len=64"})),
                   "larger than the model's max_seq_len", out);
  // Not set at all.
  ExpectInputError(test::RunCli(TrainArgs(out, {"data.train="})), "data.train is not set", out);
  // Fewer tokens than one batch.
  ExpectInputError(test::RunCli(TrainArgs(out, {"data.batch_size=64"})), "fewer than one batch",
                   out);
}

// `eval` as a user runs it after training: the checkpoint's loss on the validation file equals
// the run's own last evaluation (the same windows, the same forward), printed as JSON or text;
// bad inputs exit 2 naming what is wrong.
TEST(CliEval, ACheckpointsValLossMatchesTheRunsLastEvaluation) {
  test::TempDir dir;
  const std::string out = dir.path() + "/run";
  ASSERT_EQ(test::RunCli(TrainArgs(out, {"train.steps=4", "optim.warmup_steps=2"})).exit_code, 0);
  double last_val = 0;
  std::ifstream metrics(out + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) last_val = j["val_loss"];
  }
  const std::vector<std::string> shape = {"--set", "data.batch_size=4", "--set", "data.seq_len=24"};
  std::vector<std::string> args = {
      "eval", "--checkpoint", out, "--data", Fixture("val.bin"), "--batches", "2", "--json"};
  args.insert(args.end(), shape.begin(), shape.end());
  test::CliResult r = test::RunCli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["loss"].get<double>(), last_val, 1e-12 * last_val) << r.out;
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(last_val), 1e-9 * std::exp(last_val));
  EXPECT_EQ(j["windows"], 2);
  EXPECT_EQ(j["tokens"], 2 * 4 * 24);
  // Text, on two groups (a simulated machine), every window: a plain line.
  std::vector<std::string> text = {"eval",
                                   "--checkpoint",
                                   out + "/checkpoints/step_00000004",
                                   "--data",
                                   Fixture("val*.bin"),
                                   "--topology",
                                   "synthetic:pack:2 numa:1 core:1 pu:1"};
  text.insert(text.end(), shape.begin(), shape.end());
  r = test::RunCli(text);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("val loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over 3 of 3 windows"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("on 2 group(s)"), std::string::npos) << r.out;

  auto expect_2 = [&](std::vector<std::string> a, const std::string& needle) {
    a.insert(a.end(), shape.begin(), shape.end());
    const test::CliResult e = test::RunCli(a);
    EXPECT_EQ(e.exit_code, 2) << e.err;
    EXPECT_NE(e.err.find(needle), std::string::npos) << e.err;
  };
  expect_2({"eval", "--checkpoint", dir.path() + "/nothing", "--data", Fixture("val.bin")},
           "nothing");
  expect_2({"eval", "--checkpoint", out, "--data", dir.path() + "/none_*.bin"}, "matches no file");
  expect_2({"eval", "--checkpoint", out, "--data", Fixture("model.bin")}, "model.bin");
  expect_2({"eval", "--data", Fixture("val.bin")}, "--checkpoint");
  expect_2({"eval", "--checkpoint", out, "--data", Fixture("val.bin"), "--batches", "0"},
           "--batches");
}

}  // namespace
}  // namespace cputrain
