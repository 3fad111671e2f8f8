// `cputrain-numa classify` (docs/classification.md): its file reader, its metrics, and the
// command end to end on tiny models transformers makes here (tests/data/make_classify_models.py:
// a BertModel and a DistilBertModel body, a LlamaForCausalLM, dropout 0.1 ON; SST-2, MRPC, STS-B,
// MNLI-style and multi-label files). Numerics against transformers, peft, scikit-learn and SciPy
// are tests/reference/classify_parity.py's. Proves:
//   - ClassifyTable: CSV as pandas.read_csv reads it (quoted commas, quotes and line breaks, CRLF,
//     a byte-order mark, pandas' missing-value spellings, column types), TSV without quoting, JSON
//     Lines with keys missing from some rows, a JSON list; every bad file refused naming its line;
//   - BalancedOrder / TaskRows: every power-of-two share of a micro-batch gets its tokens within
//     one row's spread of the others; training micro-batches are the epoch's rows in that order;
//     the activations fit every micro-batch's longest row;
//   - ClassifyMetrics: closed-form values (ties in Spearman's ranks, undefined F1 and Matthews);
//   - ClassifyCli: train --do_eval --do_predict writes run_glue.py's files; `classify evaluate`
//     and `classify predict` on the output_dir write the same metrics and predictions; a resumed
//     run (from step 4 of 12, dropout on, 2 micro-batches a step) is bit-identical to a straight
//     one, for BERT and Llama; 2 groups (a replica each, comm threads, one shared) bit-identical,
//     1 group within 1e-5; each batch padded to its longest row trains what padding to
//     --max_seq_length does, within 1e-5; --bf16 within 2e-4 of fp32 at step 1, 1e-2 after;
//     LoRA trains and predicts; MNLI's mismatched file gets its _mm metrics;
//   - ClassifyBadInput: each bad input exits 2 naming the problem and the fix, writing nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/error.h"
#include "common/subprocess.h"
#include "kernels/bf16.h"
#include "task/classify/metrics.h"
#include "task/classify/table.h"
#include "task/task_rows.h"
#include "task_test_util.h"
#include "test_util.h"
#include "train/rows.h"

namespace cputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::cputrain::test::RunCli;
using ::cputrain::test::Slurp;

const std::string kSourceDir = CPUTRAIN_SOURCE_DIR;

std::string Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// ---------------------------------------------------------------------------- the reader

TEST(ClassifyTable, CsvAsPandasReadsIt) {
  test::TempDir tmp;
  const std::string p = Write(tmp.path() + "/t.csv",
                              "\xEF\xBB\xBFsentence,label,score\r\n"
                              "\"a, b\",1,0.5\r\n"
                              "\"say \"\"hi\"\"\nthere\",0,2\n"
                              "\n"
                              "NA,1,\n"
                              "plain,-3,1e2\n");
  const task::Table t = task::ReadTable(p, "--train_file");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"sentence", "label", "score"}));
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_EQ(t.rows[0][0], "a, b");
  EXPECT_EQ(t.rows[1][0], "say \"hi\"\nthere");
  EXPECT_EQ(t.lines, (std::vector<std::size_t>{2, 3, 6, 7}));
  EXPECT_TRUE(t.rows[2][0].is_null());            // pandas reads NA as missing
  EXPECT_TRUE(t.rows[0][1].is_number_integer());  // every label an integer: an int column
  EXPECT_EQ(t.rows[3][1], -3);
  EXPECT_TRUE(t.rows[1][2].is_number_float());  // 0.5 in the column: all floats
  EXPECT_EQ(t.rows[1][2], 2.0);
  EXPECT_TRUE(t.rows[2][2].is_null());
  EXPECT_EQ(t.rows[3][2], 100.0);
}

TEST(ClassifyTable, TsvAndJsonLines) {
  test::TempDir tmp;
  const task::Table tsv = task::ReadTable(
      Write(tmp.path() + "/t.tsv", "sentence\tlabel\nit \"is\" so\t1\n"), "--train_file");
  EXPECT_EQ(tsv.rows.at(0).at(0), "it \"is\" so");  // no quoting in TSV
  const task::Table j = task::ReadTable(
      Write(tmp.path() + "/t.jsonl",
            "{\"text\": \"x\", \"label\": [\"a\", \"b\"]}\n\n{\"label\": [], \"extra\": 2}\n"),
      "--train_file");
  EXPECT_EQ(j.columns, (std::vector<std::string>{"text", "label", "extra"}));
  ASSERT_EQ(j.rows.size(), 2u);
  EXPECT_TRUE(j.rows[1][0].is_null());
  EXPECT_TRUE(j.rows[0][2].is_null());
  EXPECT_EQ(j.lines, (std::vector<std::size_t>{1, 3}));
  const task::Table list = task::ReadTable(
      Write(tmp.path() + "/l.json", "[{\"sentence\": \"a\", \"label\": 0}]"), "--train_file");
  EXPECT_EQ(list.rows.size(), 1u);
}

