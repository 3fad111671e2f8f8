// `cputrain-numa report` end to end, as a user runs it: a small hand-written results file in each
// accepted shape (the `bench all` document, one suite's list of records) renders into the
// expected charts and README.md, whose tables carry the numbers of the input; every bad input
// (missing file, not JSON, a shape that is no benchmark report, a record missing a field) exits 2
// with the file named and a hint, and leaves no README.md behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_util.h"

namespace cputrain {
namespace {

using nlohmann::json;

using ::cputrain::test::Slurp;

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

bool Exists(const std::string& p) { return std::filesystem::exists(p); }

// One or two records of each suite, with the fields `bench` writes.
json MemoryRecords() {
  return json::array({{{"suite", "memory"},
                       {"kind", "setup"},
                       {"topology", "this"},
                       {"simulated", false},
                       {"pinned", true},
                       {"bound", true},
                       {"array_bytes", 268435456},
                       {"reps", 5}},
                      {{"suite", "memory"},
                       {"kind", "bandwidth"},
                       {"test", "scaling"},
                       {"op", "triad"},
                       {"cpu_node", 0},
                       {"mem_node", 0},
                       {"threads", 1},
                       {"gbs", 21.5}},
                      {{"suite", "memory"},
                       {"kind", "bandwidth"},
                       {"test", "matrix"},
                       {"op", "triad"},
                       {"cpu_node", 0},
                       {"mem_node", 0},
                       {"threads", 2},
                       {"gbs", 33.25}},
                      {{"suite", "memory"},
                       {"kind", "bandwidth"},
                       {"test", "matrix"},
                       {"op", "triad"},
                       {"cpu_node", 0},
                       {"mem_node", 1},
                       {"threads", 2},
                       {"gbs", 12.75}},
                      {{"suite", "memory"},
                       {"kind", "latency"},
                       {"cpu_node", 0},
                       {"mem_node", 1},
                       {"ns_per_load", 187.5}}});
}

json GemmRecords() {
  return json::array({{{"suite", "gemm"},
                       {"kind", "peak"},
                       {"scope", "group"},
                       {"isa", "avx2-fma"},
                       {"group", 0},
                       {"threads", 2},
                       {"gflops", 180.0}},
                      {{"suite", "gemm"},
                       {"kind", "gemm"},
                       {"model", "small"},
                       {"group", 0},
                       {"threads", 2},
                       {"shape", "qkv"},
                       {"product", "fwd"},
                       {"impl", "ours"},
                       {"M", 1024},
                       {"N", 1152},
                       {"K", 384},
                       {"gflops", 150.0},
                       {"peak_gflops", 180.0}},
                      {{"suite", "gemm"},
                       {"kind", "gemm"},
                       {"model", "small"},
                       {"group", 0},
                       {"threads", 2},
                       {"shape", "qkv"},
                       {"product", "fwd"},
                       {"impl", "own-avx2"},
                       {"M", 1024},
                       {"N", 1152},
                       {"K", 384},
                       {"gflops", 120.0},
                       {"peak_gflops", 180.0}},
                      {{"suite", "gemm"},
                       {"kind", "summary"},
                       {"model", "small"},
                       {"group", 0},
                       {"impl", "ours"},
                       {"step_gemm_seconds", 0.5},
                       {"gflops", 149.5},
                       {"pct_peak", 83.0},
                       {"speedup_vs_ours", 1.0}}});
}

json CollectivesRecords() {
  json r = json::array();
  for (double bytes : {4096.0, 1048576.0}) {
    r.push_back({{"suite", "collectives"},
                 {"op", "allreduce"},
                 {"impl", "cputrain"},
                 {"groups", 2},
                 {"bytes", bytes},
                 {"seconds", 1e-5},
                 {"busbw_gbs", bytes == 4096 ? 8.5 : 21.25}});
    r.push_back({{"suite", "collectives"},
                 {"op", "allreduce"},
                 {"impl", "mpi"},
                 {"groups", 2},
                 {"bytes", bytes},
                 {"seconds", 1e-4},
                 {"busbw_gbs", 2.5}});
  }
  return r;
}

json TrainRecords() {
  auto row = [](const char* impl, const char* placement, double tps) {
    return json{{"suite", "train"},           {"impl", impl},
                {"model", "small"},           {"placement", placement},
                {"model_shape", "L=6 C=384"}, {"tokens_per_s", tps},
                {"gflops", tps * 0.19},       {"mfu", 0.5},
                {"step_ms", 4096000 / tps},   {"forward_ms", 100.0},
                {"backward_ms", 200.0},       {"comm_ms", 10.0},
                {"optimizer_ms", 5.0},        {"other_ms", 1.0}};
  };
  return json::array({row("cputrain", "1x2", 700.0),
                      row("cputrain", "2x1", 725.0),
                      row("pytorch", "PyTorch 1x2 openmp-BLAS", 650.0),
                      {{"suite", "train"},
                       {"kind", "summary"},
                       {"model", "small"},
                       {"best_placement", "2x1"},
                       {"best_tokens_per_s", 725.0},
                       {"pytorch_best_placement", "PyTorch 1x2 openmp-BLAS"},
                       {"pytorch_best_tokens_per_s", 650.0},
                       {"ratio_vs_pytorch_best", 1.115},
                       {"two_groups_vs_one", 1.036},
                       {"two_groups_label", "2x1"},
                       {"one_group_label", "1x2"}}});
}

TEST(Report, BenchAllDocumentRendersEveryChartAndTheReadme) {
  test::TempDir dir;
  const std::string in = dir.path() + "/all.json", out = dir.path() + "/report";
  json doc = {{"machine",
               {{"cpu_model", "Test CPU 9000"},
                {"date", "2026-01-01T00:00:00Z"},
                {"topology", {{"packages", 1}, {"numa_nodes", 2}, {"cores", 2}, {"pus", 2}}}}},
              {"command", "cputrain-numa bench all --json all.json"},
              {"quick", false},
              {"suites",
               {{"memory", MemoryRecords()},
                {"gemm", GemmRecords()},
                {"collectives", CollectivesRecords()},
                {"train", TrainRecords()}}}};
  Write(in, doc.dump());
  const test::CliResult r = test::RunCli({"report", in, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"README.md", "memory-scaling.svg", "memory-triad-matrix.svg",
                        "memory-latency.svg", "gemm-small-g0.svg", "collectives-allreduce.svg",
                        "train-small-tokens.svg", "train-small-breakdown.svg"}) {
    EXPECT_TRUE(Exists(out + "/" + f)) << f << " missing; stdout:\n" << r.out;
  }
  const std::string md = Slurp(out + "/README.md");
  // The machine, the command, the charts and the key numbers of every suite.
  EXPECT_NE(md.find("Test CPU 9000"), std::string::npos) << md;
  EXPECT_NE(md.find("cputrain-numa bench all --json all.json"), std::string::npos) << md;
  EXPECT_NE(md.find("!["), std::string::npos);
  EXPECT_NE(md.find("(train-small-tokens.svg)"), std::string::npos) << md;
  EXPECT_NE(md.find("12.8"), std::string::npos) << "remote triad 12.75 GB/s:\n" << md;
  EXPECT_NE(md.find("187.5"), std::string::npos) << "latency:\n" << md;
  EXPECT_NE(md.find("149.5"), std::string::npos) << "GEMM per step:\n" << md;
  EXPECT_NE(md.find("8.5x"), std::string::npos) << "ours / MPI at 1 MiB = 21.25 / 2.5:\n" << md;
  EXPECT_NE(md.find("725.0"), std::string::npos) << "best tokens/s:\n" << md;
  EXPECT_NE(md.find("1.11x"), std::string::npos) << "ratio to PyTorch:\n" << md;
  // The SVGs are SVG documents, and the heat map shows both memory nodes.
  const std::string heat = Slurp(out + "/memory-triad-matrix.svg");
  EXPECT_EQ(heat.rfind("<svg", 0), 0u);
  EXPECT_NE(heat.find("mem 1"), std::string::npos);
  EXPECT_NE(heat.find("</svg>"), std::string::npos);
  // No temporary file is left next to the outputs (atomic writes).
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(Report, OneSuitesListIsReadFromItsSuiteField) {
  test::TempDir dir;
  const std::string in = dir.path() + "/coll.json", out = dir.path() + "/r";
  Write(in, CollectivesRecords().dump());
  const test::CliResult r = test::RunCli({"report", in, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Exists(out + "/collectives-allreduce.svg"));
  EXPECT_FALSE(Exists(out + "/train-small-tokens.svg"));
  EXPECT_NE(Slurp(out + "/README.md").find("Collectives"), std::string::npos);
}

void ExpectInputError(const std::string& content, const std::string& needle, bool create = true) {
  test::TempDir dir;
  const std::string in = dir.path() + "/in.json", out = dir.path() + "/r";
  if (create) Write(in, content);
  const test::CliResult r = test::RunCli({"report", in, "-o", out});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in.json"), std::string::npos) << "names the file: " << r.err;
  EXPECT_FALSE(Exists(out + "/README.md"));
}

// The suite of a record is read from its "suite" field, never guessed from its other fields
// (the report used to take busbw_gbs for collectives).
TEST(Report, ARecordWithoutSuiteFieldIsNotGuessed) {
  json recs = CollectivesRecords();
  for (json& r : recs) r.erase("suite");
  ExpectInputError(recs.dump(), "no \"suite\" field");
  // In a `bench all` document, a record listed under another suite than it says.
  json doc = {{"suites", {{"train", CollectivesRecords()}}}};
  ExpectInputError(doc.dump(), "listed under 'train'");
}

TEST(Report, BadInputExitsTwo) {
  ExpectInputError("", "cannot", /*create=*/false);               // missing file
  ExpectInputError("{\"suites\": [1,", "not JSON");               // truncated
  ExpectInputError("42", "not a benchmark report");               // a number
  ExpectInputError("{\"machine\": {}}", "without a \"suites\"");  // object of another shape
  ExpectInputError("[{\"foo\": 1}]", "not from any benchmark suite");
  ExpectInputError("[]", "no benchmark records");
  // A train record without the numbers its table needs.
  ExpectInputError(R"([{"suite": "train", "impl": "cputrain", "model": "small",
                       "placement": "1x2", "tokens_per_s": 5}])",
                   "lacks a field");
}

}  // namespace
}  // namespace cputrain
