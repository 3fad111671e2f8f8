#include "train/train_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "data/token_file.h"
#include "model/checkpoint_path.h"

namespace cputrain::train {
namespace {

constexpr uint64_t kHeaderBytes = 32;
constexpr uint64_t kMaxMetaBytes = 1 << 20;

nlohmann::json ToJson(const TrainState& s) {
  const model::Shape& sh = s.shape;
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardRecord& r : s.shards) shards.push_back({{"path", r.path}, {"tokens", r.tokens}});
  nlohmann::json j = {
      {"step", s.step},
      {"skipped_steps", s.skipped_steps},
      {"next_window", s.next_window},
      {"epoch", s.epoch},
      {"shuffle", s.shuffle},
      {"data_seed", s.data_seed},
      {"tokens", s.tokens},
      {"seed", s.seed},
      {"config_hash", fmt::format("{:016x}", s.config_hash)},
      {"lr", s.lr},
      {"shape",
       {{"max_seq_len", sh.maxT},
        {"vocab_size", sh.V},
        {"padded_vocab_size", sh.Vp},
        {"layers", sh.L},
        {"heads", sh.NH},
        {"channels", sh.C}}},
      {"data", {{"train", shards}, {"batch_size", s.batch_size}, {"seq_len", s.seq_len}}}};
  if (!s.kernels.is_null()) j["kernels"] = s.kernels;
  return j;
}

// Version 1 named one train file and its bytes, and had no shuffle: a v1 state reads as one shard
// without shuffle.
TrainState FromJson(const nlohmann::json& j, uint32_t version) {
  TrainState s;
  s.step = j.at("step").get<int>();
  s.skipped_steps = j.at("skipped_steps").get<int>();
  s.next_window = j.at("next_window").get<uint64_t>();
  s.seed = j.at("seed").get<uint64_t>();
  s.config_hash = std::stoull(j.at("config_hash").get<std::string>(), nullptr, 16);
  s.lr = j.at("lr").get<double>();
  const nlohmann::json& sh = j.at("shape");
  s.shape = {sh.at("max_seq_len").get<int>(),
             sh.at("vocab_size").get<int>(),
             sh.at("padded_vocab_size").get<int>(),
             sh.at("layers").get<int>(),
             sh.at("heads").get<int>(),
             sh.at("channels").get<int>()};
  const nlohmann::json& d = j.at("data");
  if (version == 1) {
    const uint64_t bytes = d.at("train_bytes").get<uint64_t>();
    const uint64_t header = data::kTokenFileHeaderBytes;
    s.shards.push_back(
        {d.at("train").get<std::string>(), bytes > header ? (bytes - header) / 2 : 0});
  } else {
    for (const nlohmann::json& r : d.at("train"))
      s.shards.push_back({r.at("path").get<std::string>(), r.at("tokens").get<uint64_t>()});
    s.epoch = j.at("epoch").get<uint64_t>();
    s.shuffle = j.at("shuffle").get<bool>();
    s.data_seed = j.at("data_seed").get<uint64_t>();
    s.tokens = j.at("tokens").get<uint64_t>();
  }
  s.batch_size = d.at("batch_size").get<int>();
  s.seq_len = d.at("seq_len").get<int>();
  if (version == 1) s.tokens = static_cast<uint64_t>(s.step) * s.batch_size * s.seq_len;
  if (j.contains("kernels") && j["kernels"].is_object()) s.kernels = j["kernels"];
  return s;
}

[[noreturn]] void Damaged(const std::string& path, const std::string& what) {
  throw InputError(fmt::format("checkpoint state '{}': {}", path, what),
                   "the file is damaged or not a cputrain-numa state.bin; resume from an older "
                   "checkpoint (train.resume: PATH) or start a new out_dir");
}

}  // namespace

std::size_t OptimizerState::floats() const {
  std::size_t n = 0;
  for (const Group& g : groups) {
    for (auto d : g.data) n += d.size();
  }
  return n;
}

namespace {

// Slot k's whole-model vector, from the groups' pieces in order: a piece (or its start) that an
// earlier group already wrote is skipped (the same values, optim/optimizer.h).
void WriteSlot(AtomicFileWriter& w, const OptimizerState& opt, std::size_t k) {
  std::size_t written = 0;
  for (const OptimizerState::Group& g : opt.groups) {
    for (const optim::SlotPiece& p : g.slots[k].pieces) {
      if (p.full + p.len <= written) continue;
      CPUTRAIN_CHECK(p.full <= written, "an optimizer slot has a part no group holds");
      const std::size_t skip = written - p.full;
      w.Write(g.data[k].data() + p.local + skip, (p.len - skip) * sizeof(float));
      written = p.full + p.len;
    }
  }
  CPUTRAIN_CHECK(written == opt.groups[0].slots[k].full, "an optimizer slot ends early");
}

}  // namespace

