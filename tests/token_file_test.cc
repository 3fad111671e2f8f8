// Token files (llm.c format, version 1 uint16 ids, version 2 uint32): the writer's bytes are
// exactly the documented layout, the reader maps them back, and every malformed file is an
// InputError that names the file and the fault.
#include "data/token_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "test_util.h"
#include "train/batches.h"

namespace cputrain::data {
namespace {

using ::cputrain::test::Slurp;

// Writes a file from a header (magic, version, count) and raw uint16 tokens.
void WriteRaw(const std::string& path, int32_t magic, int32_t version, int32_t count,
              const std::vector<uint16_t>& tokens, std::size_t header_ints = 256) {
  std::vector<int32_t> header(header_ints, 0);
  if (header_ints > 0) header[0] = magic;
  if (header_ints > 1) header[1] = version;
  if (header_ints > 2) header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
}

// The InputError Open throws for `path`, with its message and hint.
InputError OpenError(const std::string& path) {
  try {
    TokenFile::Open(path);
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError for " << path;
  return InputError("");
}

std::vector<int> ReadAll(const TokenFile& f) {
  std::vector<int> ids(f.size());
  f.Read(0, f.size(), ids.data());
  return ids;
}

void ExpectContains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST(TokenFile, WriterProducesTheLlmcLayoutAndReaderMapsIt) {
  test::TempDir dir;
  std::string path = dir.path() + "/t.bin";
  std::vector<uint16_t> tokens;
  {
    TokenFileWriter w(path);
    for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<uint16_t>(i * 65 % 65536));
    w.Append(tokens.data(), 10);
    w.Append(tokens.data() + 10, 0);
    w.Append(tokens.data() + 10, tokens.size() - 10);
    EXPECT_EQ(w.count(), 1000u);
    EXPECT_FALSE(std::filesystem::exists(path)) << "visible before Commit";
    w.Commit();
  }
  std::string bytes = Slurp(path);
  ASSERT_EQ(bytes.size(), 1024u + 2000u);
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 1000);
  for (int i = 3; i < 256; ++i) ASSERT_EQ(header[i], 0) << i;
  // Little-endian uint16 after the header.
  EXPECT_EQ(static_cast<unsigned char>(bytes[1024 + 2 * 7]), (7 * 65) & 0xFF);
  EXPECT_EQ(static_cast<unsigned char>(bytes[1024 + 2 * 7 + 1]), (7 * 65) >> 8);

  TokenFile f = TokenFile::Open(path);
  ASSERT_EQ(f.size(), 1000u);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.version(), 1);
  EXPECT_EQ(ReadAll(f), std::vector<int>(tokens.begin(), tokens.end()));
  TokenFile moved = std::move(f);
  EXPECT_EQ(moved.size(), 1000u);
  EXPECT_EQ(moved.at(999), tokens[999]);
  EXPECT_EQ(std::filesystem::directory_iterator(dir.path())->path(), path)
      << "only the final file remains";
}

TEST(TokenFile, WriterWithoutCommitLeavesNothingAndKeepsTheOldFile) {
  test::TempDir dir;
  std::string path = dir.path() + "/t.bin";
  {
    TokenFileWriter w(path);
    uint16_t t[3] = {1, 2, 3};
    w.Append(t, 3);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  {
    TokenFileWriter w(path);
    uint16_t t[2] = {4, 5};
    w.Append(t, 2);
    w.Commit();
  }
  {
    TokenFileWriter w(path);
    uint16_t t[1] = {9};
    w.Append(t, 1);
    w.Finish();  // finished but never renamed: the old file stays
  }
  TokenFile f = TokenFile::Open(path);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f.at(1), 5u);
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.exists();
  EXPECT_EQ(files, 1);
}

