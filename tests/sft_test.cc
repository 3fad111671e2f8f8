// sft's data pieces without Python (task/sft/sft_data.h; tests/reference/sft_parity.py checks
// them against TRL itself): best-fit-decreasing packing on cases whose bins TRL 0.22.2's
// _pack_bfd gave (run by hand, recorded here), packing per batch of `chunk` rows, and the forms'
// refusals naming file:line, and rows that truncation leaves with no label (issue 43, item 8).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "common/error.h"
#include "space_tokenizer.h"
#include "task/sft/sft_data.h"

namespace cputrain::task {
namespace {

SftRows RowsOfLengths(const std::vector<int>& lengths) {
  SftRows r;
  for (int n : lengths) {
    for (int k = 0; k < n; ++k) {
      r.ids.push_back(static_cast<int32_t>(r.ids.size()));
      r.label.push_back(1);
    }
    r.begin.push_back(r.ids.size());
  }
  return r;
}

using Bins = std::vector<std::vector<std::size_t>>;

// trl.data_utils._pack_bfd(lengths [3, 7, 2, 5, 5, 1], seq_length 8): seq_lengths
// [[7, 1], [5, 3], [5, 2]] from rows [[1, 5], [3, 0], [4, 2]]: equal rooms go to the bin that got
// its room first.
TEST(SftPackBfd, BestFitDecreasingAsTrl) {
  EXPECT_EQ(PackBfd(RowsOfLengths({3, 7, 2, 5, 5, 1}), 8), (Bins{{1, 5}, {3, 0}, {4, 2}}));
  // [8, 8, 1, 7, 2, 6] -> [[8], [8], [7, 1], [6, 2]]: full rows take a bin each.
  EXPECT_EQ(PackBfd(RowsOfLengths({8, 8, 1, 7, 2, 6}), 8), (Bins{{0}, {1}, {3, 2}, {5, 4}}));
}

// datasets' map packs each batch of rows apart: no bin mixes two batches.
TEST(SftPackBfd, EachChunkPackedApart) {
  const SftRows r = RowsOfLengths({3, 7, 2, 5, 5, 1});
  EXPECT_EQ(PackBfd(r, 8, /*chunk=*/3), (Bins{{1}, {0, 2}, {3, 5}, {4}}));
  EXPECT_EQ(PackBfd(r, 8, /*chunk=*/1), (Bins{{0}, {1}, {2}, {3}, {4}, {5}}));
}

class SftRowsTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::string Refusal(const std::string& text, const char* name = "d.jsonl") {
    try {
      for (const JsonRow& r : ReadJsonRows(Write(name, text), "--dataset_path", 0))
        FormOf(r.value, r.where);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() / "sft_test";
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
};

TEST_F(SftRowsTest, ReadsJsonLinesAndArrays) {
  const auto lines = ReadJsonRows(Write("a.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n"),
                                  "--dataset_path", 0);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].where, (dir_ / "a.jsonl").string() + ":3");  // the blank line counts
  const auto array =
      ReadJsonRows(Write("a.json", "[{\"text\": \"a\"}, {\"text\": \"b\"}]"), "--dataset_path", 1);
  ASSERT_EQ(array.size(), 1u);  // the limit
  EXPECT_EQ(FormOf(array[0].value, array[0].where), SftForm::kText);
}

TEST_F(SftRowsTest, RefusesBadRowsNamingTheirLine) {
  EXPECT_NE(Refusal("{\"text\": \"a\"}\n{oops\n").find("d.jsonl:2 is not valid JSON"),
            std::string::npos);
  EXPECT_NE(Refusal("{\"text\": \"a\"}\n[1]\n").find("d.jsonl:2 is not a JSON object"),
            std::string::npos);
  EXPECT_NE(Refusal("{\"conversation\": []}\n").find("d.jsonl:1 has none of"), std::string::npos);
  EXPECT_NE(Refusal("{\"prompt\": \"a\"}\n").find("\"prompt\" without \"completion\""),
            std::string::npos);
  EXPECT_NE(Refusal("{\"messages\": [{\"content\": \"hi\"}]}\n").find("no string \"role\""),
            std::string::npos);
  EXPECT_NE(Refusal("{\"text\": 3}\n").find("\"text\" is missing or not a string"),
            std::string::npos);
  EXPECT_NE(Refusal("\n\n").find("has no rows"), std::string::npos);
}

// Issue 43, item 8: rows whose answers all fall past --max_length (or whose prompt fills it)
// trained with loss 0.0000 and evaluated to eval_loss 0.000000, exit 0: the "no assistant
// tokens" check ran before truncation. Such a row is kept (TRL's adds nothing to a step's loss)
// and counted; a file with no target at all is refused, naming the --max_length that reaches one.
class SftTargetsTest : public SftRowsTest {
 protected:
  // Prompt-completion rows of one-token words (SpaceTokenizer), cut to max_length.
  SftRows Rows(const std::string& text, int max_length) {
    test::SpaceTokenizer tok;
    SftTokenizing tk;
    tk.tokenizer = &tok;
    SftOptions o;
    o.max_length = max_length;
    const std::string path = Write("d.jsonl", text);
    return TokenizeSft(ReadJsonRows(path, "--dataset_path", 0), path, "--dataset_path", tk, o);
  }
  static std::vector<std::vector<std::size_t>> OneRowABin(const SftRows& r) {
    std::vector<std::vector<std::size_t>> bins;
    for (std::size_t i = 0; i < r.rows(); ++i) bins.push_back({i});
    return bins;
  }
  std::string Refusal(const SftRows& r, int max_length) {
    try {
      CheckSftTargets(r, OneRowABin(r), "--eval_dataset_path", max_length);
    } catch (const InputError& e) {
      return std::string(e.what()) + " | " + e.hint();
    }
    return "";
  }
};

TEST_F(SftTargetsTest, AnswersPastMaxLengthAreRefusedWhenNoRowKeepsOne) {
  const std::string rows =
      "{\"prompt\": \"a b c\", \"completion\": \" d e\"}\n"
      "{\"prompt\": \"a b c d\", \"completion\": \" e\"}\n";
  const std::string refused = Refusal(Rows(rows, 3), 3);
  EXPECT_NE(refused.find("--eval_dataset_path"), std::string::npos) << refused;
  EXPECT_NE(refused.find("no row has a label within --max_length 3"), std::string::npos) << refused;
  EXPECT_NE(refused.find("raise --max_length to at least 4"), std::string::npos) << refused;
  EXPECT_NE(refused.find("d.jsonl:1"), std::string::npos) << refused;
  // One more token reaches the first row's answer: the second row is counted, not refused.
  const SftRows r = Rows(rows, 4);
  const SftUntrained u = CheckSftTargets(r, OneRowABin(r), "--dataset_path", 4);
  EXPECT_EQ(u.rows, 1u);
  EXPECT_EQ(u.first, (dir_ / "d.jsonl").string() + ":2");
  EXPECT_EQ(Refusal(Rows(rows, 5), 5), "");
}

// A label on a row's first token is a target only where packing puts the row after another
// document (the previous document's last token predicts it).
TEST_F(SftTargetsTest, FirstTokenLabelCountsOnlyAfterAnotherDocument) {
  SftRows r;
  r.path = "d.jsonl";
  r.ids = {5, 6, 7, 8};
  r.label = {1, 0, 1, 0};
  r.begin = {0, 2, 4};
  r.where = {"d.jsonl:1", "d.jsonl:2"};
  r.first_target = {std::string::npos, std::string::npos};
  EXPECT_NE(Refusal(r, 2).find("give the rows an answer"), std::string::npos);
  const SftUntrained packed = CheckSftTargets(r, {{0, 1}}, "--dataset_path", 4);
  EXPECT_EQ(packed.rows, 1u);
  EXPECT_EQ(packed.first, "d.jsonl:1");
}

// Rows rendered by a chat template whose text shows what it was given; the tokenizer makes a
// token a word, so a row's token count tells which template rendered it.
class SftChatTest : public SftRowsTest {
 protected:
  std::string Tokenize(const std::string& jsonl, const chat::ChatTemplate& tmpl) {
    test::SpaceTokenizer tok;
    SftTokenizing tk;
    tk.tokenizer = &tok;
    tk.chat = &tmpl;
    tk.special = chat::Json::object();
    SftOptions o;
    try {
      const std::string path = Write("chat.jsonl", jsonl);
      const SftRows r =
          TokenizeSft(ReadJsonRows(path, "--dataset_path", 0), path, "--dataset_path", tk, o);
      std::string counts;
      for (std::size_t i = 0; i < r.rows(); ++i)
        counts += std::to_string(r.begin[i + 1] - r.begin[i]) + " ";
      return counts;
    } catch (const InputError& e) {
      return std::string("ERROR: ") + e.what();
    }
  }
};

// Issue 43 item 9: chat_template_kwargs' "messages" silently replaced the row's messages; TRL's
// apply_chat_template call raises TypeError (multiple values for keyword argument 'messages').
TEST_F(SftChatTest, KwargsMessagesIsRefusedNamingTheKey) {
  const chat::ChatTemplate tmpl("{% for m in messages %}{{ m.content }} {% endfor %}", "t");
  EXPECT_EQ(Tokenize("{\"messages\": [{\"role\": \"user\", \"content\": \"a b\"}]}\n", tmpl), "2 ");
  const std::string out = Tokenize(
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a b\"}], "
      "\"chat_template_kwargs\": {\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}}\n",
      tmpl);
  EXPECT_NE(out.find("chat.jsonl:1: chat_template_kwargs has \"messages\""), std::string::npos)
      << out;
}

// Issue 43 item 7: a row with tools is rendered by the "tool_use" template of a named set, as
// transformers' get_chat_template picks it; a row without, by "default"; chat_template_kwargs'
// "chat_template" names one.
TEST_F(SftChatTest, NamedTemplatesChosenPerRow) {
  const chat::ChatTemplate tmpl({{"default", "plain"}, {"tool_use", "with the tools"}}, "t");
  EXPECT_EQ(Tokenize("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n"
                     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                     "\"tools\": [{\"type\": \"function\"}]}\n"
                     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                     "\"chat_template_kwargs\": {\"chat_template\": \"tool_use\"}}\n",
                     tmpl),
            "1 3 3 ");
}

}  // namespace
}  // namespace cputrain::task