TEST(ClassifyTable, BadFilesAreRefusedNamingTheLine) {
  test::TempDir tmp;
  struct Case {
    std::string name, text, message;
  };
  for (const Case& c : std::vector<Case>{
           {"f.csv", "a,b\n1,2\n3\n", "f.csv, line 3: 1 fields, the header has 2"},
           {"f.csv", "a,b\n\"1,2\n", "f.csv, line 2: a quoted field is not closed"},
           {"f.csv", "a,b\n", "has no rows"},
           {"f.csv", "a\nx\xC0\x84y\n",
            "not valid UTF-8 at byte 3 (line 2, column 2): 0xC0 0x84 is an overlong encoding"},
           {"f.csv", "a\n\xED\xA0\x80\n", "not valid UTF-8 at byte 2 (line 2"},  // a surrogate
           {"f.jsonl", "{\"a\": 1}\n{\"a\": \n", "f.jsonl, line 2: not JSON"},
           {"f.jsonl", "[1]\n", "line 1: not a JSON object"},
           {"f.txt", "a\n1\n", "is not a .csv, .tsv, .json or .jsonl file"},
       }) {
    SCOPED_TRACE(c.message);
    const std::string p = Write(tmp.path() + "/" + c.name, c.text);
    try {
      task::ReadTable(p, "--train_file");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      EXPECT_FALSE(e.hint().empty());
    }
  }
}

// ---------------------------------------------------------------------------- the metrics

// Rows of the given lengths, padded per batch or not.
class LengthSplit final : public task::Split {
 public:
  LengthSplit(std::vector<int> lengths, bool dynamic)
      : lengths_(std::move(lengths)), dynamic_(dynamic) {}
  std::size_t rows() const override { return lengths_.size(); }
  std::size_t examples() const override { return lengths_.size(); }
  int length(std::size_t i) const override { return lengths_[i]; }
  void Load(std::size_t, int, int, model::Activations&) const override {}
  bool dynamic_padding() const override { return dynamic_; }
  const std::string& path() const override { return path_; }

 private:
  std::vector<int> lengths_;
  bool dynamic_;
  std::string path_ = "lengths";
};

// The activations are made for LongestRow() positions: every planned micro-batch must fit them,
// and they are the longest row's (at most T), not T, under dynamic padding.
TEST(TaskRows, LongestRowBoundsEveryMicroBatchAndIsTheDatasLongest) {
  const LengthSplit split({5, 17, 9, 3, 11, 8, 2}, true);
  task::TaskRows rows(split, 2, 32, /*shuffle=*/true, 7);
  EXPECT_EQ(rows.LongestRow(), 17);
  int seen = 0;
  for (uint64_t p = 0; p < 40; ++p) {
    rows.Plan(p, 1);
    EXPECT_LE(rows.Positions(0), rows.LongestRow());
    seen = std::max(seen, rows.Positions(0));
  }
  EXPECT_EQ(seen, 17);
  EXPECT_EQ(task::TaskRows(split, 2, 12, false, 0).LongestRow(), 12);  // capped at T
  const LengthSplit fixed({5, 17}, false);
  EXPECT_EQ(task::TaskRows(fixed, 2, 32, false, 0).LongestRow(), 0);  // every row T: T
}

// The token counts of the 2^k equal contiguous shares of `rows` (lengths[rows[i]]): their spread.
int ShareSpread(const std::vector<int>& lengths, const std::vector<std::size_t>& rows, int shares) {
  const std::size_t per = rows.size() / static_cast<std::size_t>(shares);
  int lo = INT_MAX, hi = 0;
  for (std::size_t s = 0; s < rows.size(); s += per) {
    int sum = 0;
    for (std::size_t i = s; i < s + per; ++i) sum += lengths[rows[i]];
    lo = std::min(lo, sum);
    hi = std::max(hi, sum);
  }
  return hi - lo;
}

