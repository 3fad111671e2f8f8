// A build without oneDNN (CPUTRAIN_ONEDNN=OFF, or auto with no oneDNN found): `bench gemm`
// leaves the onednn-bf16 rows out and says why (OnednnBf16Gemm::kMissing).
#include <memory>

#include "bench/onednn_gemm.h"
#include "common/error.h"

namespace cputrain::bench {

struct OnednnBf16Gemm::State {};

OnednnBf16Gemm::OnednnBf16Gemm() = default;
OnednnBf16Gemm::~OnednnBf16Gemm() = default;

void OnednnBf16Gemm::SetCallerThreads(int) {}
bool OnednnBf16Gemm::Available() { return false; }
std::string OnednnBf16Gemm::impl() const { return "none"; }

void OnednnBf16Gemm::Run(int, int, int, const uint16_t*, bool, int, const uint16_t*, bool, int,
                         float*, int) {
  throw InputError("oneDNN's bf16 matmul was asked for", kMissing);
}

}  // namespace cputrain::bench
