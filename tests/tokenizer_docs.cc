#include "tokenizer_docs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "common/subprocess.h"
#include "test_util.h"

namespace cputrain::test {

std::string Escaped(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += c < 0x20 || c == 0x7F ? fmt::format("\\x{:02x}", c) : std::string(1, char(c));
    }
  }
  return out;
}

std::vector<std::string> EdgeCases() {
  return {
      "",
      " ",
      "  ",
      "\n",
      "\n\n\n",
      " \n ",
      "\t",
      "a",
      "Hello world",
      "Hello  world",
      "Hello   world   ",
      "trailing space ",
      "trailing spaces   ",
      "  leading spaces",
      "\tleading tab",
      "tab\tin\t\tthe middle",
      "line\nbreaks\n\nand\n\n\nruns\n",
      "windows\r\nline\r\nendings\r\n",
      "mixed \t\n \t\n  x",
      "space before newline \nnext",
      "newline then space\n next",
      "\u00a0nbsp\u00a0 \u00a0x",
      "ideographic\u3000\u3000space\u3000",
      "line separator\u2028para\u2029end",
      "bom\ufeffinside and \ufeff at start",
      "nel\u0085is whitespace in tiktoken, not in JS",
      "vertical\vtab and form\ffeed",
      "it's we're they've I'm you'll he'd can't",
      "IT'S WE'RE THEY'VE I'M YOU'LL HE'D CAN'T",
      "'s 't 're 've 'm 'll 'd",
      "'S 'T 'RE 'VE 'M 'LL 'D",
      "''s '''re x'sy 'sss 'lll 'rer 'r 'v 'l",
      "' s' ' 's",
      "end with apostrophe'",
      "'",
      "1234567890 12 345 6.78 9,000",
      "abc123def 456ghi",
      " 1 2  3   4",
      "...!!!???",
      " ... !!! ???",
      "a.b,c;d:e",
      "(parenthesised) [bracketed] {braced}",
      "email@example.com https://x.y/z?a=b&c=d",
      "<|endoftext|>",
      "Ωμέγα Ελλάδα",
      "Привет, мир!",
      "مرحبا بالعالم",
      "שלום עולם",
      "नमस्ते दुनिया",
      "สวัสดีชาวโลก",
      "你好，世界！",
      "こんにちは世界",
      "안녕하세요 세계",
      "e\u0301 combining acute, n\u0303 tilde, a\u0308\u0304 two marks",
      "😀",
      "😀😀😀",
      " 😀 😀",
      "👩‍💻 👨‍👩‍👧‍👦",
      "🏳️‍🌈 🏴‍☠️",
      "🇺🇸🇬🇧🇯🇵",
      "👍🏿👍🏻",
      "1️⃣2️⃣#️⃣*️⃣",
      "©®™",
      "½ ⅓ ² ³ Ⅻ",
      "١٢٣ ४५६ ๗๘๙ ０１２",
      "𝐀𝐁𝐂 𐌰𐌱𐌲 𓀀",
      "\u200b\u200c\u200d\u2060",
      "x\u00ady",
      std::string(300, 'a'),
      std::string(200, ' ') + "x",
      std::string(150, '!'),
      "y" + std::string(100, '\n'),
      "一二三四五六七八九十一二三四五六七八九十一二三四五六七八九十一二三四五六七八九十",
  };
}

std::vector<std::string> RandomDocuments(int count, unsigned seed) {
  const std::vector<std::string> palette = {
      " ",      " ", " ",       "\t", "\n", "\r",     "\u00a0", "\u3000", "\u2028", "\ufeff",
      "\u0085", "'", "'",       "s",  "t",  "r",      "e",      "v",      "m",      "l",
      "d",      "S", "a",       "Z",  "1",  "9",      "½",      ".",      ",",      "!",
      "\"",     "é", "e\u0301", "中", "😀",  "\u200d", "🇺",      "Ж",      "ا",      "\u0301",
      "ｱ",      "_", "-",       "٣",  "\v", "\f"};
  std::mt19937 rng(seed);
  std::vector<std::string> docs;
  for (int i = 0; i < count; ++i) {
    int len = static_cast<int>(rng() % 40);
    std::string d;
    for (int j = 0; j < len; ++j) d += palette[rng() % palette.size()];
    docs.push_back(d);
  }
  return docs;
}

