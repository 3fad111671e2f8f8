// kernels/calibrate.h: auto chooses each class's kernel by measurement. The chooser never takes a
// slower kernel (fake kernels of known speed), keeps the prior only within kTie, sets what it
// chose; the cache hits, misses on another machine or workload, ignores a corrupt file with a
// warning and rewrites it, keeps the first entry published; a run's calibration of a small model
// (model/products.h) measures once, then comes from the cache with the same kernels.
#include "kernels/calibrate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "kernels/kernels.h"
#include "model/products.h"

namespace cputrain::kernels {
namespace {

namespace fs = std::filesystem;

// A temporary directory, removed at the end.
struct TempDir {
  TempDir() {
    path = fs::temp_directory_path() /
           ("calibrate_test." + std::to_string(::getpid()) + "." + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
  static inline int counter = 0;
};

// Fake kernels on a simulated clock: a class's work advances it by the time its selected kernel
// takes, so the timings are exact whatever else the machine runs.
struct FakeKernels {
  std::map<std::string, double> seconds;  // kernel -> seconds per run
  std::map<GemmClass, std::string> selected;
  double now = 0;
  std::function<double()> Clock() {
    return [this] { return now; };
  }
  void Spin(double s) { now += s; }
  std::vector<Candidate> Candidates(const std::vector<std::string>& names) {
    std::vector<Candidate> out;
    for (const std::string& n : names)
      out.push_back({n, [this, n](GemmClass c) { selected[c] = n; }});
    return out;
  }
  std::vector<ClassWork> Works(std::initializer_list<GemmClass> classes) {
    std::vector<ClassWork> out;
    for (GemmClass c : classes)
      out.push_back({c, 1e6, "fake", [this, c] { Spin(seconds[selected[c]]); }});
    return out;
  }
};

TEST(ChooseByTiming, TheBudgetLimitsTheRounds) {
  FakeKernels f;
  f.seconds = {{"a", 0.010}, {"b", 0.011}};
  int runs = 0;
  std::vector<ClassWork> works = f.Works({GemmClass::kFwd, GemmClass::kDinp});
  for (ClassWork& w : works) {
    w.run = [&f, &runs, c = w.cls] {
      ++runs;
      f.Spin(f.seconds[f.selected[c]]);
    };
  }
  // 0.1 s for two classes: a warm-up and a first round each (0.042 s a class), then no more.
  const KernelChoice c = ChooseByTiming(works, f.Candidates({"a", "b"}), 50, 0.1, f.Clock());
  EXPECT_LE(runs, 2 * 2 * 3) << "at most one more round a class";
  EXPECT_EQ(c.classes.size(), 2u);
  EXPECT_LE(c.seconds, 0.15);
}

TEST(ChooseByTiming, ASlowKernelIsNeverChosen) {
  FakeKernels f;
  f.seconds = {{"prior", 0.004}, {"fast", 0.001}, {"slow", 0.012}};
  const std::vector<ClassWork> works = f.Works({GemmClass::kFwd, GemmClass::kDinp});
  const KernelChoice c = ChooseByTiming(works, f.Candidates({"prior", "fast", "slow"}), 2,
                                        /*budget_s=*/1.0, f.Clock());
  ASSERT_EQ(c.classes.size(), 2u);
  for (const ClassChoice& cc : c.classes) {
    EXPECT_EQ(cc.chosen, "fast") << GemmClassName(cc.cls);
    EXPECT_EQ(f.selected[cc.cls], "fast") << "the chosen kernel is the one left selected";
    ASSERT_EQ(cc.timings.size(), 3u);
    EXPECT_EQ(cc.timings.front().kernel, "fast");
    EXPECT_GT(cc.ChosenGflops(), 0);
    ASSERT_NE(cc.RunnerUp(), nullptr);
    EXPECT_EQ(cc.RunnerUp()->kernel, "prior");
  }
  EXPECT_EQ(c.source, "measured");
  EXPECT_GT(c.seconds, 0);
}

TEST(ChooseByTiming, ThePriorKeepsANearTieAndLosesAClearOne) {
  FakeKernels f;
  f.seconds = {{"prior", 0.0030}, {"other", 0.0030}};
  KernelChoice c = ChooseByTiming(f.Works({GemmClass::kFwd}), f.Candidates({"prior", "other"}), 3,
                                  1.0, f.Clock());
  EXPECT_EQ(c.classes[0].chosen, "prior") << "equal speeds: the prior breaks the tie";
  f.seconds = {{"prior", 0.00305}, {"other", 0.0030}};
  c = ChooseByTiming(f.Works({GemmClass::kFwd}), f.Candidates({"prior", "other"}), 3, 1.0,
                     f.Clock());
  EXPECT_EQ(c.classes[0].chosen, "prior") << "1.7% slower: within kTie";
  f.seconds = {{"prior", 0.0033}, {"other", 0.0030}};
  c = ChooseByTiming(f.Works({GemmClass::kFwd}), f.Candidates({"prior", "other"}), 3, 1.0,
                     f.Clock());
  EXPECT_EQ(c.classes[0].chosen, "other") << "10% faster wins over the prior";
}

TEST(ChooseByTiming, ACandidateFarBehindIsNotTimedAgain) {
  FakeKernels f;
  f.seconds = {{"fast", 0.002}, {"crawl", 0.030}};
  int crawl_runs = 0;
  std::vector<ClassWork> works = f.Works({GemmClass::kFwd});
  works[0].run = [&] {
    if (f.selected[GemmClass::kFwd] == "crawl") ++crawl_runs;
    f.Spin(f.seconds[f.selected[GemmClass::kFwd]]);
  };
  ChooseByTiming(works, f.Candidates({"fast", "crawl"}), 5, 10.0, f.Clock());
  EXPECT_EQ(crawl_runs, 2) << "its warm-up and the first timed round only";
}

KernelChoice SampleChoice(const std::string& kernel) {
  KernelChoice c;
  c.precision = "fp32";
  c.seconds = 0.12;
  ClassChoice cc;
  cc.cls = GemmClass::kDweight;
  cc.chosen = kernel;
  cc.flops = 1e9;
  cc.shapes = "qkv 768x2304 x 512 rows";
  cc.timings = {{kernel, 0.01, 100}, {"openblas", 0.02, 50}};
  c.classes.push_back(cc);
  return c;
}

TEST(CalibrationCache, MissThenHitWithTheSameChoice) {
  TempDir d;
  const CalibrationCache cache(d.path.string(), "machine A");
  EXPECT_FALSE(cache.Find("w", "fp32").has_value());
  bool theirs = true;
  cache.Publish("w", SampleChoice("own"), &theirs);
  EXPECT_FALSE(theirs);
  const std::optional<KernelChoice> hit = cache.Find("w", "fp32");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(ChoiceToJson(*hit), ChoiceToJson(SampleChoice("own")));
  EXPECT_FALSE(cache.Find("w", "bf16").has_value()) << "another precision";
  EXPECT_FALSE(cache.Find("other workload", "fp32").has_value());
}

TEST(CalibrationCache, AnotherMachineKeyMisses) {
  TempDir d;
  CalibrationCache(d.path.string(), "machine A").Publish("w", SampleChoice("own"));
  const CalibrationCache b(d.path.string(), "machine B");
  EXPECT_NE(b.path(), CalibrationCache(d.path.string(), "machine A").path());
  EXPECT_FALSE(b.Find("w", "fp32").has_value());
  // A file renamed onto another key's name is not trusted either: its machine line says whose.
  fs::copy_file(CalibrationCache(d.path.string(), "machine A").path(), b.path());
  EXPECT_FALSE(b.Find("w", "fp32").has_value());
}

TEST(CalibrationCache, ACorruptFileIsIgnoredAndRewritten) {
  for (const std::string damage : {"garbage", "truncate", "checksum"}) {
    SCOPED_TRACE(damage);
    TempDir d;
    const CalibrationCache cache(d.path.string(), "machine A");
    cache.Publish("w", SampleChoice("own"));
    std::string text;
    {
      std::ifstream in(cache.path());
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    if (damage == "garbage") text = "\x01\x02 not json";
    if (damage == "truncate") text.resize(text.size() / 2);
    if (damage == "checksum") text.replace(text.find("\"own\""), 5, "\"onednn\"");
    std::ofstream(cache.path()) << text;
    EXPECT_FALSE(cache.Find("w", "fp32").has_value()) << "a corrupt file is never trusted";
    cache.Publish("w", SampleChoice("onednn"));
    const std::optional<KernelChoice> hit = cache.Find("w", "fp32");
    ASSERT_TRUE(hit.has_value()) << "rewritten whole";
    EXPECT_EQ(hit->classes[0].chosen, "onednn");
  }
}

TEST(CalibrationCache, TheFirstPublishedEntryWins) {
  TempDir d;
  const CalibrationCache cache(d.path.string(), "machine A");
  cache.Publish("w", SampleChoice("own"));
  bool theirs = false;
  const KernelChoice kept = cache.Publish("w", SampleChoice("onednn"), &theirs);
  EXPECT_TRUE(theirs);
  EXPECT_EQ(kept.classes[0].chosen, "own") << "every later run takes the first one";
  // Concurrent publishers: exactly one entry, and each gets the same one back.
  TempDir d2;
  const CalibrationCache c2(d2.path.string(), "machine A");
  std::vector<std::string> got(8);
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] {
      got[i] = c2.Publish("w", SampleChoice(i % 2 ? "own" : "onednn")).classes[0].chosen;
    });
  for (std::thread& t : ts) t.join();
  for (const std::string& g : got) EXPECT_EQ(g, c2.Find("w", "fp32")->classes[0].chosen);
}

TEST(CalibrationCache, JsonRoundTripAndRefusals) {
  const KernelChoice c = SampleChoice("own");
  const std::optional<KernelChoice> back = ChoiceFromJson(ChoiceToJson(c));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(ChoiceToJson(*back), ChoiceToJson(c));
  EXPECT_FALSE(ChoiceFromJson("{}").has_value());
  EXPECT_FALSE(ChoiceFromJson("not json").has_value());
  std::string bad = ChoiceToJson(c);
  bad.replace(bad.find("dweight"), 7, "nonsuch");
  EXPECT_FALSE(ChoiceFromJson(bad).has_value()) << "an unknown class";
}

TEST(MachineKey, NamesTheCpuTheBuildAndTheLibraries) {
  const std::string k = MachineKey();
  for (const char* part : {"cpu ", "family", "model", "build ", "openblas", "onednn"})
    EXPECT_NE(k.find(part), std::string::npos) << part << " in " << k;
  EXPECT_EQ(k, MachineKey()) << "stable within a process";
}

// A small GPT-2's products, calibrated for real on a 2-worker pool: every class it runs gets a
// kernel that runs here, the one it measured fastest (or the prior within kTie); the second time
// the choice comes from the cache, the same kernels, set again.
TEST(Calibrate, ASmallModelMeasuresOnceThenHitsTheCache) {
  TempDir d;
  const CalibrationCache cache(d.path.string(), MachineKey());
  WorkerPool pool({0, 1}, nullptr, "calibrate_test");  // unpinned: two workers, as a group's
  model::ProductRun run;
  run.shape = model::Shape(64, 256, 256, 2, 4, 64);
  run.rows = 4 * 64;
  run.T = 64;
  model::ProductWorks works(pool, run);
  CalibrationRequest req;
  req.precision = "fp32";
  req.works = [&](double t) { return works.Works("fp32", t); };
  req.workload = works.Workload("fp32");
  req.planned_flops = 1e9;
  UseFp32Kernel(Fp32Kernel::kAuto, "the test");
  const KernelChoice first = Calibrate(req, cache, /*recalibrate=*/false);
  EXPECT_EQ(first.source, "measured");
  // fwd, dinp, dweight, head x3, attention x2: a training run's eight classes.
  EXPECT_EQ(first.classes.size(), 8u);
  for (const ClassChoice& cc : first.classes) {
    SCOPED_TRACE(GemmClassName(cc.cls));
    EXPECT_EQ(Fp32KernelName(ActiveFp32Kernel(cc.cls)), cc.chosen);
    EXPECT_TRUE(Fp32KernelMissing(*ParseFp32Kernel(cc.chosen)).empty());
    if (Fp32Kernels().size() > 1) {
      EXPECT_GT(cc.ChosenGflops(), 0);
      for (const KernelTiming& t : cc.timings) {
        if (t.gflops > 0) {
          EXPECT_GE(cc.ChosenGflops() * (1 + kTie) + 1e-9, t.gflops) << t.kernel;
        }
      }
    }
  }
  UseFp32Kernel(Fp32Kernel::kOpenblas, "the test");  // something else, to see the cache set it
  UseFp32Kernel(Fp32Kernel::kAuto, "the test");
  const KernelChoice second = Calibrate(req, cache, false);
  EXPECT_EQ(second.source, "cache");
  // The same choice and figures; only where it came from differs.
  KernelChoice as_measured = second;
  as_measured.source = first.source;
  EXPECT_EQ(ChoiceToJson(as_measured), ChoiceToJson(first));
  for (const ClassChoice& cc : second.classes)
    EXPECT_EQ(Fp32KernelName(ActiveFp32Kernel(cc.cls)), cc.chosen);
  EXPECT_EQ(Calibrate(req, cache, /*recalibrate=*/true).source, "measured");
}

TEST(Calibrate, InferenceAndLoraHaveTheirOwnClasses) {
  WorkerPool pool({0, 1}, nullptr, "calibrate_test");  // unpinned: two workers, as a group's
  model::ProductRun run;
  run.shape = model::Shape(64, 256, 256, 2, 4, 64);
  run.rows = 128;
  run.T = 64;
  run.train = false;
  std::vector<GemmClass> got;
  {
    model::ProductWorks works(pool, run);
    for (const ClassWork& w : works.Works("fp32", 1e6)) {
      got.push_back(w.cls);
      w.run();
    }
  }
  EXPECT_EQ(got,
            (std::vector<GemmClass>{GemmClass::kFwd, GemmClass::kHeadFwd, GemmClass::kAttnFwd}));
  run.train = true;
  run.lora_r = 4;
  got.clear();
  model::ProductWorks works(pool, run);
  for (const ClassWork& w : works.Works("fp32", 1e6)) {
    got.push_back(w.cls);
    w.run();
  }
  EXPECT_EQ(got, (std::vector<GemmClass>{GemmClass::kFwd, GemmClass::kDinp, GemmClass::kHeadFwd,
                                         GemmClass::kHeadDinp, GemmClass::kAttnFwd,
                                         GemmClass::kAttnBwd, GemmClass::kLora}))
      << "a frozen base has no weight gradients";
  EXPECT_NE(works.Workload("fp32").find("LoRA rank 4"), std::string::npos);
}

// The LoRA class's product is C x C on the model's own width: its buffers must hold C columns
// even where the linear classes cut theirs (kMaxWeight / C: 1024 for C = 4096, Llama 3.1 8B's);
// it wrote 4x past its output buffer. Run on our own kernel, compiled with the project (OpenBLAS
// is not instrumented), so that the sanitizer build reports such a write.
TEST(Calibrate, TheLoraClassFitsItsBuffersOnAWideModel) {
  const Fp32Kernel before = ActiveFp32Kernel(GemmClass::kLora);
  SetFp32Kernel(GemmClass::kLora, Fp32Kernel::kOwn);
  WorkerPool pool({0, 1}, nullptr, "calibrate_test");
  model::ProductRun run;
  run.shape = model::Shape(64, 256, 256, 1, 32, 4096);
  run.rows = 64;
  run.T = 64;
  run.train = true;
  run.lora_r = 16;
  model::ProductWorks works(pool, run);
  bool lora = false;
  for (const ClassWork& w : works.Works("fp32", 1e8)) {
    if (w.cls != GemmClass::kLora) continue;
    lora = true;
    EXPECT_NE(w.shapes.find("4096x4096"), std::string::npos) << w.shapes;
    w.run();
  }
  EXPECT_TRUE(lora);
  SetFp32Kernel(GemmClass::kLora, before);
}

}  // namespace
}  // namespace cputrain::kernels
