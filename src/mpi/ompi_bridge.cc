#include "mpi/ompi_bridge.h"

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "comm/kernels.h"
#include "common/error.h"
#include "common/log.h"

namespace cputrain::mpi {
namespace {

constexpr int kHeartbeatTag = 7001;
constexpr int kBeat = 1, kBye = 2;
constexpr int kHostChars = 128;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw RuntimeError(fmt::format("MPI call {} failed: {}", what, std::string(msg, len)),
                       "see docs/multi-node.md (network interfaces, firewall, hostfile)");
  }
}

std::string JoinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

struct OmpiBridge::Impl {
  MPI_Comm main = MPI_COMM_NULL;                 // the main thread's collectives
  MPI_Comm hb = MPI_COMM_NULL;                   // heartbeats (the watchdog thread only)
  std::vector<MPI_Comm> groups;                  // group index h of every process
  std::vector<std::vector<float>> scratch;       // per group: one received message
  std::vector<std::vector<int>> counts, displs;  // per group: block sizes and offsets
  std::vector<std::string> hosts;                // per rank
  // Since when (Now(), as bits) each slot has been blocked in an inter-node call; 0 = not.
  // Slot g is group g's sync thread, slot `group_slots` the main thread. Published once by
  // CheckConsistent (release store of the pointer), read by the watchdog (acquire).
  std::atomic<std::atomic<double>*> wait_since{nullptr};
  std::unique_ptr<std::atomic<double>[]> wait_storage;
  std::atomic<int> slots{0};
  std::atomic<double> main_wait{0};
};

bool BuiltWithMpi() { return true; }

std::unique_ptr<Bridge> StartBridge(const MpiConfig& config, Bridge::ExitProcess exit_process) {
  return OmpiBridge::Start(config, exit_process);
}

std::unique_ptr<Bridge> OmpiBridge::Start(const MpiConfig& config, ExitProcess exit_process) {
  int provided = 0;
  Check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  std::unique_ptr<OmpiBridge> b(new OmpiBridge());
  b->impl_ = std::make_unique<Impl>();
  Impl& im = *b->impl_;
  MPI_Comm_rank(MPI_COMM_WORLD, &b->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &b->size_);
  if (provided < MPI_THREAD_MULTIPLE) {
    b->finished_ = true;  // nothing to abort yet
    MPI_Finalize();
    throw RuntimeError("this MPI library does not provide MPI_THREAD_MULTIPLE",
                       "use Debian's Open MPI (openmpi-bin, libopenmpi-dev), which provides it");
  }
  b->watchdog_seconds_ = config.watchdog_seconds;
  b->exit_process_ = exit_process;
  // Errors come back as codes (Check turns them into exceptions) instead of killing the job
  // without a word.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  Check(MPI_Comm_dup(MPI_COMM_WORLD, &im.main), "MPI_Comm_dup");
  Check(MPI_Comm_dup(MPI_COMM_WORLD, &im.hb), "MPI_Comm_dup");
  char host[kHostChars] = {};
  gethostname(host, kHostChars - 1);
  std::vector<char> all(static_cast<std::size_t>(kHostChars) * b->size_);
  Check(MPI_Allgather(host, kHostChars, MPI_CHAR, all.data(), kHostChars, MPI_CHAR, im.main),
        "MPI_Allgather(hosts)");
  for (int r = 0; r < b->size_; ++r) im.hosts.emplace_back(all.data() + r * kHostChars);
  if (b->rank_ != 0) {
    log::SetPrefix(fmt::format("[rank {}] ", b->rank_));
    // rank 0 speaks for the job, unless --log-level asked for debug (or less)
    if (log::GetLevel() == log::Level::kInfo) log::SetLevel(log::Level::kWarn);
  }
  log::Info(
      "MPI bridge: {} processes ({} host(s)), watchdog {} s", b->size_,
      [&] {
        std::vector<std::string> h = im.hosts;
        std::sort(h.begin(), h.end());
        return std::unique(h.begin(), h.end()) - h.begin();
      }(),
      b->watchdog_seconds_);
  if (b->size_ > 1) b->watchdog_ = std::thread([p = b.get()] { p->WatchdogLoop(); });
  return b;
}

OmpiBridge::~OmpiBridge() {
  if (!finished_) Abort(1, "the MPI bridge was shut down without finishing the run");
}

void OmpiBridge::EnterWait(int slot) {
  std::atomic<double>* w = impl_->wait_since.load(std::memory_order_acquire);
  if (slot < 0) {
    impl_->main_wait.store(Now(), std::memory_order_relaxed);
  } else if (w) {
    w[slot].store(Now(), std::memory_order_relaxed);  // a diagnosis hint: relaxed is enough
  }
}