TEST(TokenFile, WriterRefusesZeroTokensAndUnwritableDirectories) {
  test::TempDir dir;
  {
    TokenFileWriter w(dir.path() + "/empty.bin");
    EXPECT_THROW(w.Commit(), InputError);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_THROW(TokenFileWriter(dir.path() + "/no/such/dir/t.bin"), InputError);
}

TEST(TokenFile, MissingFile) {
  test::TempDir dir;
  InputError e = OpenError(dir.path() + "/missing.bin");
  ExpectContains(e.what(), dir.path() + "/missing.bin");
  ExpectContains(e.what(), "No such file");
}

TEST(TokenFile, Directory) {
  test::TempDir dir;
  ExpectContains(OpenError(dir.path()).what(), "not a regular file");
}

TEST(TokenFile, ShorterThanTheHeader) {
  test::TempDir dir;
  std::string path = dir.path() + "/short.bin";
  WriteRaw(path, kTokenFileMagic, 1, 0, {}, 100);
  InputError e = OpenError(path);
  ExpectContains(e.what(), path);
  ExpectContains(e.what(), "400 bytes, fewer than its 1024-byte header");
}

TEST(TokenFile, CheckpointMagicGetsItsOwnHint) {
  test::TempDir dir;
  std::string path = dir.path() + "/model.bin";
  WriteRaw(path, 20240326, 3, 0, {1, 2});
  InputError e = OpenError(path);
  ExpectContains(e.what(), "magic number is 20240326");
  ExpectContains(e.hint(), "checkpoint");
}

TEST(TokenFile, OtherMagicSaysHowToRecreate) {
  test::TempDir dir;
  std::string path = dir.path() + "/junk.bin";
  WriteRaw(path, 12345, 1, 2, {1, 2});
  InputError e = OpenError(path);
  ExpectContains(e.what(), "not a token file");
  ExpectContains(e.hint(), "re-create it with `cputrain-numa prepare-data`");
}

TEST(TokenFile, WrongVersion) {
  test::TempDir dir;
  std::string path = dir.path() + "/v3.bin";
  WriteRaw(path, kTokenFileMagic, 3, 2, {1, 2});
  ExpectContains(OpenError(path).what(), "has version 3; this build reads versions 1");
  // Version 0 and negative ones likewise.
  WriteRaw(path, kTokenFileMagic, 0, 2, {1, 2});
  ExpectContains(OpenError(path).what(), "has version 0");
}

// Version 2 (uint32 ids): the writer's bytes are the documented layout, ids above 65535 come
// back, and Read widens either width into int.
TEST(TokenFile, Version2HoldsUint32Ids) {
  test::TempDir dir;
  const std::string path = dir.path() + "/wide.bin";
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 3000; ++i) tokens.push_back(i * 997 % 2000003);
  {
    TokenFileWriter w(path, kTokenFileVersionWide);
    w.Append(tokens.data(), 1000);
    const std::vector<uint16_t> narrow = {7, 65535};  // uint16 ids widen into a version 2 file
    w.Append(narrow.data(), narrow.size());
    w.Append(tokens.data() + 1000, tokens.size() - 1000);
    w.Commit();
  }
  tokens.insert(tokens.begin() + 1000, {7, 65535});
  const std::string bytes = Slurp(path);
  ASSERT_EQ(bytes.size(), 1024u + 4 * tokens.size());
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 2);
  EXPECT_EQ(header[2], static_cast<int32_t>(tokens.size()));
  uint32_t id5;
  std::memcpy(&id5, bytes.data() + 1024 + 4 * 5, 4);  // little-endian uint32 after the header
  EXPECT_EQ(id5, tokens[5]);

  TokenFile f = TokenFile::Open(path);
  EXPECT_EQ(f.version(), 2);
  ASSERT_EQ(f.size(), tokens.size());
  EXPECT_EQ(ReadAll(f), std::vector<int>(tokens.begin(), tokens.end()));
  int window[4];
  f.Read(1000, 4, window);
  EXPECT_EQ(std::vector<int>(window, window + 4), (std::vector<int>{7, 65535, 997000, 997997}));
  EXPECT_NO_THROW(f.CheckBelow(2000003));
  try {
    f.CheckBelow(1000000);
    FAIL() << "no error for an id above the vocabulary in a version 2 file";
  } catch (const InputError& e) {
    // The first id >= 1e6: 1004 * 997 = 1000988, token 1006 after the two inserted ids.
    ExpectContains(e.what(), "token 1006 (0-based, byte offset 5048) is 1000988");
  }
  // A version 2 file whose size counts uint16 ids is refused naming the version.
  WriteRaw(path, kTokenFileMagic, 2, 2, {1, 2});
  ExpectContains(OpenError(path).what(), "(8 bytes after the header, version 2)");
}

TEST(TokenFile, WritersPickTheVersionFromTheVocabularySize) {
  EXPECT_EQ(TokenFileVersionFor(256), 1);
  EXPECT_EQ(TokenFileVersionFor(50257), 1);
  EXPECT_EQ(TokenFileVersionFor(65536), 1);
  EXPECT_EQ(TokenFileVersionFor(65537), 2);
  EXPECT_EQ(TokenFileVersionFor(128256), 2);
  // uint32 ids into a version 1 file narrow to the same bytes as uint16 ones.
  test::TempDir dir;
  const std::vector<uint32_t> wide = {0, 1, 50256, 65535};
  const std::vector<uint16_t> narrow(wide.begin(), wide.end());
  for (const char* name : {"a.bin", "b.bin"}) {
    TokenFileWriter w(dir.path() + "/" + name);
    if (name[0] == 'a') {
      w.Append(wide.data(), wide.size());
    } else {
      w.Append(narrow.data(), narrow.size());
    }
    w.Commit();
  }
  EXPECT_EQ(Slurp(dir.path() + "/a.bin"), Slurp(dir.path() + "/b.bin"));
  EXPECT_EQ(Slurp(dir.path() + "/a.bin").size(), 1024u + 8u);
  // An id that needs 32 bits into a version 1 file is a caller's bug, refused.
  TokenFileWriter v1(dir.path() + "/c.bin");
  const std::vector<uint32_t> big = {1, 70000, 2};
  EXPECT_THROW(v1.Append(big.data(), big.size()), RuntimeError);
}

