#include "train/batches.h"

#include <fmt/format.h>
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <utility>

#include "common/error.h"

namespace cputrain::train {
namespace {

bool HasGlobChars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// The paths one pattern matches, sorted (glob's order).
std::vector<std::string> Glob(const std::string& pattern, const char* key) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) out.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  // A file whose name holds * ? or [ itself, named literally.
  if (out.empty() && ::access(pattern.c_str(), F_OK) == 0) out.push_back(pattern);
  if (out.empty()) {
    throw InputError(fmt::format("{}: the pattern '{}' matches no file", key, pattern),
                     "check the directory and the pattern (cputrain-numa prepare-data "
                     "--shard-tokens writes NAME_train_000000.bin ...)");
  }
  return out;
}

// SplitMix64 (Steele, Lea, Flood 2014): a fixed, portable generator; std::shuffle's draws are
// implementation-defined, and the order must be the same wherever the run goes on.
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias (Lemire 2019: multiply, reject the short interval).
uint64_t Below(uint64_t& state, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const unsigned __int128 m = static_cast<unsigned __int128>(SplitMix64(state)) * bound;
    if (static_cast<uint64_t>(m) >= threshold) return static_cast<uint64_t>(m >> 64);
  }
}

}  // namespace

std::vector<std::string> ExpandShards(const std::vector<std::string>& specs, const char* key) {
  std::vector<std::string> paths;
  for (const std::string& s : specs) {
    if (s.empty()) continue;
    if (!HasGlobChars(s)) {
      paths.push_back(s);
      continue;
    }
    for (std::string& p : Glob(s, key)) paths.push_back(std::move(p));
  }
  if (paths.empty()) {
    throw InputError(fmt::format("{} is not set", key),
                     fmt::format("set it to token files (cputrain-numa prepare-data writes them): "
                                 "a path, a glob or a list, e.g. --set {}=data/kjv/train.bin",
                                 key));
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

TokenWindows::TokenWindows(std::vector<data::TokenFile> files, int B, int T)
    : files_(std::move(files)), B_(B), T_(T) {
  const std::size_t bt = static_cast<std::size_t>(B) * T;
  starts_.push_back(0);
  for (const data::TokenFile& f : files_) starts_.push_back(starts_.back() + (f.size() - 1) / bt);
}

TokenWindows TokenWindows::Open(const std::vector<std::string>& specs, const char* key, int vocab,
                                int B, int T) {
  std::vector<data::TokenFile> files;
  for (const std::string& path : ExpandShards(specs, key)) {
    data::TokenFile f = data::TokenFile::Open(path);
    f.CheckBelow(vocab);
    files.push_back(std::move(f));
  }
  TokenWindows w(std::move(files), B, T);
  if (w.windows() == 0) {
    const std::string what = w.shard_count() == 1
                                 ? fmt::format("'{}' has {} tokens", w.files_[0].path(), w.tokens())
                                 : fmt::format("none of its {} shards has", w.shard_count());
    throw InputError(fmt::format("{}: {}: fewer than one batch of B*T+1 = {} tokens", key, what,
                                 static_cast<std::size_t>(B) * T + 1),
                     "use a larger file, or lower data.batch_size or data.seq_len");
  }
  return w;
}

std::size_t TokenWindows::tokens() const {
  std::size_t n = 0;
  for (const data::TokenFile& f : files_) n += f.size();
  return n;
}

void TokenWindows::LoadRows(std::size_t w, int row0, int rows, int* inputs, int* targets) const {
  // The shard holding window w: the last start <= w.
  const std::size_t i = static_cast<std::size_t>(
                            std::upper_bound(starts_.begin(), starts_.end(), w) - starts_.begin()) -
                        1;
  const std::size_t local = w - starts_[i];
  const std::size_t first =
      local * static_cast<std::size_t>(B_) * T_ + static_cast<std::size_t>(row0) * T_;
  const std::size_t n = static_cast<std::size_t>(rows) * T_;
  // Ids of either width (uint16 or uint32 files), widened to int.
  files_[i].Read(first, n, inputs);
  files_[i].Read(first + 1, n, targets);
}

WindowOrder::WindowOrder(std::size_t n, bool shuffle, uint64_t seed)
    : n_(n), shuffle_(shuffle), seed_(seed) {
  if (shuffle_) perm_.resize(n_);
}

void WindowOrder::Permutation(std::size_t n, uint64_t seed, uint64_t e, std::size_t* out) {
  EpochPermutation(n, seed, e, out);
}

void EpochPermutation(std::size_t n, uint64_t seed, uint64_t e, std::size_t* out) {
  std::iota(out, out + n, std::size_t{0});
  // One stream per (seed, epoch): mix the two so nearby seeds and epochs share no draws.
  uint64_t mix = seed;
  uint64_t state = SplitMix64(mix) ^ (e * 0xd1342543de82ef95ULL + 0x632be59bd9b4e019ULL);
  for (std::size_t i = n; i > 1; --i) std::swap(out[i - 1], out[Below(state, i)]);
}

void BalancedOrder(std::size_t n, const int* lengths, std::size_t* order) {
  std::vector<std::size_t> sorted(n);
  std::iota(sorted.begin(), sorted.end(), std::size_t{0});
  std::stable_sort(sorted.begin(), sorted.end(),
                   [lengths](std::size_t x, std::size_t y) { return lengths[x] > lengths[y]; });
  int a = 0;  // n = 2^a * m, m odd
  while (n > 0 && (n >> a) % 2 == 0) ++a;
  const std::size_t m = n >> a;
  for (std::size_t r = 0; r < n; ++r) {
    std::size_t share = 0;  // its bits, top first: the half, the quarter in it, ...
    for (int j = 0; j < a; ++j) {
      share |= static_cast<std::size_t>(std::popcount(r >> j) & 1) << (a - 1 - j);
    }
    order[share * m + (r >> a)] = sorted[r];
  }
}

std::size_t WindowOrder::At(uint64_t p) {
  const std::size_t in_epoch = static_cast<std::size_t>(p % n_);
  if (!shuffle_) return in_epoch;
  const uint64_t e = EpochOf(p);
  if (e != epoch_) {
    Permutation(n_, seed_, e, perm_.data());
    epoch_ = e;
  }
  return perm_[in_epoch];
}

}  // namespace cputrain::train