void WriteTrainState(const std::string& path, const TrainState& state, const OptimizerState& opt,
                     const FileDigest& model) {
  CPUTRAIN_CHECK(!opt.groups.empty(), "no optimizer state to write");
  nlohmann::json meta_json = ToJson(state);
  nlohmann::json slots = nlohmann::json::array();
  uint64_t n = 0;
  for (const optim::Slot& slot : opt.groups[0].slots) {
    slots.push_back({{"name", slot.name}, {"floats", slot.full}});
    n += slot.full;
  }
  meta_json["optimizer"] = {{"name", opt.name}, {"slots", slots}};
  const std::string meta = meta_json.dump();
  unsigned char header[kHeaderBytes] = {};
  std::memcpy(header, model::kStateMagic, 8);
  const uint64_t meta_bytes = meta.size();
  std::memcpy(header + 8, &model::kStateVersion, 4);
  std::memcpy(header + 16, &meta_bytes, 8);
  std::memcpy(header + 24, &n, 8);
  AtomicFileWriter w(path);
  w.Write(header, kHeaderBytes);
  w.Write(meta);
  for (std::size_t k = 0; k < opt.groups[0].slots.size(); ++k) WriteSlot(w, opt, k);
  // The trailer (model/checkpoint_path.h): model.bin's digest, then this file's CRC32C so far.
  unsigned char trailer[12];
  std::memcpy(trailer, &model.bytes, 8);
  std::memcpy(trailer + 8, &model.crc32c, 4);
  w.Write(trailer, sizeof trailer);
  const uint32_t crc = w.digest().crc32c;
  w.Write(&crc, sizeof crc);
  w.Commit();
}

TrainStateReader::TrainStateReader(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "rb");
  if (!f_) {
    throw InputError(
        fmt::format("checkpoint state '{}': cannot open: {}", path_, std::strerror(errno)),
        "a checkpoint directory holds model.bin and state.bin; check train.resume");
  }
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path_, ec);
  unsigned char header[kHeaderBytes];
  if (ec || size < kHeaderBytes || std::fread(header, 1, kHeaderBytes, f_) != kHeaderBytes) {
    Damaged(path_, "shorter than its 32-byte header");
  }
  if (std::memcmp(header, model::kStateMagic, 8) != 0) {
    Damaged(path_, "bad magic (expected CPTNSTAT)");
  }
  uint32_t version = 0;
  uint64_t meta_bytes = 0;
  std::memcpy(&version, header + 8, 4);
  std::memcpy(&meta_bytes, header + 16, 8);
  std::memcpy(&n_, header + 24, 8);
  if (version < 1 || version > model::kStateVersion) {
    throw InputError(fmt::format("checkpoint state '{}': version {} is not supported (expected {})",
                                 path_, version, model::kStateVersion),
                     "resume with the cputrain-numa version that wrote it");
  }
  // Every size checked against the file length before use (no overflow: both are bounded).
  // Before version 4, n floats in each of m and v.
  const uint64_t trailer = version >= 3 ? model::kStateTrailerBytes : 0;
  const uint64_t per_float = version >= 4 ? 4 : 8;
  if (meta_bytes > kMaxMetaBytes || size < kHeaderBytes + trailer ||
      n_ > (size - kHeaderBytes - trailer) / per_float ||
      size != kHeaderBytes + meta_bytes + per_float * n_ + trailer) {
    Damaged(path_, fmt::format("{} bytes do not match its header (meta {} bytes, {} floats)", size,
                               meta_bytes, n_));
  }
  std::string meta(meta_bytes, '\0');
  if (std::fread(meta.data(), 1, meta_bytes, f_) != meta_bytes) Damaged(path_, "truncated");
  try {
    const nlohmann::json j = nlohmann::json::parse(meta);
    state_ = FromJson(j, version);
    ReadSlotRecords(j, version);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    Damaged(path_, fmt::format("unreadable meta: {}", e.what()));
  }
  data_offset_ = kHeaderBytes + meta_bytes;
  size_ = size;
  if (trailer > 0) {
    const std::optional<model::StateTrailer> t = model::ReadStateTrailer(path_);
    if (!t) Damaged(path_, "cannot read its checksums");
    model_digest_ = t->model;
    state_crc32c_ = t->state_crc32c;
  }
}

