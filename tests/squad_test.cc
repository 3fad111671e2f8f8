// SQuAD's data side (src/task) against tests/reference/squad_reference.py, which runs
// transformers' BertTokenizerFast through run_qa.py's preprocessing, utils_qa.py's
// post-processing and the official evaluate-v1.1.py / evaluate-v2.0.py on crafted inputs (T=48,
// doc_stride=16: many windows, answers at and across window edges, unanswerable questions,
// accents, CJK, emoji, leading Unicode spaces, several gold answers):
//   - `qa features --dump` equals the reference's features field for field, read from the
//     SQuAD JSON, Hugging Face JSON Lines and a JSON list, training and validation features;
//   - Postprocess + WritePredictions on the reference's random logits: predictions.json and
//     null_odds.json identical, nbest texts and logits identical, probabilities within 1e-6;
//   - normalize_answer, EM and F1 (v1.1 and v2.0) of crafted pairs, and `qa evaluate` on crafted
//     predictions, within 1e-9;
//   - each bad input exits 2 naming the file and the fix.
#include "task/qa/squad.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "data/tokenizer.h"
#include "task/qa/squad_eval.h"
#include "task/qa/squad_features.h"
#include "test_util.h"
#include "text/python_text.h"

namespace cputrain::task {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::cputrain::test::RunCli;
using ::cputrain::test::Slurp;

const std::string kSourceDir = CPUTRAIN_SOURCE_DIR;
const std::string kPeersPython = CPUTRAIN_PEERS_PYTHON;
constexpr int kT = 48, kStride = 16;

// The reference's files, made once per test binary run; "" if it could not run.
const std::string& RefDir() {
  static test::TempDir* dir = new test::TempDir();
  static const std::string path = [] {
    if (!fs::exists(kPeersPython)) {
      ADD_FAILURE() << kPeersPython << " is missing: run scripts/install-deps.sh --peers";
      return std::string();
    }
    SubprocessOptions opts;
    opts.env = {"OMP_NUM_THREADS=1", "TOKENIZERS_PARALLELISM=false", "HF_HUB_OFFLINE=1",
                "TRANSFORMERS_OFFLINE=1", "PYTHONDONTWRITEBYTECODE=1"};
    const SubprocessResult r = RunSubprocess(
        {kPeersPython, kSourceDir + "/tests/reference/squad_reference.py", dir->path()}, opts);
    if (r.exit_code != 0) {
      ADD_FAILURE() << "squad_reference.py failed (" << r.exit_code << "):\n" << r.err;
      return std::string();
    }
    return dir->path();
  }();
  return path;
}

std::vector<json> JsonLines(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(Slurp(path));
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// The first difference between two feature lists, "" if none.
std::string FirstDifference(const std::vector<json>& ours, const std::vector<json>& ref) {
  if (ours.size() != ref.size()) {
    return "features: " + std::to_string(ours.size()) + " vs " + std::to_string(ref.size());
  }
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (ours[i].size() != ref[i].size()) return "feature " + std::to_string(i) + ": other keys";
    for (const auto& [key, value] : ref[i].items()) {
      if (!ours[i].contains(key) || ours[i][key] != value) {
        return "feature " + std::to_string(i) + " (" + ref[i].value("example_id", "") + ") '" +
               key + "':\n ours " + (ours[i].contains(key) ? ours[i][key].dump() : "missing") +
               "\n  ref " + value.dump();
      }
    }
  }
  return "";
}

TEST(SquadFeatures, EqualRunQaForEveryLayoutAndKind) {
  const std::string ref = RefDir();
  ASSERT_FALSE(ref.empty());
  test::TempDir out;
  for (const std::string v : {"v1", "v2"}) {
    for (const std::string kind : {"train", "validation"}) {
      const std::vector<json> expected = JsonLines(ref + "/features_" + v + "_" + kind + ".jsonl");
      ASSERT_GT(expected.size(), 100u);
      for (const std::string input : {".json", ".jsonl", "_list.json"}) {
        const std::string dump = out.path() + "/" + v + kind + ".jsonl";
        const test::CliResult r =
            RunCli({"qa", "features", "--tokenizer", ref + "/tokenizer", "--data",
                    ref + "/" + v + input, "--max_seq_length", std::to_string(kT), "--doc-stride",
                    std::to_string(kStride), "--" + kind, "--dump", dump, "--json"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const json counts = json::parse(r.out);
        EXPECT_EQ(counts["features"], expected.size());
        // The one answer the reference made inconsistent: counted and warned about.
        EXPECT_EQ(counts["answer_mismatches"], 1) << r.out;
        EXPECT_NE(r.err.find("differ from the context"), std::string::npos) << r.err;
        EXPECT_EQ(FirstDifference(JsonLines(dump), expected), "") << v << input << " " << kind;
      }
    }
  }
}

TEST(SquadFeatures, QuestionTooLongOrStrideTooLargeRefused) {
  const std::string ref = RefDir();
  ASSERT_FALSE(ref.empty());
  // T=8 leaves the first, 5-token question no context token; at T=48 its windows hold 40
  // context tokens, and the 27-token long questions' 18: not more than a stride of 18.
  test::CliResult r = RunCli({"qa", "features", "--tokenizer", ref + "/tokenizer", "--data",
                              ref + "/v1.json", "--max_seq_length", "8"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("leaves no room"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint: raise --max_seq_length"), std::string::npos) << r.err;
  r = RunCli({"qa", "features", "--tokenizer", ref + "/tokenizer", "--data", ref + "/v1.json",
              "--max_seq_length", "48", "--doc_stride", "18"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("not more than --doc_stride 18"), std::string::npos) << r.err;
}

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = Slurp(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

TEST(SquadPostprocess, EqualsUtilsQa) {
  const std::string ref = RefDir();
  ASSERT_FALSE(ref.empty());
  const std::unique_ptr<data::Tokenizer> tok = data::MakeTokenizer(ref + "/tokenizer");
  const json options = json::parse(Slurp(ref + "/post_options.json"));
  test::TempDir out;
  int compared = 0;
  for (const std::string v : {"v1", "v2"}) {
    const SquadData data = ReadSquad(ref + "/" + v + ".json");
    FeatureOptions fo;
    fo.max_seq_length = kT;
    fo.doc_stride = kStride;
    const QaFeatures f = MakeQaFeatures(data.examples, *tok, BertSpecialIds(*tok), fo);
    const std::vector<float> logits = ReadFloats(ref + "/logits_" + v + ".f32");
    ASSERT_EQ(logits.size(), 2 * f.size() * kT);
    for (const auto& [key, o] : options.items()) {
      PostprocessOptions po;
      po.version_2_with_negative = v == "v2";
      po.n_best_size = o["n_best"];
      po.max_answer_length = o["max_len"];
      po.null_score_diff_threshold = o["threshold"];
      const QaPredictions p =
          Postprocess(data.examples, f, logits.data(), logits.data() + f.size() * kT, po);
      const std::string dir = out.path() + "/" + v + key;
      WritePredictions(p, dir, "", po.version_2_with_negative);
      const std::string rdir = ref + "/post_" + v + "_" + key;
      EXPECT_EQ(json::parse(Slurp(dir + "/predictions.json")),
                json::parse(Slurp(rdir + "/predictions.json")))
          << v << key;
      if (po.version_2_with_negative) {
        EXPECT_EQ(json::parse(Slurp(dir + "/null_odds.json")),
                  json::parse(Slurp(rdir + "/null_odds.json")))
            << v << key;
      }
      const json ours = json::parse(Slurp(dir + "/nbest_predictions.json"));
      const json theirs = json::parse(Slurp(rdir + "/nbest_predictions.json"));
      ASSERT_EQ(ours.size(), theirs.size());
      for (const auto& [id, list] : theirs.items()) {
        ASSERT_EQ(ours[id].size(), list.size()) << id;
        for (std::size_t k = 0; k < list.size(); ++k) {
          EXPECT_EQ(ours[id][k]["text"], list[k]["text"]) << id << " " << k;
          EXPECT_EQ(ours[id][k]["start_logit"], list[k]["start_logit"]) << id << " " << k;
          EXPECT_EQ(ours[id][k]["end_logit"], list[k]["end_logit"]) << id << " " << k;
          EXPECT_NEAR(ours[id][k]["probability"].get<double>(),
                      list[k]["probability"].get<double>(), 1e-6)
              << id << " " << k;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 500);
}

TEST(SquadMetrics, NormalizeEmF1EqualOfficialScripts) {
  const std::string ref = RefDir();
  ASSERT_FALSE(ref.empty());
  const json m = json::parse(Slurp(ref + "/metrics.json"));
  for (const json& c : m["normalize"]) {
    EXPECT_EQ(NormalizeAnswer(c[0].get<std::string>()), c[1].get<std::string>()) << c[0];
  }
  for (const json& c : m["pairs"]) {
    const std::string p = c[0], g = c[1];
    EXPECT_EQ(ExactMatch(p, g), c[2].get<bool>()) << p << " | " << g;
    EXPECT_NEAR(F1V1(p, g), c[3].get<double>(), 1e-9) << p << " | " << g;
    EXPECT_NEAR(F1V2(p, g), c[4].get<double>(), 1e-9) << p << " | " << g;
  }
  EXPECT_GT(m["pairs"].size(), 100u);
}

void ExpectScores(const test::CliResult& r, const json& expected) {
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json ours = json::parse(r.out);
  ASSERT_EQ(ours.size(), expected.size()) << r.out << "\nvs\n" << expected.dump();
  for (const auto& [key, value] : expected.items()) {
    ASSERT_TRUE(ours.contains(key)) << key;
    EXPECT_NEAR(ours[key].get<double>(), value.get<double>(), 1e-9) << key;
  }
}

TEST(SquadMetrics, EvaluateCommandEqualsOfficialScripts) {
  const std::string ref = RefDir();
  ASSERT_FALSE(ref.empty());
  const json m = json::parse(Slurp(ref + "/metrics.json"));
  const test::CliResult v1 = RunCli({"qa", "evaluate", "--data", ref + "/v1.json", "--predictions",
                                     ref + "/metric_preds_v1.json"});
  ExpectScores(v1, m["v1"]);
  // evaluate-v1.1.py prints one line with json.dumps' separators.
  EXPECT_EQ(v1.out.rfind("{\"exact_match\": ", 0), 0u) << v1.out;
  EXPECT_NE(v1.err.find("have no prediction"), std::string::npos) << v1.err;
  ExpectScores(RunCli({"qa", "evaluate", "--data", ref + "/v2.jsonl", "--predictions",
                       ref + "/metric_preds_v2.json", "--version_2_with_negative"}),
               m["v2"]);
  ExpectScores(RunCli({"qa", "evaluate", "--data", ref + "/v2.json", "--predictions",
                       ref + "/metric_preds_v2.json", "--version-2-with-negative", "--na_prob_file",
                       ref + "/metric_na_v2.json"}),
               m["v2_na"]);
  ExpectScores(RunCli({"qa", "evaluate", "--data", ref + "/v2.json", "--predictions",
                       ref + "/metric_preds_v2.json", "--version_2_with_negative", "--na-prob-file",
                       ref + "/metric_na_v2.json", "--na_prob_thresh", "0.5"}),
               m["v2_na_thresh"]);
}

// Each bad input: exit 2, the file named, the problem, and a hint.
TEST(SquadReader, BadInputsExitTwoWithFileAndFix) {
  test::TempDir dir;
  const std::string ctx = "Caf\u00e9 in Z\u00fcrich.";
  auto rec = [&](const std::string& id, const std::string& answers) {
    return "{\"id\": \"" + id + "\", \"title\": \"t\", \"context\": \"" + ctx +
           "\", \"question\": \"q?\", \"answers\": " + answers + "}";
  };
  const std::string ok = "{\"text\": [\"Z\u00fcrich\"], \"answer_start\": [8]}";
  struct Case {
    std::string name, content, message;
  };
  const std::vector<Case> cases = {
      {"not_json.json", "{\"data\": [", "not JSON"},
      {"empty.json", "", "not JSON"},
      {"no_data.json", "{\"version\": 1}", "without a \"data\" list"},
      {"no_questions.json", "{\"data\": []}", "holds no questions"},
      {"missing_key.jsonl",
       "{\"id\": \"a\", \"context\": \"c\", \"answers\": {\"text\": [], "
       "\"answer_start\": []}}\n",
       "line 1 (id 'a'): has no \"question\""},
      {"bad_line.jsonl", rec("a", ok) + "\n{oops\n", "line 2: is not JSON"},
      {"out_of_range.jsonl", rec("a", "{\"text\": [\"Z\u00fcrich\"], \"answer_start\": [10]}"),
       "answer_start 10 with the answer's 6 characters"},
      // append(), not "[" + string: GCC 12 warns falsely (-Wrestrict) on the latter.
      {"negative.json",
       std::string("[").append(rec("a", "{\"text\": [\"x\"], \"answer_start\": [-1]}")).append("]"),
       "record 0 (id 'a'): answer_start -1"},
      // Issue 32: reported as -9223372036854775808 (read as int64).
      {"huge_start.jsonl", rec("a", "{\"text\": [\"x\"], \"answer_start\": [9223372036854775808]}"),
       "answer_start 9223372036854775808 with the answer's 1 characters ('x') ends outside"},
      {"empty_answer.jsonl", rec("a", "{\"text\": [\"\"], \"answer_start\": [0]}"),
       "answer's text is empty"},
      {"lengths.jsonl", rec("a", "{\"text\": [\"x\", \"y\"], \"answer_start\": [0]}"),
       "2 texts but 1 answer_starts"},
      {"duplicate.jsonl", rec("a", ok) + "\n" + rec("a", ok) + "\n",
       "line 2 (id 'a'): id 'a' is also the id of line 1"},
      {"impossible.json",
       "{\"data\": [{\"title\": \"t\", \"paragraphs\": [{\"context\": \"abc\", \"qas\": [{\"id\": "
       "\"q\", \"question\": \"?\", \"is_impossible\": true, \"answers\": [{\"text\": \"a\", "
       "\"answer_start\": 0}]}]}]}]}",
       "data[0].paragraphs[0].qas[0] (id 'q'): is_impossible is true"},
      {"type.json",
       "{\"data\": [{\"title\": \"t\", \"paragraphs\": [{\"context\": 5, \"qas\": []}]}]}",
       "data[0].paragraphs[0]: \"context\" is number, not a string"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.path() + "/" + c.name;
    std::ofstream(path) << c.content;
    const test::CliResult r = RunCli({"qa", "evaluate", "--data", path, "--predictions", path});
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find("error: " + path + ": "), std::string::npos) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find("\nhint: "), std::string::npos) << c.name << ": " << r.err;
  }
  // Issue 32: bytes that are not UTF-8 are refused with where they are (an overlong "i" on the
  // second line), before any JSON is parsed.
  const std::string latin = dir.path() + "/overlong.jsonl";
  std::ofstream(latin) << rec("a", ok) << "\n{\"id\": \"caf\xC1\xA9\"}\n";
  const test::CliResult u = RunCli({"qa", "evaluate", "--data", latin, "--predictions", latin});
  EXPECT_EQ(u.exit_code, 2) << u.err;
  EXPECT_NE(u.err.find("error: '" + latin + "' is not valid UTF-8 at byte " +
                       std::to_string(rec("a", ok).size() + 12) +
                       " (line 2, column 12): 0xC1 0xA9 is an overlong encoding of U+0069"),
            std::string::npos)
      << u.err;
  // A good file read correctly: characters, not bytes (é and ü are two bytes each).
  const std::string good = dir.path() + "/good.jsonl";
  std::ofstream(good) << rec("a", ok) << "\n\n" << rec("b", "{\"text\": [], \"answer_start\": []}");
  const SquadData d = ReadSquad(good);
  ASSERT_EQ(d.examples.size(), 2u);
  EXPECT_EQ(d.layout, "hf-jsonl");
  EXPECT_EQ(d.answer_mismatches, 0);
  EXPECT_EQ(d.unanswerable, 1);
  const ByteSpan b = AnswerBytes(d.examples[0], 0);
  EXPECT_EQ(d.examples[0].context.substr(b.begin, b.end - b.begin), "Z\u00fcrich");
  // Predictions: malformed, and missing ones under v2.0 scoring.
  const std::string preds = dir.path() + "/preds.json";
  std::ofstream(preds) << "{\"a\": 3}";
  test::CliResult r = RunCli({"qa", "evaluate", "--data", good, "--predictions", preds});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(preds + ": id 'a': the answer is number"), std::string::npos) << r.err;
  std::ofstream(preds) << "{\"a\": \"Zurich\"}";
  r = RunCli(
      {"qa", "evaluate", "--data", good, "--predictions", preds, "--version_2_with_negative"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no prediction for question 'b'"), std::string::npos) << r.err;
  // v1.1 scoring of a question without answers (evaluate-v1.1.py fails on max([])).
  std::ofstream(preds) << "{\"a\": \"Zurich\", \"b\": \"\"}";
  r = RunCli({"qa", "evaluate", "--data", good, "--predictions", preds});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("hint: for SQuAD v2.0 data"), std::string::npos) << r.err;
}

TEST(PythonText, StrMethodsOnUnicode) {
  EXPECT_EQ(PyLstrip("\u00a0\u3000\t x "), "x ");
  EXPECT_EQ(PyLower("\u0130\u03a3\u0391\u03a3 \u03a3"), "i\u0307\u03c3\u03b1\u03c2 \u03c3");
  EXPECT_EQ(PySplit(" a\u2028b\u0085c\u00a0 ").size(), 3u);
  EXPECT_EQ(CountCodePoints("\u00e9\u5317\U0001F600"), 3u);
  EXPECT_EQ(CharsToBytes("\u00e9\u5317\U0001F600", 2), 5u);
  EXPECT_EQ(CharsToBytes("ab", 4), 4u);
}

}  // namespace
}  // namespace cputrain::task