// Every power-of-two share of a micro-batch (any placement's groups) gets its token count within
// the longest row minus the shortest of every other share; the order is a permutation.
TEST(BalancedOrder, EveryPowerOfTwoShareIsWithinOneRowsSpread) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> len(2, 128);
  int unbalanced = 0;  // the plain order's shares that miss the bound: the test can fail
  for (std::size_t n : {32u, 24u, 16u, 12u, 8u, 7u, 2u, 1u}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<int> lengths(n);
      for (int& l : lengths) l = len(rng);
      std::vector<std::size_t> order(n), plain(n);
      train::BalancedOrder(n, lengths.data(), order.data());
      std::iota(plain.begin(), plain.end(), std::size_t{0});
      std::vector<std::size_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      ASSERT_EQ(sorted, plain) << "n=" << n;
      const int bound = *std::max_element(lengths.begin(), lengths.end()) -
                        *std::min_element(lengths.begin(), lengths.end());
      for (int shares = 2; n % static_cast<std::size_t>(shares) == 0; shares *= 2) {
        EXPECT_LE(ShareSpread(lengths, order, shares), bound) << "n=" << n << " " << shares;
        unbalanced += ShareSpread(lengths, plain, shares) > bound;
      }
    }
  }
  EXPECT_GT(unbalanced, 0);
}

// Training micro-batches hold the epoch permutation's rows, in BalancedOrder.
TEST(TaskRows, TrainingMicroBatchesAreTheEpochsRowsBalanced) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> len(2, 60);
  std::vector<int> lengths(64);
  for (int& l : lengths) l = len(rng);
  const LengthSplit split(lengths, true);
  const int B = 16;
  task::TaskRows rows(split, B, 64, /*shuffle=*/true, 9);
  std::vector<std::size_t> perm(lengths.size());
  train::EpochPermutation(perm.size(), 9, 0, perm.data());
  for (uint64_t p = 0; p < 4; ++p) {
    rows.Plan(p, 1);
    std::vector<std::size_t> got(B), want(perm.begin() + static_cast<std::ptrdiff_t>(p * B),
                                          perm.begin() + static_cast<std::ptrdiff_t>((p + 1) * B));
    for (int r = 0; r < B; ++r) got[static_cast<std::size_t>(r)] = rows.RowAt(0, r);
    std::vector<int> part(B);
    for (int r = 0; r < B; ++r) part[static_cast<std::size_t>(r)] = lengths[want[r]];
    std::vector<std::size_t> order(B);
    train::BalancedOrder(B, part.data(), order.data());
    for (int r = 0; r < B; ++r) EXPECT_EQ(got[r], want[order[r]]) << "p=" << p << " r=" << r;
  }
}

TEST(ClassifyMetrics, ClosedFormValues) {
  const std::vector<int> r = {1, 1, 1, 0, 0, 0}, p = {1, 1, 0, 0, 0, 1};
  EXPECT_DOUBLE_EQ(task::Accuracy(p, r), 4.0 / 6);
  EXPECT_DOUBLE_EQ(task::F1(p, r, 2), 2.0 * 2 / (2 * 2 + 1 + 1));            // tp 2, fp 1, fn 1
  EXPECT_DOUBLE_EQ(task::MatthewsCorrelation(p, r), (2.0 * 2 - 1 * 1) / 9);  // (tp tn - fp fn)/..
  EXPECT_EQ(task::F1({0, 0}, {0, 0}, 2), 0.0);                // no positive anywhere: 0
  EXPECT_EQ(task::MatthewsCorrelation({1, 1}, {0, 1}), 0.0);  // one predicted class: 0
  // Spearman: ranks with ties averaged (x: 1, 2.5, 2.5, 4), Pearson of the ranks.
  const std::vector<double> x = {1, 2, 2, 3}, y = {1, 2, 3, 4};
  const double want = (-1.5 * -1.5 + 0 * -0.5 + 0 * 0.5 + 1.5 * 1.5) /
                      std::sqrt((1.5 * 1.5 * 2) * (1.5 * 1.5 * 2 + 0.5 * 0.5 * 2));
  EXPECT_NEAR(task::Spearman(x, y), want, 1e-15);
  EXPECT_NEAR(task::Pearson(y, y), 1.0, 1e-15);
  EXPECT_DOUBLE_EQ(task::MeanSquaredError({1, 2}, {2, 4}), 2.5);
  EXPECT_DOUBLE_EQ(task::MicroF1({1, 0, 1, 1}, {1, 1, 0, 1}), 2.0 * 2 / (2 * 2 + 1 + 1));
  EXPECT_DOUBLE_EQ(task::SubsetAccuracy({1, 0, 1, 1}, {1, 0, 0, 1}, 2), 0.5);
}