void OmpiBridge::LeaveWait(int slot) {
  std::atomic<double>* w = impl_->wait_since.load(std::memory_order_acquire);
  if (slot < 0) {
    impl_->main_wait.store(0, std::memory_order_relaxed);
  } else if (w) {
    w[slot].store(0, std::memory_order_relaxed);
  }
}

void OmpiBridge::CheckConsistent(uint64_t config_hash, uint64_t model_hash, int groups) {
  Impl& im = *impl_;
  const uint64_t mine[3] = {config_hash, model_hash, static_cast<uint64_t>(groups)};
  std::vector<uint64_t> all(3 * static_cast<std::size_t>(size_));
  EnterWait(-1);
  Check(MPI_Allgather(mine, 3, MPI_UINT64_T, all.data(), 3, MPI_UINT64_T, im.main),
        "MPI_Allgather(consistency)");
  LeaveWait(-1);
  std::vector<int> bad_config, bad_model, bad_groups;
  for (int r = 1; r < size_; ++r) {
    if (all[3 * r] != all[0]) bad_config.push_back(r);
    if (all[3 * r + 1] != all[1]) bad_model.push_back(r);
    if (all[3 * r + 2] != all[2]) bad_groups.push_back(r);
  }
  if (!bad_config.empty()) {
    throw InputError(fmt::format("rank(s) {} run a different configuration than rank 0 (config "
                                 "hash {:016x} on rank 0)",
                                 JoinRanks(bad_config), all[0]),
                     "start every rank with the same --config file and --set flags (the file must "
                     "be the same on every host)");
  }
  if (!bad_model.empty()) {
    throw InputError(
        fmt::format("rank(s) {} start from different parameters than rank 0", JoinRanks(bad_model)),
        "model.init_from must name the same checkpoint (same contents) on every host");
  }
  if (!bad_groups.empty()) {
    throw InputError(fmt::format("rank(s) {} plan a different number of replica groups than rank "
                                 "0 ({})",
                                 JoinRanks(bad_groups), groups),
                     "give every process the same share of a machine (hosts of the same shape, "
                     "or set placement.groups)");
  }
  // One communicator per group index, created in the same order on every rank.
  for (int g = 0; g < groups; ++g) {
    MPI_Comm c;
    Check(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup(group)");
    im.groups.push_back(c);
  }
  im.scratch.resize(groups);
  im.counts.assign(groups, std::vector<int>(size_));
  im.displs.assign(groups, std::vector<int>(size_));
  im.wait_storage.reset(new std::atomic<double>[groups]);
  for (int g = 0; g < groups; ++g) im.wait_storage[g].store(0);
  im.slots.store(groups, std::memory_order_relaxed);
  // release: the watchdog sees initialized slots once it sees the pointer.
  im.wait_since.store(im.wait_storage.get(), std::memory_order_release);
}

double OmpiBridge::SumAcrossRanks(double v) {
  std::vector<double> all(size_);
  EnterWait(-1);
  Check(MPI_Allgather(&v, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, impl_->main),
        "MPI_Allgather(sum)");
  LeaveWait(-1);
  double s = 0;
  for (double x : all) s += x;  // rank order on every rank: identical results
  return s;
}

std::vector<std::string> OmpiBridge::Gather(const std::string& text) {
  Impl& im = *impl_;
  int len = static_cast<int>(text.size());
  std::vector<int> lens(size_), offs(size_);
  EnterWait(-1);
  Check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, im.main), "MPI_Allgather(len)");
  int total = 0;
  for (int r = 0; r < size_; ++r) offs[r] = total, total += lens[r];
  std::string all(static_cast<std::size_t>(total), '\0');
  Check(MPI_Allgatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR,
                       im.main),
        "MPI_Allgatherv(text)");
  LeaveWait(-1);
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) out.push_back(all.substr(offs[r], lens[r]));
  return out;
}

