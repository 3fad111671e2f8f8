// For the tests that run a bf16 check once per bf16 kernel (kernels/bf16.h): every kernel, made
// active before its run; one that cannot run here is skipped with the reason (GTEST_SKIP), so the
// AMX runs are skips on a CPU without AMX and the tile model runs everywhere.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kernels/bf16.h"

namespace cputrain::test {

// Makes `k` the active kernel; "" on success, else why it cannot run here.
inline std::string ActivateBf16Kernel(kernels::Bf16Kernel k) {
  if (std::string why = kernels::Bf16KernelMissing(k); !why.empty()) return why;
  kernels::UseBf16Kernel(k, "the test");
  return "";
}

// The parameter values and their names (tile-model -> tile_model).
inline auto AllBf16Kernels() {
  return ::testing::Values(kernels::Bf16Kernel::kVdpbf16ps, kernels::Bf16Kernel::kAmx,
                           kernels::Bf16Kernel::kTileModel, kernels::Bf16Kernel::kOnednn);
}
inline std::string Bf16KernelTestName(const ::testing::TestParamInfo<kernels::Bf16Kernel>& info) {
  std::string n = kernels::Bf16KernelName(info.param);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

}  // namespace cputrain::test