// ---------------------------------------------------------------------------- the command

// make_classify_models.py's directory (task_test_util.h: made once per build). "" on failure.
const std::string& Models() {
  static const std::string dir =
      test::MadeByPeers(kSourceDir + "/tests/data/make_classify_models.py", {}, "classify_models",
                        "llama/model.safetensors");
  return dir;
}

std::string Data(const std::string& f) { return Models() + "/data/" + f; }

using test::Flags;
using test::kLeaveOut;

// run_glue.py's command line for a short run on SST-2-style data: 12 steps of 4 rows a group
// (48 of the 96 rows), a checkpoint every 4, T=64. `more` replaces a flag's value or adds one
// (--set always adds).
std::vector<std::string> TrainArgs(const std::string& model, const std::string& out,
                                   const Flags& more = {}) {
  return test::TaskCommandLine({"classify", "train"},
                               {{"--model_name_or_path", model},
                                {"--train_file", Data("sst2_train.csv")},
                                {"--output_dir", out},
                                {"--do_train", ""},
                                {"--max_seq_length", "64"},
                                {"--per_device_train_batch_size", "4"},
                                {"--learning_rate", "1e-3"},
                                {"--max_steps", "12"},
                                {"--save_steps", "4"},
                                {"--seed", "7"},
                                {"--progress", "quiet"}},
                               more);
}

test::CliResult Cli(const std::vector<std::string>& args) { return RunCli(args, {}, 300); }