void TrainStateReader::VerifyChecksum() const {
  if (!model_digest_) return;  // version 1 or 2: no checksum recorded
  static const InputKind kState{"checkpoint state", "a state.bin file", UINT64_MAX,
                                "check train.resume"};
  const uint32_t crc = DigestFile(path_, kState, size_ - sizeof(uint32_t)).crc32c;
  if (crc != state_crc32c_) {
    throw InputError(
        fmt::format("checkpoint state '{}' is damaged: its CRC32C is {:08x}, its trailer records "
                    "{:08x} (a flipped bit, a bad disk or copy)",
                    path_, crc, state_crc32c_),
        // The resume that reads it names --resume-fallback where there is an earlier checkpoint
        // to fall back to (train/resume.cc): said once, there.
        "copy the checkpoint again from a good source, or use the one before it");
  }
}

TrainStateReader::~TrainStateReader() {
  if (f_) std::fclose(f_);
}

void TrainStateReader::ReadSlotRecords(const nlohmann::json& j, uint32_t version) {
  if (version < 4) {  // the m and v of optim.name's default, n floats each
    optimizer_ = optim::kVersion3StateOptimizer;
    slots_ = {{"m", n_}, {"v", n_}};
    return;
  }
  const nlohmann::json& o = j.at("optimizer");
  optimizer_ = o.at("name").get<std::string>();
  uint64_t total = 0;
  for (const nlohmann::json& r : o.at("slots")) {
    slots_.push_back({r.at("name").get<std::string>(), r.at("floats").get<uint64_t>()});
    if (slots_.back().floats > n_ - total) {
      Damaged(path_,
              fmt::format("its optimizer slots hold more than the {} floats of its header", n_));
    }
    total += slots_.back().floats;
  }
  if (total != n_) {
    Damaged(path_, fmt::format("its optimizer slots hold {} floats, its header {}", total, n_));
  }
}

void TrainStateReader::CheckSlots(const std::string& name,
                                  const std::vector<optim::Slot>& want) const {
  const std::string fix =
      "resume with the optimizer and settings that wrote it (optim.name and its settings; "
      "the task commands' --optim), or start a new run from its weights (model.init_from: the "
      "checkpoint directory)";
  if (name != optimizer_) {
    throw InputError(fmt::format("checkpoint state '{}' holds the state of optimizer {}; this "
                                 "run's optimizer is {}",
                                 path_, optimizer_, name),
                     fix);
  }
  bool same = want.size() == slots_.size();
  std::string theirs, ours;
  for (std::size_t k = 0; k < slots_.size(); ++k) {
    theirs += fmt::format("{}{} ({} floats)", k ? ", " : "", slots_[k].name, slots_[k].floats);
    same = same && k < want.size() && want[k].name == slots_[k].name &&
           want[k].full == slots_[k].floats;
  }
  for (std::size_t k = 0; k < want.size(); ++k)
    ours += fmt::format("{}{} ({} floats)", k ? ", " : "", want[k].name, want[k].full);
  if (!same) {
    throw InputError(
        fmt::format("checkpoint state '{}' holds {}'s slots {}; this run's model and "
                    "settings keep {}",
                    path_, name, theirs.empty() ? "none" : theirs, ours.empty() ? "none" : ours),
        fix +
            "; a model of another size: model.bin and state.bin come from "
            "different runs");
  }
}

void TrainStateReader::ReadSlots(const std::vector<optim::Slot>& slots,
                                 std::span<float* const> out) {
  CPUTRAIN_CHECK(slots.size() == slots_.size() && out.size() == slots.size(),
                 "ReadSlots before CheckSlots");
  uint64_t start = 0;  // of slot k's vector, in floats from the data
  for (std::size_t k = 0; k < slots.size(); ++k) {
    for (const optim::SlotPiece& p : slots[k].pieces) {
      CPUTRAIN_CHECK(p.full + p.len <= slots_[k].floats, "slot piece out of bounds");
      const uint64_t at = data_offset_ + 4 * (start + p.full);
      float* dst = out[k] + p.local;
      if (fseeko(f_, static_cast<off_t>(at), SEEK_SET) != 0 ||
          std::fread(dst, sizeof(float), p.len, f_) != p.len) {
        Damaged(path_, fmt::format("cannot read the optimizer's {}: {}", slots_[k].name,
                                   std::strerror(errno)));
      }
      const uint64_t bad = model::FirstNonFinite(dst, p.len);
      if (bad < p.len) {
        Damaged(path_, fmt::format("the optimizer's {} holds a non-finite value at {}",
                                   slots_[k].name, p.full + bad));
      }
    }
    start += slots_[k].floats;
  }
}

}  // namespace cputrain::train
