// sft's data pieces without Python (task/sft/sft_data.h; tests/reference/sft_parity.py checks
// them against TRL itself): best-fit-decreasing packing on cases whose bins TRL 0.22.2's
// _pack_bfd gave (run by hand, recorded here), packing per batch of `chunk` rows, and the forms'
// refusals naming file:line.
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