void Train(const std::vector<std::string>& args) {
  const test::CliResult r = Cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

std::vector<json> Rows(const std::string& out) { return test::MetricsRows(out); }
std::vector<double> Losses(const std::string& out) { return test::MetricsLosses(out); }

TEST(ClassifyCli, TrainEvaluatePredictWriteRunGluesFiles) {
  ASSERT_FALSE(Models().empty());
  test::TempDir out, eval, pred;
  const test::CliResult t = Cli(TrainArgs(Models() + "/bert", out.path(),
                                          {{"--do_eval", ""},
                                           {"--validation_file", Data("sst2_dev.csv")},
                                           {"--do_predict", ""},
                                           {"--test_file", Data("sst2_test.csv")}}));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const json r = json::parse(Slurp(out.path() + "/eval_results.json"));
  EXPECT_EQ(r["epoch"], 0.5) << r;  // 12 steps x 4 rows of 96
  EXPECT_EQ(r["eval_samples"], 40) << r;
  ASSERT_TRUE(r.contains("eval_accuracy") && r.contains("eval_loss")) << r;
  const json cfg = json::parse(Slurp(out.path() + "/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "BertForSequenceClassification");
  EXPECT_EQ(cfg["id2label"], json({{"0", 0}, {"1", 1}}));
  EXPECT_EQ(cfg["problem_type"], "single_label_classification");
  const std::string predictions = Slurp(out.path() + "/predict_results.txt");
  EXPECT_EQ(predictions.rfind("index\tprediction\n0\t", 0), 0u) << predictions;
  EXPECT_EQ(std::count(predictions.begin(), predictions.end(), '\n'), 25);  // header + 24 rows
  // evaluate and predict on the trained model: the same numbers and rows.
  const test::CliResult e =
      Cli({"classify", "evaluate", "--model_name_or_path", out.path(), "--validation_file",
           Data("sst2_dev.csv"), "--output_dir", eval.path(), "--max_seq_length", "64"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  json re = json::parse(Slurp(eval.path() + "/eval_results.json"));
  json rt = r;
  rt.erase("epoch");
  EXPECT_EQ(re, rt);
  EXPECT_EQ(json::parse(e.out), rt);
  const test::CliResult p =
      Cli({"classify", "predict", "--model_name_or_path", out.path(), "--test_file",
           Data("sst2_test.csv"), "--output_dir", pred.path(), "--max_seq_length", "64"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(Slurp(pred.path() + "/predict_results.txt"), predictions);
}

TEST(ClassifyCli, GlueTasksRegressionMultiLabelAndMnliMismatched) {
  ASSERT_FALSE(Models().empty());
  struct Case {
    const char* name;
    Flags flags;
    std::vector<std::string> keys;
  };
  for (const Case& c : std::vector<Case>{
           {"stsb",
            {{"--train_file", Data("stsb_train.csv")},
             {"--validation_file", Data("stsb_dev.csv")},
             {"--task_name", "stsb"}},
            {"eval_combined_score", "eval_loss", "eval_pearson", "eval_samples", "eval_spearmanr"}},
           {"mrpc",
            {{"--train_file", Data("mrpc_train.jsonl")},
             {"--validation_file", Data("mrpc_dev.jsonl")},
             {"--task_name", "mrpc"}},
            {"eval_accuracy", "eval_combined_score", "eval_f1", "eval_loss", "eval_samples"}},
           {"topics",
            {{"--train_file", Data("topics_train.jsonl")},
             {"--validation_file", Data("topics_dev.jsonl")},
             {"--text_column_names", "text"}},
            {"eval_f1", "eval_loss", "eval_samples"}},
           {"mnli",
            {{"--train_file", Data("mnli_train.csv")},
             {"--validation_file", Data("mnli_dev_matched.csv")},
             {"--validation_mismatched_file", Data("mnli_dev_mismatched.csv")},
             {"--task_name", "mnli"}},
            {"eval_accuracy", "eval_accuracy_mm", "eval_loss", "eval_loss_mm", "eval_samples",
             "eval_samples_mm"}}}) {
    SCOPED_TRACE(c.name);
    test::TempDir out;
    Flags f = c.flags;
    f.push_back({"--do_eval", ""});
    f.push_back({"--max_steps", "4"});
    Train(TrainArgs(Models() + "/bert", out.path(), f));
    const json r = json::parse(Slurp(out.path() + "/eval_results.json"));
    std::vector<std::string> keys;
    for (const auto& [k, v] : r.items())
      if (k != "epoch") keys.push_back(k);
    EXPECT_EQ(keys, c.keys) << r;
  }
}

struct ResumeCase {
  const char* model;
  int accum;
};
class ClassifyResume : public ::testing::TestWithParam<ResumeCase> {};

// Straight to step 12 vs a copy cut back to its step-4 checkpoint and rerun: the same rows and
// weights, bit for bit (dropout masks, the order, dynamic padding and AdamW resume exactly).
TEST_P(ClassifyResume, ResumedFromACheckpointIsBitIdentical) {
  ASSERT_FALSE(Models().empty());
  const ResumeCase c = GetParam();
  test::TempDir straight, resumed;
  const Flags more = {{"--gradient_accumulation_steps", std::to_string(c.accum)}};
  const std::string model = Models() + "/" + c.model;
  Train(TrainArgs(model, straight.path(), more));
  const std::vector<json> rows = Rows(straight.path());
  ASSERT_EQ(rows.size(), 12u);
  fs::remove_all(resumed.path());
  fs::copy(straight.path(), resumed.path(), fs::copy_options::recursive);
  for (const char* step : {"step_00000008", "step_00000012"})
    fs::remove_all(resumed.path() + "/checkpoints/" + step);
  std::ofstream(resumed.path() + "/latest", std::ios::trunc) << "checkpoints/step_00000004";
  fs::remove(resumed.path() + "/model.safetensors");
  {
    std::string cut;
    for (std::size_t i = 0; i < 4; ++i) cut += rows[i].dump() + "\n";
    std::ofstream(resumed.path() + "/metrics.jsonl", std::ios::trunc) << cut;
  }
  const test::CliResult r = Cli(TrainArgs(model, resumed.path(), more));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("step_00000004"), std::string::npos) << "did not resume:\n" << r.err;
  EXPECT_EQ(Rows(resumed.path()), rows);
  EXPECT_TRUE(Slurp(resumed.path() + "/model.safetensors") ==
              Slurp(straight.path() + "/model.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(Models, ClassifyResume,
                         ::testing::Values(ResumeCase{"bert", 1}, ResumeCase{"bert", 2},
                                           ResumeCase{"llama", 2}),
                         [](const auto& info) {
                           return std::string(info.param.model) + "_accum" +
                                  std::to_string(info.param.accum);
                         });

// The same global batch of 8 rows on 1 group, 2 groups with a replica each (inline sync, and
// comm threads with small buckets) and 2 groups sharing one replica: the 2-group runs bit for
// bit, 1 group within 1e-5 (each batch is padded to the whole global batch's longest row, and
// the dropout masks hang on the global row index). Padding every row to --max_seq_length trains
// the same within 1e-5.
TEST(ClassifyCli, PlacementsAndPaddingAgree) {
  ASSERT_FALSE(Models().empty());
  const std::string two = "synthetic:pack:2 numa:1 core:2 pu:1";
  const std::string one_node = "synthetic:pack:1 numa:1 l3:2 core:2 pu:1";
  const std::string model = Models() + "/bert";
  test::TempDir one, inline_sync, comm, shared, padded;
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
  const std::vector<json> rows = Rows(inline_sync.path());
  ASSERT_EQ(rows.size(), 12u);
  EXPECT_EQ(Rows(comm.path()), rows);
  EXPECT_EQ(Rows(shared.path()), rows);
  const std::vector<double> l1 = Losses(one.path()), l2 = Losses(inline_sync.path());
  ASSERT_EQ(l1.size(), 12u);
  for (std::size_t s = 0; s < l1.size(); ++s) {
    EXPECT_NEAR(l2[s], l1[s], 1e-5 * l1[s]) << "step " << s + 1;
  }
  // Padding: without dropout (whose masks hang on the padded length), each batch padded to its
  // longest row trains what padding every row to 64 does, on fewer positions.
  test::TempDir copy, dynamic;
  fs::copy(model, copy.path() + "/m", fs::copy_options::recursive);
  json cfg = json::parse(Slurp(copy.path() + "/m/config.json"));
  cfg["hidden_dropout_prob"] = cfg["attention_probs_dropout_prob"] = 0.0;
  std::ofstream(copy.path() + "/m/config.json", std::ios::trunc) << cfg.dump(2);
  const Flags batch8 = {{"--per_device_train_batch_size", "8"}};
  Train(TrainArgs(copy.path() + "/m", dynamic.path(), batch8));
  Train(TrainArgs(copy.path() + "/m", padded.path(),
                  {{"--per_device_train_batch_size", "8"}, {"--pad_to_max_length", ""}}));
  const std::vector<double> ld = Losses(dynamic.path()), lp = Losses(padded.path());
  ASSERT_EQ(ld.size(), 12u);
  ASSERT_EQ(lp.size(), 12u);
  for (std::size_t s = 0; s < ld.size(); ++s) {
    EXPECT_NEAR(lp[s], ld[s], 1e-5 * ld[s]) << "step " << s + 1 << " (padded to 64)";
  }
  EXPECT_LT(Rows(dynamic.path()).back().at("tokens").get<double>(),
            Rows(padded.path()).back().at("tokens").get<double>());
}

TEST(ClassifyCli, Bf16TrainsWithinItsBoundOfFp32) {
  if (!kernels::DetectBf16().trains()) GTEST_SKIP() << kernels::DetectBf16().Describe();
  ASSERT_FALSE(Models().empty());
  for (const char* name : {"bert", "distilbert", "llama"}) {
    SCOPED_TRACE(name);
    test::TempDir fp32, bf16;
    Train(TrainArgs(Models() + "/" + name, fp32.path()));
    Train(TrainArgs(Models() + "/" + name, bf16.path(), {{"--bf16", ""}}));
    const std::vector<double> a = Losses(fp32.path()), b = Losses(bf16.path());
    ASSERT_EQ(a.size(), 12u);
    ASSERT_EQ(b.size(), 12u);
    // Step 1 is the same weights' loss: only the products' rounding (operands to 8 bits,
    // 2^-9 relative) parts them; measured 0.6-2.6e-5. Then 11 Adam steps at lr 1e-3 let the
    // trajectories part: worst 2.6e-4 (bert), 5.6e-3 (distilbert), 2.2e-3 (llama) measured.
    const auto rel = [&](std::size_t s) { return std::fabs(b[s] - a[s]) / a[s]; };
    double worst = 0;
    for (std::size_t s = 0; s < a.size(); ++s) worst = std::max(worst, rel(s));
    EXPECT_LE(rel(0), 2e-4);
    EXPECT_LE(worst, 1e-2) << "fp32 " << ::testing::PrintToString(a) << "\nbf16 "
                           << ::testing::PrintToString(b);
    EXPECT_GT(worst, 0) << "bf16 ran fp32 products";
  }
}

TEST(ClassifyCli, LoraTrainsAndPredictsWithTheAdapter) {
  ASSERT_FALSE(Models().empty());
  test::TempDir out, pred;
  const test::CliResult t = Cli(TrainArgs(
      Models() + "/distilbert", out.path(),
      {{"--lora_r", "4"}, {"--do_eval", ""}, {"--validation_file", Data("sst2_dev.csv")}}));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const json a = json::parse(Slurp(out.path() + "/adapter_config.json"));
  EXPECT_EQ(a["task_type"], "SEQ_CLS");
  EXPECT_FALSE(fs::exists(out.path() + "/model.safetensors"));
  const test::CliResult p =
      Cli({"classify", "evaluate", "--model_name_or_path", Models() + "/distilbert", "--adapter",
           out.path(), "--validation_file", Data("sst2_dev.csv"), "--output_dir", pred.path(),
           "--max_seq_length", "64"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(json::parse(p.out), json::parse(t.out));
}

// ---------------------------------------------------------------------------- bad input

TEST(ClassifyBadInput, ExitTwoNamingTheProblemAndTheFixWritingNothing) {
  ASSERT_FALSE(Models().empty());
  test::TempDir tmp;
  const std::string na = Write(tmp.path() + "/na.csv", "sentence,label\ngood,1\nNA,0\nbad,0\n");
  const std::string one = Write(tmp.path() + "/one.csv", "sentence,label\na,1\nb,1\n");
  const std::string bad_dev = Write(tmp.path() + "/dev.csv", "sentence,label\ngood,1\nbad,7\n");
  struct Case {
    std::string name;
    Flags flags;
    std::string message, hint;
  };
  const std::vector<Case> cases = {
      {"no label column",
       {{"--label_column_name", "stars"}},
       "has no column 'stars': its columns are sentence, label",
       "--label_column_name"},
      {"unknown task", {{"--task_name", "sst5"}}, "is not a GLUE task", "cola, sst2"},
      {"a GLUE task's columns missing",
       {{"--task_name", "mrpc"}},
       "has no column 'sentence1'",
       "--task_name"},
      {"a missing text",
       {{"--train_file", na}},
       "na.csv, line 3: column 'sentence' is missing",
       "give every row its text"},
      {"one label", {{"--train_file", one}}, "1 distinct label(s)", "--label_column_name"},
      {"a validation label the model lacks",
       {{"--do_eval", ""}, {"--validation_file", bad_dev}},
       "dev.csv, line 3: the label 7 is not one of the model's labels",
       "fix the row"},
      {"do_predict without a test file",
       {{"--do_predict", ""}},
       "--do_predict needs --test_file",
       "--test_file"},
      {"a 3-label classifier for 2 labels",
       {{"--model_name_or_path", Models() + "/bert3"}},
       "is a classifier of 3 outputs; the training file has 2 labels",
       "fine-tune its base model"},
      {"a regression metric for labels",
       {{"--metric_name", "pearson"},
        {"--do_eval", ""},
        {"--validation_file", Data("sst2_dev.csv")}},
       "--metric_name pearson does not score a single_label_classification",
       "accuracy, f1 or matthews_correlation"},
      {"max_seq_length above the positions",
       {{"--max_seq_length", "96"}},
       "--max_seq_length 96 is larger than the model's max_position_embeddings (64)",
       "lower --max_seq_length"},
      {"a missing model",
       {{"--model_name_or_path", tmp.path() + "/none"}},
       "does not exist",
       "nothing is downloaded"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string out = tmp.path() + "/out";
    const test::CliResult r = Cli(TrainArgs(Models() + "/bert", out, c.flags));
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
  // predict / evaluate with a model that is not a trained classifier.
  const test::CliResult p =
      Cli({"classify", "predict", "--model_name_or_path", Models() + "/bert", "--test_file",
           Data("sst2_test.csv"), "--output_dir", tmp.path() + "/p", "--max_seq_length", "64"});
  EXPECT_EQ(p.exit_code, 2) << p.err;
  EXPECT_NE(p.err.find("is not a trained classifier"), std::string::npos) << p.err;
  EXPECT_FALSE(fs::exists(tmp.path() + "/p"));
}

}  // namespace
}  // namespace cputrain
