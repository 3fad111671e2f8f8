// Regression tests for issue 43's hostile inputs (round 3) that are not one module's: sft rows that
// truncation leaves with nothing to train (item 8), the temporaries of a killed GGUF export
// (item 14) and the messages that named the wrong thing (item 15). Each test is named after the
// bug it pins and, but for the PairEncoder's, runs the binary as a user would, on a tiny Llama
// and byte-level BPE tokenizer made here (no Python).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/wordpiece.h"
#include "family_shapes.h"
#include "model/checkpoint.h"
#include "model/params.h"
#include "task/classify/features.h"
#include "test_util.h"

namespace cputrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kTimeoutS = 120;

// A Llama of 2 layers of 64 (4 heads over 2), MLP 80, 64 positions, vocabulary 6, with `head`
// (a classifier: 2 labels).
model::Shape TinyLlama(model::Head head = model::Head::kLm) {
  model::Shape s(64, 6, model::Shape::PadVocab(6), 2, 4, 64);
  s.arch = model::Arch::kLlama;
  s.NKV = 2;
  s.F = 80;
  s.tied = false;
  s.head = head;
  if (head == model::Head::kClassify) {
    s.labels = 2;
    s.pad_token = 0;  // a decoder classifier's rows end at their last token that is not it
  }
  return s;
}

// model.bin of `s` with small deterministic weights (norms near 1), written to `path`.
std::string WriteModel(const std::string& path, const model::Shape& s) {
  const model::ParamLayout layout(s);
  std::vector<float> p(layout.total());
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = 0.02f * std::sin(0.7f * static_cast<float>(i));
  model::SaveCheckpoint(path, layout, p.data());
  return path;
}

