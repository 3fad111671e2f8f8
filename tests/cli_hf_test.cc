// Hugging Face GPT-2 through the CLI as a user runs it: export --format hf|llmc, generate on an
// HF directory (tokenizer inferred from the model, --top-p), train with model.init_from an HF
// directory, and an explicit model key that the checkpoint contradicts (exit 2).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/hf.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"
#include "test_util.h"

namespace cputrain {
namespace {

using test::RunCli;
using test::Slurp;

std::string Fixture(const std::string& dir, const std::string& f = "") {
  const std::string d = std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/" + dir;
  return f.empty() ? d : d + "/" + f;
}

void ExpectInputError(const test::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
}

TEST(CliHf, ExportHfAndLlmcRoundTripToTheReferenceBytes) {
  test::TempDir dir;
  test::CliResult r =
      RunCli({"export", "--format", "hf", "--checkpoint", Fixture("hf"), "-o", dir.path() + "/hf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Slurp(dir.path() + "/hf/model.safetensors"), Slurp(Fixture("hf", "model.safetensors")));
  EXPECT_EQ(Slurp(dir.path() + "/hf/config.json"), Slurp(Fixture("hf", "config.json")));
  r = RunCli({"export", "--format", "llmc", "--checkpoint", dir.path() + "/hf", "-o",
              dir.path() + "/model.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCli({"export", "--format", "hf", "--checkpoint", dir.path() + "/model.bin", "-o",
              dir.path() + "/again"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Slurp(dir.path() + "/again/model.safetensors"),
            Slurp(Fixture("hf", "model.safetensors")));
  // A model.bin exports too; a bad input is exit 2 and writes nothing.
  r = RunCli({"export", "--format", "hf", "--checkpoint", Fixture("odd", "train.bin"), "-o",
              dir.path() + "/bad"});
  ExpectInputError(r, "token file");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/bad/model.safetensors"));
}

TEST(CliHf, GenerateInfersTheBytesTokenizerFromASmallVocabulary) {
  // V = 300: a bytes model with spare rows. Before inference, generate defaulted to gpt2 and
  // refused it (exit 2).
  test::CliResult r =
      RunCli({"generate", "--checkpoint", Fixture("hf"), "--prompt", "ab", "--tokens", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("tokenizer bytes (from the model's vocabulary of 300"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.substr(0, 2), "ab");
}

TEST(CliHf, GenerateUsesAnHfDirectorysOwnVocabulary) {
  // A GPT-2-vocabulary model (V = 50257) in HF layout, with vocab.json + merges.txt beside it.
  test::TempDir dir;
  const model::Shape s{8, 50257, 50304, 1, 1, 8};
  model::ParamLayout layout(s);
  std::vector<float> params(layout.total());
  WorkerPool pool(std::vector<int>(1, 0), nullptr, "t");
  model::RandomInit(pool, layout, 1, params.data());
  model::ExportHf(dir.path(), layout, params.data());
  const std::string vocab = std::string(CPUTRAIN_SOURCE_DIR) + "/third_party/gpt2";
  std::filesystem::copy_file(vocab + "/encoder.json", dir.path() + "/vocab.json");
  std::filesystem::copy_file(vocab + "/vocab.bpe", dir.path() + "/merges.txt");
  test::CliResult r =
      RunCli({"generate", "--checkpoint", dir.path(), "--prompt", "Hello", "--tokens", "3"},
             {"CPUTRAIN_GPT2_VOCAB_DIR=/nonexistent"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("tokenizer " + dir.path() + " (from the model's directory"),
            std::string::npos)
      << r.err;
}

TEST(CliHf, TopPIsDeterministicWithTheSeedAndRangeChecked) {
  auto gen = [](const std::string& p, const std::string& seed) {
    return RunCli({"generate", "--checkpoint", Fixture("hf"), "--tokens", "30", "--top-p", p,
                   "--top-k", "0", "--seed", seed});
  };
  const test::CliResult a = gen("0.9", "5"), b = gen("0.9", "5"), c = gen("0.9", "6");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  EXPECT_EQ(gen("1.5", "5").exit_code, 2);
  EXPECT_EQ(gen("nan", "5").exit_code, 2);
}

// Train args: the odd fixture's data, from the HF directory, into out.
std::vector<std::string> Train(const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> a = {"train",
                                "--progress",
                                "quiet",
                                "--set",
                                "model.init_from=" + Fixture("hf"),
                                "--set",
                                "data.train=" + Fixture("odd", "train.bin"),
                                "--set",
                                "data.val=",
                                "--set",
                                "data.batch_size=4",
                                "--set",
                                "data.seq_len=24",
                                "--set",
                                "optim.warmup_steps=0",
                                "--set",
                                "train.steps=2",
                                "--set",
                                "train.out_dir=" + out};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(CliHf, AnExplicitModelKeyTheCheckpointContradictsIsExit2) {
  test::TempDir dir;
  // The built-in config's model keys are defaults: they differ from the HF model's and train.
  test::CliResult r = RunCli(Train(dir.path() + "/ok", {}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("L=3 C=48 NH=3 V=300"), std::string::npos) << r.err;
  // --set model.layers=5 with an L=3 checkpoint.
  r = RunCli(Train(dir.path() + "/set", {"--set", "model.layers=5"}));
  ExpectInputError(r, "model.layers is 5 (--set model.layers=5) but model.init_from");
  EXPECT_NE(r.err.find("has model.layers = 3"), std::string::npos) << r.err;
  // A value that agrees is fine.
  r = RunCli(Train(dir.path() + "/same", {"--set", "model.layers=3"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A config file's key counts as explicit: tiny's config says channels: 64.
  r = RunCli(Train(dir.path() + "/file", {"--config", Fixture("tiny", "config.yaml")}));
  ExpectInputError(r, "model.layers is 2 (");
  EXPECT_NE(r.err.find("config.yaml:"), std::string::npos) << r.err;
}

TEST(CliHf, AConfigThisEngineCannotRunIsExit2NamingTheKey) {
  test::TempDir dir;
  std::filesystem::copy_file(Fixture("hf", "model.safetensors"), dir.path() + "/model.safetensors");
  std::string config = Slurp(Fixture("hf", "config.json"));
  config.replace(config.find("gelu_new"), 8, "relu");
  std::ofstream(dir.path() + "/config.json") << config;
  ExpectInputError(RunCli({"generate", "--checkpoint", dir.path()}), "activation_function");
}

}  // namespace
}  // namespace cputrain
