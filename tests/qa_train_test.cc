// `cputrain-numa qa train` and `qa predict` end to end, held to what `train` promises for GPT-2
// and Llama (tests/resume_test.cc, tests/train_test.cc, tests/cli/stop_signals_test.sh), on tiny
// models transformers makes here (tests/data/make_qa_models.py: BERT and DistilBERT, hidden 64,
// 2 layers, 4 heads, max_position_embeddings 64, dropout 0.1 ON; SQuAD v1.1 data and the
// WordPiece tokenizer of tests/reference/squad_reference.py; T=48, doc_stride 16). Proves:
//   - QaResume: a run resumed from its step-4 checkpoint (metrics rows past it and the exported
//     model removed) writes the metrics.jsonl rows and the model.safetensors of the run that
//     never stopped, bit for bit: dropout masks, the feature order across epochs and AdamW
//     resume exactly; BERT and DistilBERT, 1 and 2 micro-batches a step;
//   - QaStop: SIGTERM mid-run saves a checkpoint and exits 143 with a resume hint; rerunning the
//     command finishes the run with the straight run's rows and weights, bit for bit;
//   - QaPlacement: with dropout on, 2 groups with a replica each, with comm threads, and sharing
//     one replica train bit-identical runs; 1 group of the same global batch within 1e-5 (the
//     masks hang on the global row index, so every placement drops the same elements); the
//     same model without dropout trains measurably otherwise (dropout is really on);
//   - QaBf16: --bf16 trains, each step's loss within 2e-3 of fp32's (train_test.cc's bf16
//     bound), skipped (GTEST_SKIP) where the CPU cannot train bf16;
//   - QaPredict: `qa predict` on the output_dir writes the predictions.json and
//     nbest_predictions.json `qa train --do_eval` wrote, byte for byte, and the same scores;
//     the output_dir loads in transformers with no missing or unexpected keys and its logits
//     give the same predictions, the n-best logits within 1e-5 (tests/reference/
//     qa_export_check.py);
//   - QaBadInput: each bad input exits 2 with a message naming the problem and a hint naming
//     the fix, and writes nothing (an output_dir of another model's run is left as it was).
// The MPI case (2 ranks = 1 process of 2 groups) is tests/mpi/mpi_tests.sh's 1g.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "common/subprocess.h"
#include "kernels/bf16.h"
#include "model/checkpoint_path.h"
#include "task_test_util.h"
#include "test_util.h"
#include "train/train_state.h"
#include "train_run.h"

namespace cputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::cputrain::test::RunCli;
using ::cputrain::test::Slurp;

const std::string kSourceDir = CPUTRAIN_SOURCE_DIR;
const std::string kPeersPython = CPUTRAIN_PEERS_PYTHON;
// make_qa_models.py's directory (task_test_util.h: made once per build, keyed by the maker and
// the reference it runs). "" on failure.
const std::string& Models() {
  static const std::string dir = test::MadeByPeers(
      kSourceDir + "/tests/data/make_qa_models.py",
      {kSourceDir + "/tests/reference/squad_reference.py"}, "qa_models", "bert/model.safetensors");
  return dir;
}

std::string Ref(const std::string& file) { return Models() + "/ref/" + file; }

using test::Flags;
using test::kLeaveOut;

// run_qa.py's command line for a short run: 5 examples (20 features, T=48, of which run_qa.py's
// --max_train_samples keeps the first 5), 12 steps of 4 features a group (several epochs,
// batches that run past an epoch's end), a checkpoint every 4, a high learning rate so the steps
// differ visibly.
// `more` replaces the value of a flag given here (CLI11 refuses a repeated option) or adds one;
// --set always adds.
std::vector<std::string> TrainArgs(const std::string& model, const std::string& out,
                                   const Flags& more = {}) {
  return test::TaskCommandLine({"qa", "train"},
                               {{"--model_name_or_path", model},
                                {"--train_file", Ref("v1.json")},
                                {"--output_dir", out},
                                {"--do_train", ""},
                                {"--max_seq_length", "48"},
                                {"--doc_stride", "16"},
                                {"--max_train_samples", "5"},
                                {"--per_device_train_batch_size", "4"},
                                {"--learning_rate", "1e-3"},
                                {"--max_steps", "12"},
                                {"--save_steps", "4"},
                                {"--seed", "7"},
                                {"--progress", "quiet"}},
                               more);
}

