// Regression tests for the defects found by running cputrain-numa on hostile inputs (issue 11):
// each test is named after the bug it pins and runs the binary as a user would. The rule they
// check: bad input gets exit 2 and a message that names the problem, never a crash, a hang or
// an allocation sized by the input. Commands that could hang run under a timeout, so the old
// behaviour fails the test instead of hanging it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "test_util.h"

namespace cputrain {
namespace {

constexpr int kTimeoutS = 60;

void ExpectInputError(const test::CliResult& r, const std::vector<std::string>& needles) {
  EXPECT_FALSE(r.timed_out) << "the command hung";
  EXPECT_EQ(r.exit_code, 2) << r.err;
  for (const std::string& n : needles)
    EXPECT_NE(r.err.find(n), std::string::npos) << n << "\n" << r.err;
  EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
}

// An llm.c checkpoint header (magic 20240326, version 3) for the shape, then `floats` zeros.
void WriteCheckpoint(const std::string& path, int maxT, int V, int L, int NH, int C, int Vp,
                     std::size_t floats) {
  std::vector<int32_t> h(256, 0);
  h[0] = 20240326;
  h[1] = 3;
  h[2] = maxT, h[3] = V, h[4] = L, h[5] = NH, h[6] = C, h[7] = Vp;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  const std::vector<float> zeros(floats, 0.0f);
  f.write(reinterpret_cast<const char*>(zeros.data()),
          static_cast<std::streamsize>(floats * sizeof(float)));
}

// GPT-2's parameter count, written out independently of the model's table.
std::size_t Params(std::size_t maxT, std::size_t L, std::size_t C, std::size_t Vp) {
  return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
}

std::string MakeFifo(const test::TempDir& dir) {
  const std::string p = dir.path() + "/fifo";
  EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
  return p;
}

// ---- files: FIFOs, devices and directories where a file belongs

TEST(HostileInput, FifoAsConfigBlockedForever) {
  test::TempDir dir;
  const std::string fifo = MakeFifo(dir);
  ExpectInputError(test::RunCli({"config", "--config", fifo}, {}, kTimeoutS),
                   {"config file '" + fifo + "' is not a regular file (a FIFO)"});
}

TEST(HostileInput, FifoAsCheckpointBlockedForever) {
  test::TempDir dir;
  const std::string fifo = MakeFifo(dir);
  ExpectInputError(
      test::RunCli({"generate", "--checkpoint", fifo, "--tokenizer", "bytes"}, {}, kTimeoutS),
      {"checkpoint '" + fifo + "' is not a regular file (a FIFO)"});
}

TEST(HostileInput, FifoAsTrainDataBlockedForever) {
  test::TempDir dir;
  const std::string fifo = MakeFifo(dir);
  ExpectInputError(test::RunCli({"train",
                                 "--progress",
                                 "quiet",
                                 "--topology",
                                 "synthetic:pack:1 core:1 pu:1",
                                 "--set",
                                 "model.layers=1",
                                 "--set",
                                 "model.channels=8",
                                 "--set",
                                 "model.heads=1",
                                 "--set",
                                 "model.vocab_size=256",
                                 "--set",
                                 "model.max_seq_len=8",
                                 "--set",
                                 "data.seq_len=8",
                                 "--set",
                                 "data.batch_size=1",
                                 "--set",
                                 "data.train=" + fifo,
                                 "--set",
                                 "train.out_dir=" + dir.path() + "/run"},
                                {}, kTimeoutS),
                   {"token file '" + fifo + "' is not a regular file (a FIFO)"});
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/run/model.bin"));
}

TEST(HostileInput, DevZeroAsConfigEndedInBadAlloc) {
  ExpectInputError(test::RunCli({"config", "--config", "/dev/zero"}, {}, kTimeoutS),
                   {"config file '/dev/zero' is not a regular file (a character device)"});
}

TEST(HostileInput, DirectoryAsCheckpointWasReportedAsZeroBytes) {
  test::TempDir dir;
  test::CliResult r = test::RunCli({"generate", "--checkpoint", dir.path()}, {}, kTimeoutS);
  // A directory is a checkpoint when it holds model.bin or checkpoints/ (a step directory or a
  // run's out_dir); an empty one is named as such, not as a 0-byte file.
  ExpectInputError(r, {"'" + dir.path() + "' is not a checkpoint: no model.bin in it",
                       "pass a model.bin file, a checkpoints/step_N directory"});
  EXPECT_EQ(r.err.find("0 bytes"), std::string::npos) << r.err;
}

// Found by fuzz_topology: hwloc 2.9.0 dereferences NULL on such a file (the CLI died with SIGSEGV).
// `topo --topology xml:` on the XML of a fuzz_topology regression (8 knob bytes, then the XML)
// must be an input error saying `message`.
void ExpectXmlRegressionRefused(const std::string& regression, const std::string& message) {
  test::TempDir dir;
  const std::string path = dir.path() + "/m.xml";
  const std::string input = test::Slurp(std::string(CPUTRAIN_SOURCE_DIR) +
                                        "/tests/fuzz/regressions/topology/" + regression);
  ASSERT_GT(input.size(), 8u);
  std::ofstream(path, std::ios::binary) << input.substr(8);
  ExpectInputError(test::RunCli({"topo", "--topology", "xml:" + path}, {}, kTimeoutS), {message});
}

TEST(HostileInput, XmlObjectWithNodesetButNoCompleteNodesetCrashedHwloc) {
  ExpectXmlRegressionRefused("hwloc-crashed-on-nodeset-without-complete-nodeset.bin",
                             "has an object with nodeset without complete_nodeset");
}

// Found by fuzz_topology in CI: hwloc 2.9's bitmap parser asserts on a cpuset starting with a
// comma (",x00000040"); the process aborted. Bitmaps are checked before hwloc sees them. (The 36
// hwloc test-suite topologies in shared/fixtures/hwloc-xml, with their empty chunks
// "0x0000ffff,,,,0x0000ffff", all still load.)
TEST(HostileInput, XmlBitmapWithALeadingCommaAbortedHwloc) {
  ExpectXmlRegressionRefused("hwloc-aborted-on-a-bitmap-with-a-leading-comma.bin",
                             "has a malformed bitmap");
}

// Found by fuzz_topology: hwloc loads an XML whose second PU says os_index="0" with cpuset 0x2; the
// plan followed os_index and pinned two workers to CPU 0.
TEST(HostileInput, XmlPuWhoseCpusetIsNotItsOsIndexGotAGroupTwice) {
  ExpectXmlRegressionRefused("two-pus-with-os-index-0-pinned-two-workers-to-one-cpu.bin",
                             "PU with OS index 0 has a cpuset that is not that one CPU");
}

TEST(HostileInput, XmlTopologyFromDevZeroSaidNoSuchFile) {
  test::CliResult r = test::RunCli({"topo", "--topology", "xml:/dev/zero"}, {}, kTimeoutS);
  ExpectInputError(r, {"'/dev/zero' is not a regular file (a character device)"});
  EXPECT_EQ(r.err.find("no such file"), std::string::npos) << r.err;
}

// ---- checkpoint headers that size memory before the file size is checked

TEST(HostileInput, CheckpointClaimingTenMillionLayersAllocatedGigabytes) {
  test::TempDir dir;
  const std::string path = dir.path() + "/model.bin";
  WriteCheckpoint(path, 64, 256, 10'000'000, 1, 8, 256, 22'000);  // an 88 KB file
  ExpectInputError(
      test::RunCli({"generate", "--checkpoint", path, "--tokenizer", "bytes"}, {}, kTimeoutS),
      {"impossible model", "L is 10000000: it must be in [1, 4096]"});
}

TEST(HostileInput, CheckpointClaimingABillionLayersEndedInBadAlloc) {
  test::TempDir dir;
  const std::string path = dir.path() + "/model.bin";
  WriteCheckpoint(path, 64, 256, 1'000'000'000, 1, 8, 256, 22'000);
  ExpectInputError(
      test::RunCli({"generate", "--checkpoint", path, "--tokenizer", "bytes"}, {}, kTimeoutS),
      {"L is 1000000000"});
}

// Within the limits, a header is still checked against the file size before anything is
// allocated: 4096 layers of C=64 need 800 MB, the file has 88 KB.
TEST(HostileInput, CheckpointHeaderIsCheckedAgainstTheFileSizeFirst) {
  test::TempDir dir;
  const std::string path = dir.path() + "/model.bin";
  WriteCheckpoint(path, 64, 256, 4096, 1, 64, 256, 22'000);
  const std::size_t need = 1024 + 4 * Params(64, 4096, 64, 256);
  ExpectInputError(
      test::RunCli({"generate", "--checkpoint", path, "--tokenizer", "bytes"}, {}, kTimeoutS),
      {"is 89024 bytes but its header", "needs " + std::to_string(need)});
}

TEST(HostileInput, CheckpointWithSixHundredMillionChannelsOverflowedFourC) {
  test::TempDir dir;
  const std::string path = dir.path() + "/model.bin";
  WriteCheckpoint(path, 64, 256, 1, 1, 600'000'000, 256, 100);
  ExpectInputError(
      test::RunCli({"generate", "--checkpoint", path, "--tokenizer", "bytes"}, {}, kTimeoutS),
      {"C is 600000000: it must be in [1, 65536]"});
}

TEST(HostileInput, SetChannelsSixHundredMillionOverflowedFourC) {
  ExpectInputError(test::RunCli({"config", "--set", "model.channels=600000000"}, {}, kTimeoutS),
                   {"--set model.channels=600000000: model.channels is 600000000, more than "
                    "65536"});
}

TEST(HostileInput, SetLayersOneBillionEndedInBadAlloc) {
  ExpectInputError(test::RunCli({"config", "--set", "model.layers=1000000000"}, {}, kTimeoutS),
                   {"--set model.layers=1000000000: model.layers is 1000000000, more than 4096"});
}

// ---- generate's flags and tokenizer

TEST(HostileInput, GenerateTemperatureNanWasAccepted) {
  for (const char* bad : {"nan", "inf", "-nan"}) {
    test::CliResult r = test::RunCli(
        {"generate", "--checkpoint", "/nonexistent.bin", "--temperature", bad}, {}, kTimeoutS);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("is not a finite number: it must be in [0, 100]"), std::string::npos)
        << bad << "\n"
        << r.err;
  }
}

TEST(HostileInput, FlagRangesPrintedTheDoubleMaximum) {
  test::CliResult r = test::RunCli(
      {"generate", "--checkpoint", "/nonexistent.bin", "--top-k", "-1"}, {}, kTimeoutS);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("-1 is out of range: it must be >= 0"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("1.79"), std::string::npos) << r.err;
  r = test::RunCli({"generate", "--checkpoint", "/nonexistent.bin", "--tokens", "0"}, {},
                   kTimeoutS);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("it must be >= 1"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("1.79"), std::string::npos) << r.err;
}

TEST(HostileInput, Gpt2VocabularyCheckpointWithBytesTokenizerWasAccepted) {
  test::TempDir dir;
  const std::string path = dir.path() + "/model.bin";
  WriteCheckpoint(path, 8, 50257, 1, 1, 8, 50304, Params(8, 1, 8, 50304));
  ExpectInputError(
      test::RunCli({"generate", "--checkpoint", path, "--tokenizer", "bytes", "--topology",
                    "synthetic:pack:1 core:1 pu:1", "--tokens", "4", "--temperature", "0"},
                   {}, kTimeoutS),
      {"has a vocabulary of 50257", "use --tokenizer gpt2"});
}

// ---- topology specs

TEST(HostileInput, HugeSyntheticTopologyRanForMinutes) {
  test::CliResult r = test::RunCli(
      {"topo", "--topology", "synthetic:pack:100000 core:100000 pu:100"}, {}, kTimeoutS);
  ExpectInputError(r, {"describes more than 16384 PUs"});
}

// Found by fuzz_topology in CI: hwloc needs no space between levels, so "pack:32643Tile53:2 662"
// is 32643 x 2 x 662 PUs; the size check had split levels at spaces only, measured 2 x 662, and
// hwloc then ran out of memory building the machine.
TEST(HostileInput, LevelsWithoutSpacesWereMeasuredAsOneLevel) {
  test::CliResult r =
      test::RunCli({"topo", "--topology", "synthetic:pack:32643Tile53:2 662"}, {}, kTimeoutS);
  ExpectInputError(r, {"describes more than 16384 PUs"});
}

// Found by fuzz_topology: hwloc sizes a bitmap by the largest OS index of an `indexes=` list, so
// a 30-digit index ran it out of memory (and 2^64-1 became CPU "-1" in the plan).
TEST(HostileInput, HugeOsIndexRanHwlocOutOfMemory) {
  test::CliResult r = test::RunCli(
      {"topo", "--topology", "synthetic:pack:2 pu:2(indexes=333333333333333333333333333330,4,1,5)"},
      {}, kTimeoutS);
  ExpectInputError(r, {"an `indexes=` list names an OS index above 1048576"});
}

// Found by fuzz_topology: the size check skipped everything after a '[' that never closed, and a
// level "l1:10000002" behind one made hwloc build for minutes.
TEST(HostileInput, AnUnclosedBracketHidALevelFromTheSizeCheck) {
  test::CliResult r =
      test::RunCli({"topo", "--topology", "synthetic:pack:1 nu[KK l1:10000002pu:2"}, {}, kTimeoutS);
  ExpectInputError(r, {"describes more than 16384 PUs"});
}

TEST(HostileInput, EmptySyntheticTopologyWasReportedAsASetError) {
  test::CliResult r = test::RunCli({"topo", "--topology", "synthetic:"}, {}, kTimeoutS);
  ExpectInputError(r, {"topology 'synthetic:': the synthetic description is empty"});
  EXPECT_EQ(r.err.find("--set"), std::string::npos) << r.err;
}

// Found by fuzz_topology in CI: a synthetic `indexes=` list that repeats an OS index makes hwloc
// nest a package and a core inside a core; the lookup of a PU's core then threw an uncaught
// std::out_of_range ("error: map::at", and a crash under the fuzzer). A type on several levels of
// the tree is now refused, naming the fix.
TEST(HostileInput, RepeatedPuIndexesEndedInMapAt) {
  test::CliResult r = test::RunCli(
      {"topo", "--topology", "synthetic:pack:2 core:1 pu:2(indexes=5,5,2,5)"}, {}, kTimeoutS);
  ExpectInputError(r, {"has packages on several levels of its tree", "must not repeat one"});
  EXPECT_EQ(r.err.find("map::at"), std::string::npos) << r.err;
}

// ---- issue 32: text that is not UTF-8, numbers reported as written, HF directories

// fuzz_config aborted in CI on this input: an overlong C0 84 (U+0004) in a quoted string passed
// the control-character check, and its dump was refused. Every config is now UTF-8 or exit 2
// naming the byte, its line and column.
TEST(HostileInput, ConfigWithAnOverlongControlCharacterWasAccepted) {
  const std::string input = std::string(CPUTRAIN_SOURCE_DIR) +
                            "/tests/fuzz/regressions/config/"
                            "overlong-utf8-smuggled-a-control-character.yaml";
  ExpectInputError(test::RunCli({"config", "--config", input}, {}, kTimeoutS),
                   {input + " is not valid UTF-8 at byte 14 (line 1, column 15): 0xC0 starts a "
                            "2-byte sequence, but 0xC0 after it is not a continuation byte"});
}

TEST(HostileInput, SetValueThatIsNotUtf8WasAccepted) {
  ExpectInputError(
      test::RunCli({"config", "--set", "topology=s.\xC0\x84"}, {}, kTimeoutS),
      {"a --set argument is not valid UTF-8 at byte 11: 0xC0 0x84 is an overlong encoding of "
       "U+0004"});
}

// HF tokenizers and transformers refuse a vocab.txt line that is not UTF-8; it was accepted.
TEST(HostileInput, VocabTxtLineThatIsNotUtf8WasAccepted) {
  test::TempDir dir;
  const std::string vocab = dir.path() + "/vocab.txt";
  std::ofstream(vocab, std::ios::binary) << "[PAD]\n[UNK]\ncaf\xE9\n[CLS]\n[SEP]\n";
  ExpectInputError(test::RunCli({"tokenize", "--tokenizer", vocab}, {}, kTimeoutS),
                   {"'" + vocab +
                        "' is not valid UTF-8 at byte 15 (line 3, column 4): 0xE9 "
                        "starts a 3-byte sequence, but 0x0A after it is not a "
                        "continuation byte",
                    "save the file as UTF-8"});
}

TEST(HostileInput, TokenizerJsonThatIsNotUtf8GotAJsonParseError) {
  test::TempDir dir;
  const std::string path = dir.path() + "/tokenizer.json";
  std::ofstream(path, std::ios::binary) << "{\n  \"model\": {\"vocab\": {\"\xED\xA0\x80\": 0}}}\n";
  ExpectInputError(
      test::RunCli({"tokenize", "--tokenizer", path}, {}, kTimeoutS),
      {"'" + path + "' is not valid UTF-8 at byte 25 (line 2, column 24)", "a UTF-16 surrogate"});
}

// A Hugging Face directory: config.json that is not UTF-8, a FIFO, a directory or /dev/zero.
// The last three said "not a checkpoint ... pass a Hugging Face GPT-2 directory (config.json +
// model.safetensors)" of a directory that has both.
TEST(HostileInput, HfConfigJsonThatIsAFifoSaidNotACheckpoint) {
  test::TempDir dir;
  const std::string hf = dir.path() + "/hf", config = hf + "/config.json";
  std::filesystem::create_directory(hf);
  std::ofstream(hf + "/model.safetensors") << "";
  auto generate = [&] {
    return test::RunCli({"generate", "--checkpoint", hf, "--tokenizer", "bytes"}, {}, kTimeoutS);
  };
  ASSERT_EQ(::mkfifo(config.c_str(), 0600), 0);
  ExpectInputError(generate(),
                   {"Hugging Face config '" + config + "' is not a regular file (a FIFO)"});
  std::filesystem::remove(config);
  std::filesystem::create_directory(config);
  ExpectInputError(generate(), {"Hugging Face config '" + config + "' is a directory"});
  std::filesystem::remove(config);
  std::filesystem::create_symlink("/dev/zero", config);
  ExpectInputError(generate(), {"Hugging Face config '" + config +
                                "' is not a regular file (a character device)"});
  std::filesystem::remove(config);
  std::ofstream(config, std::ios::binary) << "{\"model_type\": \"gpt2\xFF\"}";
  ExpectInputError(generate(), {"'" + config +
                                "' is not valid UTF-8 at byte 20 (line 1, column 21): "
                                "0xFF never occurs in UTF-8"});
  std::ofstream(config) << "[1, 2";
  ExpectInputError(generate(), {"Hugging Face config '" + config + "': not valid JSON"});
}

// A token file whose header count is -5 was reported as "18446744073709551606 bytes".
TEST(HostileInput, NegativeTokenCountWasReportedAsEighteenQuintillionBytes) {
  test::TempDir dir;
  const std::string path = dir.path() + "/neg.bin";
  std::vector<int32_t> h(256, 0);
  h[0] = 20240520, h[1] = 1, h[2] = -5;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  f << "0123456789";
  f.close();
  const std::string fx = std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/odd";
  test::CliResult r = test::RunCli(
      {"eval", "--config", fx + "/config.yaml", "--checkpoint", fx + "/model.bin", "--data", path},
      {}, kTimeoutS);
  ExpectInputError(r, {"token file '" + path +
                       "': its header says -5 tokens, and a count cannot "
                       "be negative (the file has 10 bytes after the header)"});
  EXPECT_EQ(r.err.find("18446744073709551606"), std::string::npos) << r.err;
}

// ---- issue 43: classify's tables and every command's --seed

// `classify features` on `text` written to dir/name, with a small BERT vocabulary.
test::CliResult Features(const test::TempDir& dir, const std::string& name,
                         const std::string& text) {
  const std::string vocab = dir.path() + "/vocab.txt", path = dir.path() + "/" + name;
  std::ofstream(vocab) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\n";
  std::ofstream(path, std::ios::binary) << text;
  return test::RunCli({"classify", "features", "--tokenizer_name", vocab, "--train_file", path}, {},
                      kTimeoutS);
}

// SIGSEGV: the parsed row was converted recursively, 50,000 levels deep.
TEST(HostileInput, JsonRowNestedFiftyThousandDeepCrashedClassify) {
  test::TempDir dir;
  const std::string deep = "{\"sentence\": \"a\", \"label\": 1, \"x\": " + std::string(50000, '[') +
                           std::string(50000, ']') + "}\n";
  ExpectInputError(Features(dir, "deep.jsonl", "{\"sentence\": \"b\", \"label\": 0}\n" + deep),
                   {dir.path() + "/deep.jsonl, line 2: the row nests deeper than 64 levels"});
}

// "error: std::bad_alloc", exit 1, naming nothing: rows that each bring a new key (989 KB of them),
// a header of commas (1.09 GB for 20 MB), a 200 MB cell. Each is refused by its cap, naming the
// file and the line, before it grows.
TEST(HostileInput, TablesOfNewKeysCommasAndHugeCellsEndedInBadAlloc) {
  test::TempDir dir;
  std::string keys;
  for (int i = 0; i < 20000; ++i)
    keys += "{\"sentence\": \"a\", \"k" + std::to_string(i) + "\": 1}\n";
  ExpectInputError(Features(dir, "keys.jsonl", keys),
                   {dir.path() + "/keys.jsonl, line 1024: the rows have more than 1024 keys"});
  ExpectInputError(Features(dir, "commas.csv", std::string(20 << 20, ',') + "\na\n"),
                   {dir.path() + "/commas.csv, line 1: the header has 20971521 columns, more "
                                 "than 1024"});
  ExpectInputError(
      Features(dir, "cell.csv", "sentence,label\n" + std::string(3 << 20, 'a') + ",1\n"),
      {dir.path() + "/cell.csv, line 2: a field is longer than 1048576 bytes"});
}

// What the caps leave (a file within them whose rows need more memory than there is) was
// "error: std::bad_alloc", exit 1: it is the input's, exit 2 naming the file. The address space
// is limited (prlimit) to 500 MiB, in which a two-row file is read (else the machine needs more
// to start, and the test is skipped: so under ASan), then a 150 MiB file within the caps.
TEST(HostileInput, TableThatRanOutOfMemoryWasStdBadAlloc) {
  const std::string prlimit = FindInPath("prlimit");
  if (prlimit.empty()) GTEST_SKIP() << "no prlimit (util-linux)";
  test::TempDir dir;
  const std::string vocab = dir.path() + "/vocab.txt", small = dir.path() + "/small.csv",
                    big = dir.path() + "/big.csv";
  std::ofstream(vocab) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\n";
  std::ofstream(small) << "sentence,label\na,0\nb,1\n";
  {
    std::ofstream f(big, std::ios::binary);
    f << "sentence,label\n";
    const std::string text(1 << 20, 'a');
    for (int i = 0; i < 150; ++i) f << text << "," << i % 2 << "\n";
  }
  const auto features = [&](const std::string& file) {
    SubprocessOptions o;
    o.timeout_seconds = 20;
    return RunSubprocess({prlimit, "--as=" + std::to_string(500ull << 20), test::CliPath(),
                          "classify", "features", "--tokenizer_name", vocab, "--train_file", file},
                         o);
  };
  const SubprocessResult fits = features(small);
  if (fits.exit_code != 0) GTEST_SKIP() << "500 MiB do not start it here:\n" << fits.err;
  const SubprocessResult r = features(big);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--train_file '" + big + "': reading and tokenizing it ran out of memory"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("std::bad_alloc"), std::string::npos) << r.err;
}

// CLI11 reads an unsigned flag with strtoull: --seed -1 trained the model of seed 2^64 - 1, bit for
// bit. Every command that takes --seed refuses a seed that is not decimal digits, naming the flag
// and the range, before reading anything.
TEST(HostileInput, SeedMinusOneTrainedTheSeedTwoToTheSixtyFourMinusOne) {
  for (const std::vector<std::string>& command :
       std::vector<std::vector<std::string>>{{"generate", "--checkpoint", "/nonexistent.bin"},
                                             {"classify", "train", "--train_file", "/none.csv"},
                                             {"qa", "train", "--train_file", "/none.json"},
                                             {"sft", "train", "--dataset_path", "/none.jsonl"}}) {
    for (const char* seed : {"-1", "0x10", "1e3", "18446744073709551616", ""}) {
      std::vector<std::string> args = command;
      if (command[0] != "generate") {
        args.insert(args.end(), {"--model_name_or_path", "/none", "--output_dir", "/none"});
      }
      args.insert(args.end(), {"--seed", seed});
      SCOPED_TRACE(args[0] + " --seed '" + seed + "'");
      const test::CliResult r = test::RunCli(args, {}, kTimeoutS);
      EXPECT_EQ(r.exit_code, 2) << r.err;
      EXPECT_NE(r.err.find("--seed"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("it must be an integer in [0, 18446744073709551615]"), std::string::npos)
          << r.err;
    }
  }
}

}  // namespace
}  // namespace cputrain