TEST(TokenFile, CountDisagreesWithSizeNamesBothNumbers) {
  test::TempDir dir;
  std::string path = dir.path() + "/truncated.bin";
  WriteRaw(path, kTokenFileMagic, 1, 100, std::vector<uint16_t>(60, 7));
  InputError e = OpenError(path);
  ExpectContains(e.what(), "header says 100 tokens (200 bytes after the header, version 1)");
  ExpectContains(e.what(), "has 120 bytes after the header");
  ExpectContains(e.hint(), "truncated");
  // An odd payload, and a negative count, are the same fault.
  WriteRaw(path, kTokenFileMagic, 1, 2, {1, 2});
  { std::ofstream(path, std::ios::app) << 'x'; }
  ExpectContains(OpenError(path).what(), "has 5 bytes after the header");
  WriteRaw(path, kTokenFileMagic, 1, -4, {});
  ExpectContains(OpenError(path).what(), "header says -4 tokens");
}

TEST(TokenFile, ZeroTokens) {
  test::TempDir dir;
  std::string path = dir.path() + "/zero.bin";
  WriteRaw(path, kTokenFileMagic, 1, 0, {});
  ExpectContains(OpenError(path).what(), "holds no tokens");
}

TEST(TokenFile, CheckBelowNamesTheFirstOffendingPositionAndId) {
  test::TempDir dir;
  std::string path = dir.path() + "/ids.bin";
  std::vector<uint16_t> tokens(5000, 100);
  tokens[1234] = 50257;
  tokens[4000] = 65535;
  WriteRaw(path, kTokenFileMagic, 1, 5000, tokens);
  TokenFile f = TokenFile::Open(path);
  EXPECT_NO_THROW(f.CheckBelow(65536));
  try {
    f.CheckBelow(50257);
    FAIL() << "no error for id 50257 with a 50257-token vocabulary";
  } catch (const InputError& e) {
    ExpectContains(e.what(), path);
    ExpectContains(e.what(), "token 1234 (0-based, byte offset 3492) is 50257");
    ExpectContains(e.what(), "vocabulary size 50257");
    ExpectContains(e.hint(), "--tokenizer");
  }
  tokens[1234] = 100;
  tokens[4000] = 100;
  tokens[0] = 256;
  WriteRaw(path, kTokenFileMagic, 1, 5000, tokens);
  TokenFile g = TokenFile::Open(path);
  EXPECT_NO_THROW(g.CheckBelow(50257));
  EXPECT_THROW(g.CheckBelow(256), InputError);
}

// The trainer's windows read either width: a version 2 shard with ids above 65535 next to a
// version 1 shard, rows and targets as the ids.
TEST(TokenFile, TokenWindowsReadVersion2) {
  test::TempDir dir;
  std::vector<uint32_t> wide(2 * 2 * 3 + 1);  // B=2, T=3: 2 windows
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<uint32_t>(100000 + i);
  {
    TokenFileWriter w(dir.path() + "/a.bin", kTokenFileVersionWide);
    w.Append(wide.data(), wide.size());
    w.Commit();
    TokenFileWriter v1(dir.path() + "/b.bin");
    const std::vector<uint16_t> narrow = {1, 2, 3, 4, 5, 6, 7};
    v1.Append(narrow.data(), narrow.size());
    v1.Commit();
  }
  const train::TokenWindows w =
      train::TokenWindows::Open({dir.path() + "/*.bin"}, "data.train", 100013, 2, 3);
  ASSERT_EQ(w.windows(), 3u);
  int in[6], tgt[6];
  w.LoadRows(1, 0, 2, in, tgt);  // window 1 of a.bin: ids 100006..
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(in[i], 100006 + i);
    EXPECT_EQ(tgt[i], 100007 + i);
  }
  w.LoadRows(2, 1, 1, in, tgt);  // b.bin's window, its second row
  EXPECT_EQ(std::vector<int>(in, in + 3), (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(std::vector<int>(tgt, tgt + 3), (std::vector<int>{5, 6, 7}));
  EXPECT_THROW(train::TokenWindows::Open({dir.path() + "/a.bin"}, "data.train", 100012, 2, 3),
               InputError);
}

}  // namespace
}  // namespace cputrain::data