// Trains; fails the test if the run does not exit 0.
void Train(const std::vector<std::string>& args) {
  const test::CliResult r = RunCli(args, {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

std::vector<json> Rows(const std::string& out) { return test::MetricsRows(out); }
std::vector<double> Losses(const std::string& out) { return test::MetricsLosses(out); }

// ---------------------------------------------------------------------------- resume

struct ResumeCase {
  const char* model;
  int accum;
};

void PrintTo(const ResumeCase& c, std::ostream* os) { *os << c.model << ", accum " << c.accum; }

class QaResume : public ::testing::TestWithParam<ResumeCase> {};

// Straight to step 12 (checkpoints at 4, 8, 12) vs a copy cut back to its step-4 checkpoint
// (later checkpoints, `latest`, metrics rows 5-12 and the exported HF files removed; a torn row
// appended as a crash leaves one) and rerun with the same command.
TEST_P(QaResume, ResumedFromACheckpointIsBitIdentical) {
  const ResumeCase c = GetParam();
  ASSERT_FALSE(Models().empty());
  test::TempDir straight, resumed;
  const std::string model = Models() + "/" + c.model;
  const Flags more = {{"--gradient_accumulation_steps", std::to_string(c.accum)}};
  Train(TrainArgs(model, straight.path(), more));
  const std::vector<json> rows = Rows(straight.path());
  ASSERT_EQ(rows.size(), 12u);
  // The 12 steps run over more than one epoch (5 features, 4 or 8 a step), and the resume
  // starts mid-epoch (after 16 or 32 features).
  EXPECT_GE(rows.back().at("epoch").get<int>(), 2) << rows.back();

  fs::remove_all(resumed.path());
  fs::copy(straight.path(), resumed.path(), fs::copy_options::recursive);
  for (const char* step : {"step_00000008", "step_00000012"}) {
    ASSERT_TRUE(fs::remove_all(resumed.path() + "/checkpoints/" + step)) << step;
  }
  std::ofstream(resumed.path() + "/latest", std::ios::trunc) << "checkpoints/step_00000004";
  for (const char* f : {"model.safetensors", "config.json"}) fs::remove(resumed.path() + "/" + f);
  {
    std::ostringstream cut;
    for (std::size_t i = 0; i < 4; ++i) cut << rows[i].dump() << "\n";
    std::ofstream(resumed.path() + "/metrics.jsonl", std::ios::trunc)
        << cut.str() << "{\"step\":5,\"lo";
  }
  const test::CliResult r = RunCli(TrainArgs(model, resumed.path(), more), {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("step_00000004"), std::string::npos) << "did not resume:\n" << r.err;
  EXPECT_EQ(Rows(resumed.path()), rows);
  const std::string weights = Slurp(straight.path() + "/model.safetensors");
  ASSERT_GT(weights.size(), 100000u);
  EXPECT_TRUE(Slurp(resumed.path() + "/model.safetensors") == weights)
      << "the resumed model differs";
  EXPECT_TRUE(Slurp(model::ResolveModelFile(resumed.path())) ==
              Slurp(model::ResolveModelFile(straight.path())))
      << "the step-12 checkpoints differ";
  const auto a = test::ReadOptimizerState(straight.path()),
             b = test::ReadOptimizerState(resumed.path());
  ASSERT_FALSE(a.empty() || a[0].empty());
  EXPECT_TRUE(a == b) << "the optimizer's state differs";
}

INSTANTIATE_TEST_SUITE_P(Models, QaResume,
                         ::testing::Values(ResumeCase{"bert", 1}, ResumeCase{"bert", 2},
                                           ResumeCase{"distilbert", 1},
                                           ResumeCase{"distilbert", 2}),
                         [](const auto& info) {
                           return std::string(info.param.model) + "_accum" +
                                  std::to_string(info.param.accum);
                         });

// ---------------------------------------------------------------------------- SIGTERM

// Lines in a file (0 if it does not exist).
std::size_t LineCount(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(QaStop, SigtermSavesExitsWithAHintAndTheRerunFinishesBitIdentical) {
  ASSERT_FALSE(Models().empty());
  test::TempDir straight, stopped;
  const std::string model = Models() + "/bert";
  // Enough steps that the signal lands mid-run; no periodic checkpoint (the stop saves one).
  const Flags more = {{"--max_steps", "80"}, {"--save_steps", "0"}};
  Train(TrainArgs(model, straight.path(), more));
  std::vector<std::string> argv = TrainArgs(model, stopped.path(), more);
  argv.insert(argv.begin(), test::CliPath());
  SubprocessResult r;
  {
    Subprocess p(argv);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (LineCount(stopped.path() + "/metrics.jsonl") < 2 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    p.Signal(SIGTERM);
    r = p.Wait();
  }
  ASSERT_EQ(r.exit_code, 128 + SIGTERM) << "the run ended before the signal, or not by it (steps: "
                                        << LineCount(stopped.path() + "/metrics.jsonl") << "):\n"
                                        << r.err;
  const std::size_t steps = LineCount(stopped.path() + "/metrics.jsonl");
  ASSERT_GE(steps, 2u);
  ASSERT_LT(steps, 80u);
  char ckpt[32];
  std::snprintf(ckpt, sizeof(ckpt), "checkpoints/step_%08zu", steps);
  EXPECT_NE(r.err.find("stopped by SIGTERM after step " + std::to_string(steps) + "; checkpoint " +
                       stopped.path() + "/" + ckpt + "; resume: " + test::CliPath() + " qa train"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("error:"), std::string::npos) << r.err;
  EXPECT_EQ(Slurp(stopped.path() + "/latest"), std::string(ckpt) + "\n");
  EXPECT_TRUE(fs::exists(stopped.path() + "/" + ckpt + "/state.bin"));
  // The same command again finishes the run: the straight run's rows and weights.
  Train(TrainArgs(model, stopped.path(), more));
  EXPECT_EQ(Rows(stopped.path()), Rows(straight.path()));
  EXPECT_TRUE(Slurp(stopped.path() + "/model.safetensors") ==
              Slurp(straight.path() + "/model.safetensors"))
      << "the resumed model differs";
}

// ---------------------------------------------------------------------------- placements

// A copy of `model` with every dropout probability 0.
std::string WithoutDropout(const std::string& model, const std::string& dir) {
  fs::copy(model, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  json cfg = json::parse(Slurp(dir + "/config.json"));
  for (const char* k : {"hidden_dropout_prob", "attention_probs_dropout_prob", "dropout",
                        "attention_dropout", "qa_dropout"}) {
    if (cfg.contains(k)) cfg[k] = 0.0;
  }
  std::ofstream(dir + "/config.json", std::ios::trunc) << cfg.dump(2);
  return dir;
}

// The same global batch of 8 features on 1 group, 2 groups with a replica each (inline sync and
// comm threads with small buckets) and 2 groups on one NUMA node sharing one replica.
TEST(QaPlacement, DropoutRunsAgreeAcrossGroupsReplicasAndSyncModes) {
  ASSERT_FALSE(Models().empty());
  const std::string two = "synthetic:pack:2 numa:1 core:2 pu:1";
  const std::string one_node = "synthetic:pack:1 numa:1 l3:2 core:2 pu:1";
  for (const char* name : {"bert", "distilbert"}) {
    SCOPED_TRACE(name);
    const std::string model = Models() + "/" + name;
    test::TempDir one, inline_sync, comm, shared, nodrop_dir, nodrop;
    Train(TrainArgs(model, one.path(), {{"--per_device_train_batch_size", "8"}}));
    Train(TrainArgs(model, inline_sync.path(),
                    {{"--topology", two}, {"--set", "placement.threads_per_group=1"}}));
    Train(TrainArgs(model, comm.path(),
                    {{"--topology", two},
                     {"--set", "placement.comm_threads=1"},
                     {"--set", "comm.bucket_mb=0.05"}}));
    Train(TrainArgs(model, shared.path(),
                    {{"--topology", one_node},
                     {"--set", "placement.group_by=l3"},
                     {"--set", "placement.threads_per_group=1"}}));
    // placement.json: 2 groups, a replica each or one shared.
    const json pi = json::parse(Slurp(inline_sync.path() + "/placement.json"));
    const json ps = json::parse(Slurp(shared.path() + "/placement.json"));
    ASSERT_EQ(pi["groups"].size(), 2u);
    ASSERT_EQ(ps["groups"].size(), 2u);
    EXPECT_EQ(pi["groups"][1]["param_replica"], 1);
    EXPECT_EQ(ps["groups"][1]["param_replica"], 0);
    // 2 groups, whatever the sync and the replicas: bit for bit.
    const std::vector<json> rows = Rows(inline_sync.path());
    ASSERT_EQ(rows.size(), 12u);
    EXPECT_EQ(Rows(comm.path()), rows);
    EXPECT_EQ(Rows(shared.path()), rows);
    const std::string weights = Slurp(inline_sync.path() + "/model.safetensors");
    EXPECT_TRUE(Slurp(comm.path() + "/model.safetensors") == weights);
    EXPECT_TRUE(Slurp(shared.path() + "/model.safetensors") == weights);
    // 1 group sums the same gradients in another order: within 1e-5. Without dropout the
    // losses move by far more, so the agreement is the masks', not dropout being off.
    Train(TrainArgs(WithoutDropout(model, nodrop_dir.path() + "/m"), nodrop.path(),
                    {{"--per_device_train_batch_size", "8"}}));
    const std::vector<double> l1 = Losses(one.path()), l2 = Losses(inline_sync.path()),
                              l0 = Losses(nodrop.path());
    ASSERT_EQ(l1.size(), 12u);
    ASSERT_EQ(l0.size(), 12u);
    double apart = 0;
    for (std::size_t s = 0; s < l1.size(); ++s) {
      EXPECT_NEAR(l2[s], l1[s], 1e-5 * l1[s]) << "step " << s + 1;
      apart = std::max(apart, std::fabs(l0[s] - l1[s]) / l1[s]);
    }
    EXPECT_GT(apart, 1e-3) << "dropout changed nothing: is it on?";
  }
}

// ---------------------------------------------------------------------------- bf16

TEST(QaBf16, TrainsWithinTheBf16BoundOfFp32) {
  if (!kernels::DetectBf16().trains()) GTEST_SKIP() << kernels::DetectBf16().Describe();
  ASSERT_FALSE(Models().empty());
  for (const char* name : {"bert", "distilbert"}) {
    SCOPED_TRACE(name);
    test::TempDir fp32, bf16;
    const std::string model = Models() + "/" + name;
    Train(TrainArgs(model, fp32.path()));
    Train(TrainArgs(model, bf16.path(), {{"--bf16", ""}}));
    const std::vector<double> a = Losses(fp32.path()), b = Losses(bf16.path());
    ASSERT_EQ(a.size(), 12u);
    ASSERT_EQ(b.size(), 12u);
    double worst = 0;
    for (std::size_t s = 0; s < a.size(); ++s) {
      EXPECT_NEAR(b[s], a[s], 2e-3 * a[s]) << "step " << s + 1;
      worst = std::max(worst, std::fabs(b[s] - a[s]) / a[s]);
    }
    EXPECT_GT(worst, 0) << "bf16 ran fp32 products";
    EXPECT_LT(a.back(), a.front());  // it learns
    std::printf("%s: bf16 losses within %.2e of fp32 (bound 2e-3)\n", name, worst);
  }
}

// ---------------------------------------------------------------------------- predict

TEST(QaPredict, PredictEqualsTrainsEvalAndTransformersLoadsTheOutput) {
  ASSERT_FALSE(Models().empty());
  test::TempDir bert, distil, again;
  const Flags eval = {
      {"--do_eval", ""}, {"--validation_file", Ref("v1.json")}, {"--max_eval_samples", "20"}};
  std::vector<std::string> dirs;
  for (const auto& [name, out] : {std::pair{"bert", &bert}, std::pair{"distilbert", &distil}}) {
    SCOPED_TRACE(name);
    const test::CliResult t = RunCli(TrainArgs(Models() + "/" + name, out->path(), eval), {}, 300);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    const std::string pred = again.path() + "/" + name;
    const test::CliResult p =
        RunCli({"qa", "predict", "--model_name_or_path", out->path(), "--validation_file",
                Ref("v1.json"), "--output_dir", pred, "--max_seq_length", "48", "--doc_stride",
                "16", "--max_eval_samples", "20", "--progress", "quiet"},
               {}, 300);
    ASSERT_EQ(p.exit_code, 0) << p.err;
    EXPECT_EQ(p.out, t.out);  // the scores
    for (const char* f : {"predictions.json", "nbest_predictions.json"}) {
      const std::string want = Slurp(out->path() + "/" + f);
      ASSERT_FALSE(want.empty()) << f;
      EXPECT_TRUE(Slurp(pred + "/" + f) == want) << f << " differs";
    }
    EXPECT_EQ(json::parse(Slurp(out->path() + "/predictions.json")).size(), 20u);
    dirs.push_back(out->path());
  }
  SubprocessOptions opts;
  opts.env = test::PeersEnv();
  std::vector<std::string> check = {
      kPeersPython, kSourceDir + "/tests/reference/qa_export_check.py", Ref("v1.json"), "20"};
  check.insert(check.end(), dirs.begin(), dirs.end());
  const SubprocessResult r = RunSubprocess(check, opts);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::printf("%s", r.out.c_str());
}

// ---------------------------------------------------------------------------- bad input

struct BadCase {
  std::string name;
  Flags flags;                // TrainArgs(model, out)'s changed
  std::string message, hint;  // in stderr's "error:" and "hint:" lines
};

// Every bad input: exit 2, the problem on the error line, the fix on the hint line, no
// traceback or crash, and nothing written into the output directory.
TEST(QaBadInput, ExitTwoNamingTheProblemAndTheFixWritingNothing) {
  ASSERT_FALSE(Models().empty());
  test::TempDir tmp;
  const std::string not_json = tmp.path() + "/not.json", empty = tmp.path() + "/empty.json";
  std::ofstream(not_json) << "{\"data\": [";
  std::ofstream(empty) << "";
  const std::string none = tmp.path() + "/no-such-model";
  const std::vector<BadCase> cases = {
      {"no train file", {{"--train_file", kLeaveOut}}, "--train_file is required", "--help"},
      {"missing train file",
       {{"--train_file", tmp.path() + "/none.json"}},
       "none.json': cannot open: No such file",
       "check --train_file"},
      {"train file a directory", {{"--train_file", tmp.path()}}, "is a directory", "--train_file"},
      {"train file not JSON", {{"--train_file", not_json}}, "not.json: not JSON", "official SQuAD"},
      {"train file empty", {{"--train_file", empty}}, "empty.json: not JSON", "official SQuAD"},
      {"a GPT-2 directory",
       {{"--model_name_or_path", Models() + "/gpt2"}, {"--tokenizer_name", Ref("tokenizer")}},
       "is a gpt2 model, a decoder",
       "BERT or DistilBERT"},
      {"a missing model directory",
       {{"--model_name_or_path", none}},
       "no-such-model' does not exist",
       "nothing is downloaded"},
      {"max_seq_length above the positions",
       {{"--max_seq_length", "96"}},
       "--max_seq_length 96 is larger than the model's max_position_embeddings (64)",
       "lower --max_seq_length to 64"},
      {"doc_stride not below the window",
       {{"--doc_stride", "48"}},
       "not more than --doc_stride 48",
       "lower --doc_stride"},
      {"do_eval without a validation file",
       {{"--do_eval", ""}},
       "--do_eval needs --validation_file",
       "--validation_file"},
      {"a BPE tokenizer",
       {{"--tokenizer_name", Models() + "/bpe"}},
       "is not WordPiece",
       "--tokenizer_name"},
      {"negative learning rate",
       {{"--learning_rate", "-1"}},
       "--learning_rate: -1 is out of range",
       "--help"},
      {"NaN learning rate", {{"--learning_rate", "nan"}}, "not a finite number", "--help"},
      {"negative epochs",
       {{"--max_steps", kLeaveOut}, {"--num_train_epochs", "-2"}},
       "--num_train_epochs: -2 is out of range",
       "--help"},
      {"NaN epochs",
       {{"--max_steps", kLeaveOut}, {"--num_train_epochs", "nan"}},
       "not a finite",
       "--help"},
      {"zero epochs",
       {{"--max_steps", kLeaveOut}, {"--num_train_epochs", "0"}},
       "0 training steps",
       "--num_train_epochs or --max_steps"},
      // Issue 32, item 3: the files --do_eval will predict after training are read and checked
      // before the first step (they were read after training: 10 steps trained and saved, then
      // exit 2).
      {"do_eval with a missing validation file",
       {{"--do_eval", ""}, {"--validation_file", tmp.path() + "/nope.json"}},
       "nope.json': cannot open: No such file",
       "check --validation_file"},
      {"do_eval with a validation file that is not JSON",
       {{"--do_eval", ""}, {"--validation_file", not_json}},
       "not.json: not JSON",
       "official SQuAD"},
      // Issue 42: --optim and --optim_args, HF's names and form.
      {"an optimizer we do not have", {{"--optim", "lion"}}, "--optim: lion not in", "--help"},
      {"an optim_args key of another optimizer",
       {{"--optim", "adafactor"}, {"--optim_args", "momentum=0.9"}},
       "'momentum=0.9' is not a key=value setting of --optim adafactor (scale_parameter",
       "--optim_args as key=value"},
      {"optim_args for AdamW, which has none here",
       {{"--optim_args", "amsgrad=True"}},
       "of --optim adamw_torch (it has none)",
       "--optim_args as key=value"},
      {"an optim_args value out of range",
       {{"--optim", "sgd"}, {"--optim_args", "momentum=2"}},
       "optim.momentum",
       "docs/config.md"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string out = tmp.path() + "/out";
    const test::CliResult r = RunCli(TrainArgs(Models() + "/bert", out, c.flags), {}, 120);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    const std::size_t e = r.err.find("error: "), h = r.err.find("hint: ");
    if (e == std::string::npos || h == std::string::npos) {
      ADD_FAILURE() << "no error and hint lines:\n" << r.err;
      continue;
    }
    EXPECT_NE(r.err.substr(e, h - e).find(c.message), std::string::npos) << r.err;
    EXPECT_NE(r.err.substr(h).find(c.hint), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << "the refused run wrote " << out;
    fs::remove_all(out);
  }
}

// Issue 33, item 6: --max_train_samples N keeps run_qa.py's training set — the first N features
// of the first N examples (it kept every feature of the N examples: 20 for 5 here).
TEST(QaTrain, MaxTrainSamplesKeepsTheFirstNFeaturesAsRunQaPy) {
  ASSERT_FALSE(Models().empty());
  test::TempDir out;
  const test::CliResult r = RunCli(TrainArgs(Models() + "/bert", out.path(),
                                             {{"--max_train_samples", "3"}, {"--max_steps", "1"}}),
                                   {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("3 training features from 3 examples"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the first 3 of "), std::string::npos) << r.err;
}

// Issue 32, item 8: a rerun into an output_dir whose run was trained on another file or feature
// length is refused in qa train's own words — its flags and its unit (features), not train's
// config keys (data.train, data.seq_len, train.resume) and tokens; --overwrite_output_dir then
// starts the run afresh there, the old run's checkpoints and metrics gone.
TEST(QaBadInput, ResumeMismatchesNameTheCommandsFlags) {
  ASSERT_FALSE(Models().empty());
  test::TempDir out, tmp;
  const std::string model = Models() + "/bert";
  Train(TrainArgs(model, out.path(), {{"--max_steps", "2"}}));
  const std::string copy = tmp.path() + "/copy.json";
  fs::copy_file(Ref("v1.json"), copy);
  struct Case {
    Flags flags;
    std::string message, hint;
  };
  for (const Case& c :
       {Case{{{"--max_steps", "4"}, {"--max_seq_length", "40"}},
             "--max_seq_length is 40 but the checkpoint",
             "set --max_seq_length back to 48 to resume, or start a new run: another "
             "--output_dir, or --overwrite_output_dir"},
        Case{{{"--max_steps", "4"}, {"--train_file", copy}},
             "--train_file is " + fs::canonical(copy).string() + " (5 features)",
             "set --train_file back to"}}) {
    const test::CliResult r = RunCli(TrainArgs(model, out.path(), c.flags), {}, 120);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    const std::size_t e = r.err.find("error: "), h = r.err.find("hint: ");
    ASSERT_NE(e, std::string::npos) << r.err;
    ASSERT_NE(h, std::string::npos) << r.err;
    EXPECT_NE(r.err.substr(e, h - e).find(c.message), std::string::npos) << r.err;
    EXPECT_NE(r.err.substr(h).find(c.hint), std::string::npos) << r.err;
    for (const char* key :
         {"data.train", "data.seq_len", "train.resume", "train.out_dir", "tokens"}) {
      EXPECT_EQ(r.err.find(key), std::string::npos) << key << " in:\n" << r.err;
    }
  }
  // --overwrite_output_dir: the same command with another feature length trains afresh.
  const test::CliResult r = RunCli(
      TrainArgs(model, out.path(),
                {{"--max_steps", "3"}, {"--max_seq_length", "40"}, {"--overwrite_output_dir", ""}}),
      {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("resuming"), std::string::npos) << r.err;
  EXPECT_EQ(Rows(out.path()).size(), 3u);
  EXPECT_FALSE(fs::exists(out.path() + "/checkpoints/step_00000002"));
  EXPECT_EQ(Slurp(out.path() + "/latest"), "checkpoints/step_00000003\n");
}

// An output_dir holding a BERT run, rerun with DistilBERT (the same dimensions): refused naming
// model_type before anything is read or written; the run's files are untouched. qa predict
// refuses the GPT-2 directory too.
TEST(QaBadInput, OutputDirOfAnotherModelIsRefusedNamingTheKey) {
  ASSERT_FALSE(Models().empty());
  test::TempDir out;
  Train(TrainArgs(Models() + "/bert", out.path(), {{"--max_steps", "2"}}));
  const std::string metrics = Slurp(out.path() + "/metrics.jsonl");
  const std::string weights = Slurp(out.path() + "/model.safetensors");
  const std::string latest = Slurp(out.path() + "/latest");
  const test::CliResult r =
      RunCli(TrainArgs(Models() + "/distilbert", out.path(), {{"--max_steps", "4"}}), {}, 120);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("holds a run of another model"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model_type bert, --model_name_or_path"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("has distilbert"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint: pass another --output_dir"), std::string::npos) << r.err;
  EXPECT_EQ(Slurp(out.path() + "/metrics.jsonl"), metrics);
  EXPECT_TRUE(Slurp(out.path() + "/model.safetensors") == weights);
  EXPECT_EQ(Slurp(out.path() + "/latest"), latest);

  test::TempDir pred;
  const test::CliResult p =
      RunCli({"qa", "predict", "--model_name_or_path", Models() + "/gpt2", "--tokenizer_name",
              Ref("tokenizer"), "--validation_file", Ref("v1.json"), "--output_dir",
              pred.path() + "/p", "--max_seq_length", "48", "--doc_stride", "16"},
             {}, 120);
  EXPECT_EQ(p.exit_code, 2) << p.err;
  EXPECT_NE(p.err.find("a decoder"), std::string::npos) << p.err;
  EXPECT_FALSE(fs::exists(pred.path() + "/p"));
}

}  // namespace
}  // namespace cputrain
