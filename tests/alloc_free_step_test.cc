// "No heap allocation inside a training step after the first": every operator new in this test
// binary is counted (a global replacement), and the trainer's step probe reads the count before
// and after each step. Forward, backward, the bucketed gradient sync (inline and with comm
// threads), the norm, AdamW and the allgather must allocate nothing from step 2 on, with 1 and
// 2 groups; and in bf16 (the weight copy's refresh, the operand conversions, the bf16 GEMM's
// per-thread packing buffers, sized on a thread's first call), with one replica, two, and two
// groups sharing one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "bf16_kernels.h"
#include "config/config.h"
#include "kernels/bf16.h"
#include "test_util.h"
#include "train/trainer.h"

namespace {
std::atomic<long> g_news{0};
}  // namespace

// GCC 12 at -O1 (the ASan build) inlines the deletes below into gtest's `new TestClass` and
// reports -Wmismatched-new-delete (free() on memory from operator new): it does not see that this
// operator new is malloc. A false positive, silenced for these six definitions only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace cputrain::train {
namespace {

std::vector<long> AllocationsPerStep(const std::vector<std::string>& sets) {
  const std::string dir = std::string(CPUTRAIN_SOURCE_DIR) + "/tests/reference/fixtures/odd";
  test::TempDir out;
  std::vector<std::string> all = {"model.init_from=" + dir + "/model.bin",
                                  "data.train=" + dir + "/train.bin",
                                  "data.val=", "train.out_dir=" + out.path(), "train.steps=6",
                                  // auto picks oneDNN where OpenBLAS runs narrow kernels; its
                                  // execute allocates per call (kernels/kernels.h)
                                  "train.fp32_kernel=openblas"};
  all.insert(all.end(), sets.begin(), sets.end());
  Config c = LoadConfig(dir + "/config.yaml", all);
  std::vector<long> per_step;
  long before = 0;
  TrainOptions o;
  o.progress = Progress::kQuiet;
  o.step_probe = [&](bool begin) {
    const long now = g_news.load();
    if (begin) {
      before = now;
    } else {
      per_step.push_back(now - before);
    }
  };
  const long start = g_news.load();
  Train(c, o);
  // The counter sees the trainer's allocations (set-up allocates plenty): the zeros below mean
  // something.
  EXPECT_GT(g_news.load() - start, 100);
  return per_step;
}

void ExpectNoAllocationAfterTheFirstStep(const std::vector<long>& per_step) {
  ASSERT_EQ(per_step.size(), 6u);
  for (std::size_t s = 1; s < per_step.size(); ++s) {
    EXPECT_EQ(per_step[s], 0) << "step " << s + 1 << " allocated " << per_step[s] << " times";
  }
}

TEST(AllocFreeStep, OneGroup) { ExpectNoAllocationAfterTheFirstStep(AllocationsPerStep({})); }

TEST(AllocFreeStep, TwoGroupsInlineSync) {
  ExpectNoAllocationAfterTheFirstStep(
      AllocationsPerStep({"topology=synthetic:pack:2 numa:1 core:1 pu:1", "comm.bucket_mb=0.05"}));
}

TEST(AllocFreeStep, TwoGroupsWithCommThreads) {
  ExpectNoAllocationAfterTheFirstStep(
      AllocationsPerStep({"topology=synthetic:pack:2 numa:1 core:2 pu:1",
                          "placement.comm_threads=1", "comm.bucket_mb=0.05"}));
}

// bf16's products need AVX512_BF16; elsewhere training refuses it (CliTrain tests that).
TEST(AllocFreeStep, Bf16OneGroup) {
  if (!kernels::DetectBf16().trains()) GTEST_SKIP() << kernels::DetectBf16().Describe();
  ExpectNoAllocationAfterTheFirstStep(AllocationsPerStep({"train.precision=bf16"}));
}

TEST(AllocFreeStep, Bf16TwoReplicas) {
  if (!kernels::DetectBf16().trains()) GTEST_SKIP() << kernels::DetectBf16().Describe();
  ExpectNoAllocationAfterTheFirstStep(
      AllocationsPerStep({"train.precision=bf16", "topology=synthetic:pack:2 numa:1 core:1 pu:1",
                          "comm.bucket_mb=0.05"}));
}

TEST(AllocFreeStep, Bf16TwoGroupsSharingAReplica) {
  if (!kernels::DetectBf16().trains()) GTEST_SKIP() << kernels::DetectBf16().Describe();
  ExpectNoAllocationAfterTheFirstStep(AllocationsPerStep(
      {"train.precision=bf16", "topology=synthetic:pack:1 numa:1 l3:2 core:1 pu:1",
       "placement.group_by=l3", "comm.bucket_mb=0.05"}));
}

// The same on each of our bf16 kernels (tests/bf16_kernels.h; AMX a skip without it): the tile
// model's and the AMX kernel's packing buffers and tile state are per thread, made on its first
// call. (oneDNN's kernel is not here: its execute allocates its argument maps on every call,
// docs/bf16.md, which is why auto never picks it.)
class AllocFreeStepKernels : public ::testing::TestWithParam<kernels::Bf16Kernel> {};

TEST_P(AllocFreeStepKernels, Bf16OneGroup) {
  if (const std::string why = kernels::Bf16KernelMissing(GetParam()); !why.empty()) {
    GTEST_SKIP() << why;
  }
  ExpectNoAllocationAfterTheFirstStep(
      AllocationsPerStep({"train.precision=bf16", std::string("train.bf16_kernel=") +
                                                      kernels::Bf16KernelName(GetParam())}));
}

INSTANTIATE_TEST_SUITE_P(OurKernels, AllocFreeStepKernels,
                         ::testing::Values(kernels::Bf16Kernel::kVdpbf16ps,
                                           kernels::Bf16Kernel::kAmx,
                                           kernels::Bf16Kernel::kTileModel),
                         test::Bf16KernelTestName);

}  // namespace
}  // namespace cputrain::train