// A byte-level BPE tokenizer.json of a, b, ab, Ġ and <|endoftext|> (its eos), no chat template.
void WriteBpeTokenizer(const std::string& dir) {
  fs::create_directories(dir);
  const json tok = {
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"\xc4\xa0", 3}}},
        {"merges", {"a b"}}}},
      {"added_tokens",
       {{{"id", 4}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  std::ofstream(dir + "/tokenizer.json") << tok.dump();
  std::ofstream(dir + "/tokenizer_config.json") << json{{"eos_token", "<|endoftext|>"}}.dump();
}

void ExpectInputError(const test::CliResult& r, const std::vector<std::string>& needles) {
  EXPECT_FALSE(r.timed_out) << "the command hung";
  EXPECT_EQ(r.exit_code, 2) << r.err;
  for (const std::string& n : needles)
    EXPECT_NE(r.err.find(n), std::string::npos) << n << "\n" << r.err;
}

// A Hugging Face directory of TinyLlama with the tokenizer, as sft reads it.
class SftDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string bin = WriteModel(tmp_.path() + "/model.bin", TinyLlama());
    const test::CliResult r =
        test::RunCli({"export", "--format", "hf", "--checkpoint", bin, "-o", model_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    WriteBpeTokenizer(model_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = tmp_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  test::CliResult Sft(std::vector<std::string> extra) {
    std::vector<std::string> args = {"sft",
                                     "train",
                                     "--model_name_or_path",
                                     model_,
                                     "--output_dir",
                                     out_,
                                     "--per_device_train_batch_size",
                                     "2",
                                     "--max_steps",
                                     "1",
                                     "--save_steps",
                                     "0",
                                     "--progress",
                                     "quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::RunCli(args, {}, kTimeoutS);
  }
  test::TempDir tmp_;
  std::string model_ = tmp_.path() + "/hf", out_ = tmp_.path() + "/out";
};

// "a b a b a b" is 11 tokens (a, Ġ, b, ...): with --max_length 8 no completion is reached.
constexpr const char* kLongPrompts =
    "{\"prompt\": \"a b a b a b\", \"completion\": \" ab\"}\n"
    "{\"prompt\": \"a b a b a b a\", \"completion\": \" b\"}\n";

// Issue 43, item 8: every row's answer past --max_length trained with loss 0.0000 and exit 0.
TEST_F(SftDir, AnswersPastMaxLengthTrainedWithLossZero) {
  const std::string data = Write("long.jsonl", kLongPrompts);
  const test::CliResult r = Sft({"--dataset_path", data, "--max_length", "8"});
  ExpectInputError(r, {"--dataset_path '" + data + "': no row has a label within --max_length 8",
                       "hint: raise --max_length to at least 12", "long.jsonl:1"});
  EXPECT_FALSE(fs::exists(out_)) << "refused after work began";
}

// ... and an eval file of such rows evaluated to eval_loss 0.000000, exit 0.
TEST_F(SftDir, EvalRowsPastMaxLengthEvaluatedToLossZero) {
  const std::string train = Write("short.jsonl",
                                  "{\"prompt\": \"a\", \"completion\": \" b\"}\n"
                                  "{\"prompt\": \"b\", \"completion\": \" a\"}\n");
  const std::string eval = Write("long.jsonl", kLongPrompts);
  const test::CliResult r =
      Sft({"--dataset_path", train, "--eval_dataset_path", eval, "--do_eval", "--max_length", "8"});
  ExpectInputError(r, {"--eval_dataset_path '" + eval + "': no row has a label"});
  // Where some rows keep a label, the others are counted and the run trains on the rest.
  const std::string mixed = Write(
      "mixed.jsonl", std::string(kLongPrompts) + "{\"prompt\": \"a\", \"completion\": \" b\"}\n");
  const test::CliResult ok =
      Sft({"--dataset_path", mixed, "--max_length", "8", "--overwrite_output_dir"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("warning: 2 of 3 rows of " + mixed +
                        " have no label within --max_length 8 "
                        "(the first: " +
                        mixed + ":1)"),
            std::string::npos)
      << ok.err;
}

// Issue 43, item 15: a busy --output_dir was named train.out_dir, and found only after the data
// was read and tokenized.
TEST_F(SftDir, BusyOutputDirWasNamedTrainOutDir) {
  fs::create_directories(out_);
  const int fd = ::open((out_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string pid = std::to_string(::getpid()) + "\n";
  ASSERT_EQ(::pwrite(fd, pid.data(), pid.size(), 0), static_cast<ssize_t>(pid.size()));
  const std::string data = Write("d.jsonl", "{\"text\": \"a b\"}\n");
  const test::CliResult r = Sft({"--dataset_path", data, "--max_length", "8"});
  ::close(fd);
  ExpectInputError(r, {"--output_dir '" + out_ + "' is in use by another run (pid " +
                           std::to_string(::getpid()) + ")",
                       "hint: wait for that run to end, stop it, or choose another --output_dir"});
  EXPECT_EQ(r.err.find("train.out_dir"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("d.jsonl: 1"), std::string::npos) << "the data was read first: " << r.err;
}

// A pid no process has: a child's, reaped.
long DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// Issue 43, item 14: kill -9 during `export --format gguf` left NAME.gguf.tmp.PID, and no later
// export removed it (7 of them, 102 MB). The next export of that name removes its dead writers'
// temporaries; a live process's, and other files', stay.
TEST(HostileRound3, GgufTemporariesOfAKilledExportPiledUp) {
  test::TempDir tmp;
  const std::string bin = WriteModel(tmp.path() + "/model.bin", TinyLlama());
  WriteBpeTokenizer(tmp.path() + "/tok");
  const std::string out = tmp.path() + "/m.gguf";
  const std::string dead = fmt::format("{}.tmp.{}", out, DeadPid());
  const std::string live = fmt::format("{}.tmp.{}", out, ::getpid());  // this test is alive
  const std::string other = fmt::format("{}/n.gguf.tmp.{}", tmp.path(), DeadPid());
  for (const std::string& f : {dead, live, other}) std::ofstream(f) << "a partial file";
  const test::CliResult r = test::RunCli({"export", "--format", "gguf", "--checkpoint", bin,
                                          "--tokenizer", tmp.path() + "/tok", "-o", out},
                                         {}, kTimeoutS);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(out));
  EXPECT_FALSE(fs::exists(dead)) << "a killed export's temporary is left";
  EXPECT_TRUE(fs::exists(live)) << "a live writer's temporary was removed";
  EXPECT_TRUE(fs::exists(other)) << "another file's temporary was removed";
}

// Issue 43, item 15: `-o .` (a directory) failed at the rename after the whole file was written,
// "Device or resource busy", with the hint "check free disk space" (exit 1).
TEST(HostileRound3, ExportToADirectoryWasDeviceOrResourceBusy) {
  test::TempDir tmp;
  const std::string bin = WriteModel(tmp.path() + "/model.bin", TinyLlama());
  WriteBpeTokenizer(tmp.path() + "/tok");
  for (const std::string& dir : {tmp.path(), tmp.path() + "/", std::string(".")}) {
    const test::CliResult r = test::RunCli({"export", "--format", "gguf", "--checkpoint", bin,
                                            "--tokenizer", tmp.path() + "/tok", "-o", dir},
                                           {}, kTimeoutS);
    ExpectInputError(r, {"cannot write '" + dir + "': it is a directory",
                         "hint: give the path of a file to write"});
    EXPECT_EQ(r.err.find("disk space"), std::string::npos) << r.err;
  }
  const test::CliResult llmc = test::RunCli(
      {"export", "--format", "llmc", "--checkpoint", bin, "-o", tmp.path()}, {}, kTimeoutS);
  EXPECT_EQ(llmc.exit_code, 2) << llmc.err;
}

// Issue 43, item 15: generate on a classifier hinted `qa predict`.
TEST(HostileRound3, GenerateOnAClassifierHintedQaPredict) {
  test::TempDir tmp;
  const std::string bin = WriteModel(tmp.path() + "/model.bin", TinyLlama(model::Head::kClassify));
  const test::CliResult r =
      test::RunCli({"generate", "--checkpoint", bin, "--tokens", "1"}, {}, kTimeoutS);
  ExpectInputError(r, {"not a language model",
                       "hint: classify texts with it: cputrain-numa "
                       "classify predict"});
  EXPECT_EQ(r.err.find("qa predict"), std::string::npos) << r.err;
}

// Issue 43, item 15: `export --format gguf` of BERT was refused for its tokenizer (no
// tokenizer.json, or a WordPiece one, named by path) and never said BERT has no GGUF export.
TEST(HostileRound3, GgufOfBertWasRefusedForItsTokenizer) {
  test::TempDir tmp;
  const std::string bin =
      WriteModel(tmp.path() + "/bert.bin", test::SmallEncoder(model::Arch::kBert));
  std::ofstream(tmp.path() + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n";
  for (const std::vector<std::string>& tokenizer :
       {std::vector<std::string>{}, std::vector<std::string>{"--tokenizer", tmp.path()}}) {
    std::vector<std::string> args = {
        "export", "--format", "gguf", "--checkpoint", bin, "-o", tmp.path() + "/b.gguf"};
    args.insert(args.end(), tokenizer.begin(), tokenizer.end());
    const test::CliResult r = test::RunCli(args, {}, kTimeoutS);
    ExpectInputError(r, {"a bert model with a task head has no GGUF export",
                         "hint: export it with --format hf"});
    EXPECT_EQ(r.err.find("tokenizer"), std::string::npos) << r.err;
  }
}

// Issue 43, item 15: --max_seq_length 4 was refused for single texts as leaving no room beside
// "4 special tokens": BERT puts 2 around one text ([CLS] a [SEP]) and 3 around a pair; a
// tokenizer.json's frame once around a text, twice around a pair.
TEST(HostileRound3, MaxSeqLength4ClaimedFourSpecialTokensForASingleText) {
  test::TempDir tmp;
  std::ofstream(tmp.path() + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n";
  const auto bert = data::WordPieceTokenizer::Load(tmp.path() + "/vocab.txt");
  const auto refusal = [&](int max_length, bool pair) -> std::string {
    try {
      const task::PairEncoder e(*bert, max_length);
      std::vector<std::int32_t> ids;
      const std::string_view b = "world";
      e.Encode("hello world", pair ? &b : nullptr, &ids);
      EXPECT_LE(ids.size(), static_cast<std::size_t>(max_length));
    } catch (const InputError& e) {
      return std::string(e.what()) + " | " + e.hint();
    }
    return "";
  };
  EXPECT_EQ(refusal(4, false), "");
  EXPECT_EQ(refusal(3, false), "");  // [CLS] hello [SEP]
  EXPECT_EQ(refusal(4, true), "");   // [CLS] hello [SEP] world [SEP]
  EXPECT_NE(refusal(2, false).find("--max_seq_length 2 leaves no room for the text beside the "
                                   "tokenizer's 2 special tokens around one text"),
            std::string::npos)
      << refusal(2, false);
  EXPECT_NE(refusal(3, true).find("--max_seq_length 3 leaves no room for the texts of a pair "
                                  "beside the tokenizer's 3 special tokens around a pair"),
            std::string::npos)
      << refusal(3, true);
}

}  // namespace
}  // namespace cputrain