std::vector<std::string> ReferenceDocuments() {
  std::vector<std::string> docs = EdgeCases();
  std::string corpus = Slurp(std::string(CPUTRAIN_SOURCE_DIR) + "/tests/data/tokenizer_corpus.txt");
  EXPECT_GT(corpus.size(), 1000u) << "tests/data/tokenizer_corpus.txt is missing or short";
  docs.push_back(corpus);
  std::istringstream lines(corpus);
  for (std::string line; std::getline(lines, line);) docs.push_back(line);
  for (std::string& d : RandomDocuments(600, 20240520)) docs.push_back(std::move(d));
  return docs;
}

nlohmann::json RunReferenceMaker(const std::string& python, const std::string& script,
                                 const std::vector<std::string>& args, const std::string& dir,
                                 const std::vector<std::string>& docs) {
  if (!std::filesystem::exists(python)) {
    ADD_FAILURE() << python << " is missing: the reference (Hugging Face tokenizers) "
                  << "cannot run. Run scripts/install-deps.sh --peers (then reconfigure).";
    return nullptr;
  }
  const std::string docs_path = dir + "/docs.json", out = dir + "/out.json";
  std::ofstream(docs_path) << nlohmann::json(docs).dump();
  std::vector<std::string> argv = {python, script};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(docs_path);
  argv.push_back(out);
  const SubprocessResult p = RunSubprocess(argv);
  if (p.exit_code != 0) {
    ADD_FAILURE() << script << " failed (" << p.exit_code << "):\n" << p.err;
    return nullptr;
  }
  nlohmann::json result = nlohmann::json::parse(Slurp(out));
  std::fprintf(stderr, "note: reference %s\n", result["versions"].dump().c_str());
  return result;
}

namespace {

// What a made reference depends on: the maker and its sibling scripts, the arguments, the
// documents, and the Python environment (its path and the stamp scripts/peers-env.sh keeps in it:
// the requirements file's SHA-256 it was made from).
std::string ReferenceKey(const std::string& python, const std::string& script,
                         const std::vector<std::string>& args,
                         const std::vector<std::string>& docs) {
  namespace fs = std::filesystem;
  std::string key = python + '\n' + script + '\n';
  std::vector<fs::path> scripts;
  for (const auto& e : fs::directory_iterator(fs::path(script).parent_path())) {
    if (e.path().extension() == ".py") scripts.push_back(e.path());
  }
  std::sort(scripts.begin(), scripts.end());
  for (const fs::path& p : scripts) key += p.string() + '\n' + Slurp(p.string());
  const fs::path stamp = fs::path(python).parent_path().parent_path() / ".requirements.sha256";
  if (fs::exists(stamp)) key += Slurp(stamp.string());
  for (const std::string& a : args) key += '\n' + a;
  key += nlohmann::json(docs).dump();
  return fmt::format("{}-{:016x}", fs::path(script).stem().string(), std::hash<std::string>{}(key));
}

}  // namespace

MadeReference RunReferenceMakerOnce(const std::string& python, const std::string& script,
                                    const std::vector<std::string>& args,
                                    const std::vector<std::string>& docs) {
  namespace fs = std::filesystem;
  const fs::path cache = fs::path(CPUTRAIN_BINARY_DIR) / "tests" / "reference-cache";
  const fs::path final_dir = cache / ReferenceKey(python, script, args, docs);
  MadeReference made{final_dir.string(), nullptr};
  if (fs::exists(final_dir / "out.json")) {
    made.out = nlohmann::json::parse(Slurp((final_dir / "out.json").string()));
    return made;
  }
  fs::create_directories(cache);
  const fs::path mine = final_dir.string() + fmt::format(".tmp{}", getpid());
  fs::remove_all(mine);
  fs::create_directories(mine);
  std::vector<std::string> with_dir = {mine.string()};
  with_dir.insert(with_dir.end(), args.begin(), args.end());
  const nlohmann::json out = RunReferenceMaker(python, script, with_dir, mine.string(), docs);
  if (out.is_null()) return made;
  std::error_code ec;
  fs::rename(mine, final_dir, ec);
  if (ec) fs::remove_all(mine, ec);  // another process published first: read theirs
  made.out = nlohmann::json::parse(Slurp((final_dir / "out.json").string()));
  return made;
}

SubprocessResult Tokenize(const std::vector<std::string>& args, const std::string& input) {
  std::vector<std::string> argv = {CliPath(), "tokenize"};
  argv.insert(argv.end(), args.begin(), args.end());
  SubprocessOptions o;
  o.stdin_text = input;
  o.timeout_seconds = 120;
  return RunSubprocess(argv, o);
}

}  // namespace cputrain::test