void OmpiBridge::AllreduceShard(int group, float* data, std::size_t n) {
  Impl& im = *impl_;
  CPUTRAIN_CHECK(group >= 0 && group < static_cast<int>(im.groups.size()),
                 "AllreduceShard before CheckConsistent");
  if (size_ == 1 || n == 0) return;
  // A ring allreduce (reduce-scatter then allgather, bandwidth-optimal: each rank sends and
  // receives 2(R-1)/R of the data) with point-to-point messages in pieces of kPiece floats.
  // Each block is reduced exactly once, along the ring in a fixed order, then copied to the
  // others: every rank gets the same bits, run after run. Measured on this box with 2 ranks and
  // a GPT-2 124M gradient, Open MPI's MPI_Reduce_scatter + MPI_Allgatherv took 1.33 s and
  // MPI_Allreduce 0.39 s (both allocate and fault in temporary buffers per call).
  constexpr std::size_t kPiece = 1 << 20;  // 4 MiB per message
  std::vector<int>& displs = im.displs[group];
  std::vector<int>& counts = im.counts[group];
  for (int r = 0; r <= size_; ++r) {  // block r = [displs[r], displs[r] + counts[r]), 16-aligned
    const std::size_t cut = r == size_ ? n : n * r / size_ / 16 * 16;
    if (r < size_) displs[r] = static_cast<int>(cut);
    if (r > 0) counts[r - 1] = static_cast<int>(cut) - displs[r - 1];
  }
  std::vector<float>& piece = im.scratch[group];
  if (piece.size() < kPiece) piece.resize(kPiece);
  const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  MPI_Comm comm = im.groups[group];
  auto block = [&](int b) { return (b % size_ + size_) % size_; };
  // Floats of block b's piece starting at `off` (0 past its end).
  auto piece_len = [&](int b, std::size_t off) {
    const std::size_t n = static_cast<std::size_t>(counts[b]);
    return off < n ? std::min(kPiece, n - off) : 0;
  };
  EnterWait(group);
  // Reduce-scatter: at step k, send block (rank - k), receive block (rank - k - 1) and add
  // into it (received first, own second: block j sums ranks j, j+1, ... in ring order).
  for (int k = 0; k < size_ - 1; ++k) {
    const int sb = block(rank_ - k), rb = block(rank_ - k - 1);
    for (std::size_t off = 0;; off += kPiece) {
      const std::size_t sn = piece_len(sb, off), rn = piece_len(rb, off);
      if (sn == 0 && rn == 0) break;
      Check(MPI_Sendrecv(data + displs[sb] + off, static_cast<int>(sn), MPI_FLOAT, right, k,
                         piece.data(), static_cast<int>(rn), MPI_FLOAT, left, k, comm,
                         MPI_STATUS_IGNORE),
            "MPI_Sendrecv(reduce-scatter)");
      float* dst = data + displs[rb] + off;
      const float* srcs[2] = {piece.data(), dst};
      comm::SumInto(dst, srcs, 2, rn);
    }
  }
  // Allgather: rank r now owns reduced block r + 1; pass the reduced blocks around the ring.
  for (int k = 0; k < size_ - 1; ++k) {
    const int sb = block(rank_ + 1 - k), rb = block(rank_ - k);
    for (std::size_t off = 0;; off += kPiece) {
      const std::size_t sn = piece_len(sb, off), rn = piece_len(rb, off);
      if (sn == 0 && rn == 0) break;
      Check(MPI_Sendrecv(data + displs[sb] + off, static_cast<int>(sn), MPI_FLOAT, right, size_ + k,
                         data + displs[rb] + off, static_cast<int>(rn), MPI_FLOAT, left, size_ + k,
                         comm, MPI_STATUS_IGNORE),
            "MPI_Sendrecv(allgather)");
    }
  }
  LeaveWait(group);
}

void OmpiBridge::SetStep(int step) { step_.store(step, std::memory_order_relaxed); }

void OmpiBridge::Finish() {
  if (finished_) return;
  Impl& im = *impl_;
  Check(MPI_Barrier(im.main), "MPI_Barrier(finish)");
  if (watchdog_.joinable()) {
    stop_watchdog_.store(true, std::memory_order_release);
    watchdog_.join();
  }
  for (MPI_Comm& c : im.groups) MPI_Comm_free(&c);
  MPI_Comm_free(&im.hb);
  MPI_Comm_free(&im.main);
  finished_ = true;
  MPI_Finalize();
}

void OmpiBridge::Abort(int exit_code, const std::string& why) {
  std::fprintf(stderr, "[rank %d] %s\n", rank_, why.c_str());
  std::fflush(stderr);
  finished_ = true;
  // MPI_Abort asks mpirun to end the job. After a network partition mpirun cannot reach the
  // lost host's daemon and the call never returns (measured with tests/netns: "abort is
  // already in progress" for minutes). This process must still end, non-zero, in bounded
  // time: SIGALRM's default action terminates it 10 s from now whatever MPI does.
  alarm(10);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  exit_process_(exit_code);  // MPI_Abort does not return; in case it does
  std::abort();              // exit_process must not return either
}

