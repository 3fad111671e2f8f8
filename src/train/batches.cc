#include "train/batches.h"

#include <fmt/format.h>

#include <utility>

#include "common/error.h"

namespace cputrain::train {

TokenWindows::TokenWindows(data::TokenFile file, int B, int T)
    : file_(std::move(file)),
      B_(B),
      T_(T),
      windows_((file_.size() - 1) / (static_cast<std::size_t>(B) * T)) {}

TokenWindows TokenWindows::Open(const std::string& path, const char* key, int vocab, int B, int T) {
  if (path.empty()) {
    throw InputError(fmt::format("{} is not set", key),
                     "set it to a token file (cputrain-numa prepare-data writes them), e.g. "
                     "--set data.train=data/kjv/train.bin");
  }
  data::TokenFile f = data::TokenFile::Open(path);
  f.CheckBelow(vocab);
  TokenWindows w(std::move(f), B, T);
  if (w.windows() == 0) {
    throw InputError(fmt::format("{} '{}' has {} tokens: fewer than one batch of B*T+1 = {} tokens",
                                 key, path, w.file_.size(), static_cast<std::size_t>(B) * T + 1),
                     "use a larger file, or lower data.batch_size or data.seq_len");
  }
  return w;
}

void TokenWindows::LoadRows(std::size_t w, int row0, int rows, int* inputs, int* targets) const {
  const uint16_t* base =
      file_.data() + w * static_cast<std::size_t>(B_) * T_ + static_cast<std::size_t>(row0) * T_;
  const std::size_t n = static_cast<std::size_t>(rows) * T_;
  for (std::size_t i = 0; i < n; ++i) {
    inputs[i] = base[i];
    targets[i] = base[i + 1];
  }
}

}  // namespace cputrain::train
