// A build without oneDNN (CPUTRAIN_ONEDNN=OFF, or auto with no oneDNN found): OnednnGemm is not
// available, and says why (kernels/onednn.h).
#include <memory>

#include "common/error.h"
#include "kernels/onednn.h"

namespace cputrain::kernels {

struct OnednnGemm::State {};

OnednnGemm::OnednnGemm() = default;
OnednnGemm::~OnednnGemm() = default;

void OnednnGemm::SetCallerThreads(int) {}
bool OnednnGemm::Available() { return false; }
std::string OnednnGemm::Isa() { return "none"; }
std::string OnednnGemm::Version() { return "none"; }
std::string OnednnGemm::impl() const { return "none"; }

void OnednnGemm::RunBf16(int, int, int, const uint16_t*, bool, int, const uint16_t*, bool, int,
                         float*, int, bool) {
  throw InputError("oneDNN's matmul was asked for", kMissing);
}
void OnednnGemm::RunF32(int, int, int, const float*, bool, int, const float*, bool, int, float*,
                        int, float, float) {
  throw InputError("oneDNN's matmul was asked for", kMissing);
}

}  // namespace cputrain::kernels