// A long wait while everyone still answers: say who is behind, once per wait.
void OmpiBridge::WarnIfLongWait(double now, const std::vector<int>& peer_step,
                                double* warned_wait_since) {
  Impl& im = *impl_;
  double since = im.main_wait.load(std::memory_order_relaxed);
  if (std::atomic<double>* w = im.wait_since.load(std::memory_order_acquire)) {
    for (int g = 0; g < im.slots.load(std::memory_order_relaxed); ++g) {
      const double s = w[g].load(std::memory_order_relaxed);
      if (s > 0 && (since == 0 || s < since)) since = s;
    }
  }
  if (since <= 0 || now - since <= watchdog_seconds_ || since == *warned_wait_since) return;
  *warned_wait_since = since;
  const int mine = step_.load(std::memory_order_relaxed);
  std::vector<int> behind;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && peer_step[p] < mine) behind.push_back(p);
  }
  log::Warn("waited {:.0f} s at step {} for the other ranks; {}", now - since, mine,
            behind.empty()
                ? std::string("all of them still answer")
                : fmt::format("rank(s) {} are still at an earlier step", JoinRanks(behind)));
}

void OmpiBridge::WatchdogLoop() {
  Impl& im = *impl_;
  const double start = Now();
  const double interval = std::min(1.0, watchdog_seconds_ / 5);
  std::vector<double> last_heard(size_, start);
  std::vector<int> peer_step(size_, 0);
  std::vector<bool> said_bye(size_, false);
  int byes = 0;
  // One outstanding heartbeat send per peer, with its own buffer (valid until it completes).
  std::vector<MPI_Request> send_req(size_, MPI_REQUEST_NULL);
  std::vector<std::array<int, 2>> send_buf(size_);
  std::array<int, 2> recv_buf{};
  MPI_Request recv_req;
  MPI_Irecv(recv_buf.data(), 2, MPI_INT, MPI_ANY_SOURCE, kHeartbeatTag, im.hb, &recv_req);
  double next_beat = 0, warned_wait_since = 0;
  bool stopping = false;
  auto send_all = [&](int kind) {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      int done = 1;
      if (send_req[p] != MPI_REQUEST_NULL) MPI_Test(&send_req[p], &done, MPI_STATUS_IGNORE);
      if (!done && kind == kBeat) continue;  // the last beat is still in flight: skip this one
      if (!done) MPI_Wait(&send_req[p], MPI_STATUS_IGNORE);
      send_buf[p] = {kind, step_.load(std::memory_order_relaxed)};
      MPI_Isend(send_buf[p].data(), 2, MPI_INT, p, kHeartbeatTag, im.hb, &send_req[p]);
    }
  };
  for (;;) {
    const double now = Now();
    for (;;) {  // everything that has arrived
      int flag = 0;
      MPI_Status st;
      MPI_Test(&recv_req, &flag, &st);
      if (!flag) break;
      const int src = st.MPI_SOURCE;
      last_heard[src] = now;
      if (recv_buf[0] == kBye) {
        said_bye[src] = true;
        ++byes;
      } else {
        peer_step[src] = recv_buf[1];
      }
      MPI_Irecv(recv_buf.data(), 2, MPI_INT, MPI_ANY_SOURCE, kHeartbeatTag, im.hb, &recv_req);
    }
    if (!stopping && stop_watchdog_.load(std::memory_order_acquire)) {
      stopping = true;
      send_all(kBye);  // messages from one sender arrive in order: our beats precede this
    }
    if (stopping && byes == size_ - 1) break;
    if (!stopping && now >= next_beat) {
      send_all(kBeat);
      next_beat = now + interval;
    }
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || said_bye[p] || now - last_heard[p] <= watchdog_seconds_) continue;
      Abort(1, fmt::format(
                   "error: rank {} (host {}) has sent no heartbeat for {:.0f} s (its last one was "
                   "at step {}): it stopped, hung the whole process or lost its network; ending "
                   "the job\nhint: check that host; raise mpi.watchdog_seconds if a rank may "
                   "pause longer than {:.0f} s (e.g. loading a checkpoint from a slow disk)",
                   p, im.hosts[p], now - last_heard[p], peer_step[p], watchdog_seconds_));
    }
    WarnIfLongWait(now, peer_step, &warned_wait_since);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Every peer said bye after its last beat: nothing more will come. Cancel the posted
  // receive and complete our own sends (the peers received everything before their bye).
  MPI_Cancel(&recv_req);
  MPI_Wait(&recv_req, MPI_STATUS_IGNORE);
  for (MPI_Request& r : send_req) {
    if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
}

}  // namespace cputrain::mpi
