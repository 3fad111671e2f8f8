#include "bench/bench.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/files.h"

extern "C" {
// OpenBLAS extensions (in openblas_config.h of some builds only; declared here to be sure).
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace cputrain::bench {

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return v == static_cast<double>(static_cast<uint64_t>(v))
             ? fmt::format("{} {}", v, kUnits[u])
             : fmt::format("{:.1f} {}", v, kUnits[u]);
}

std::string FormatSeconds(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

MappedBuffer::MappedBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  data_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data_ == MAP_FAILED) {
    data_ = nullptr;
    throw RuntimeError(fmt::format("cannot map {} for a benchmark buffer: {}", FormatBytes(bytes),
                                   std::strerror(errno)));
  }
  // Advice only: with transparent huge pages in "madvise" mode this is what turns them on; if
  // the kernel refuses, the buffer works with 4 KiB pages (first touch is just slower).
  madvise(data_, bytes, MADV_HUGEPAGE);
}

MappedBuffer::~MappedBuffer() {
  if (data_ != nullptr) munmap(data_, bytes_);
}

MappedBuffer::MappedBuffer(MappedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MappedBuffer& MappedBuffer::operator=(MappedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, bytes_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

namespace {

double MachineCpuSeconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, sys = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal)) return 0;
  return (user + nice + sys + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double OurCpuSeconds() {
  double t = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage ru{};
    getrusage(who, &ru);
    t += static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  }
  return t;
}

}  // namespace

OthersMeter::OthersMeter()
    : wall0_(NowSeconds()), machine0_(MachineCpuSeconds()), ours0_(OurCpuSeconds()) {}

double OthersMeter::Percent() const {
  const double wall = NowSeconds() - wall0_;
  if (wall <= 0) return 0;
  const double others = (MachineCpuSeconds() - machine0_) - (OurCpuSeconds() - ours0_);
  return std::max(0.0, others) / (wall * static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN))) * 100;
}

ScratchDir::ScratchDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      (tmp && *tmp ? std::string(tmp) : std::string("/tmp")) + "/" + prefix + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw RuntimeError(
        fmt::format("cannot create a scratch directory '{}': {}", pattern, std::strerror(errno)),
        "set TMPDIR to a writable directory");
  }
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

// The first value of each /proc/cpuinfo key in `keys` (the first CPU's), "" if absent.
std::map<std::string, std::string> CpuInfo(std::initializer_list<const char*> keys) {
  std::map<std::string, std::string> out;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line) && out.size() < keys.size();) {
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (std::find_if(keys.begin(), keys.end(), [&](const char* k) { return key == k; }) ==
            keys.end() ||
        out.count(key)) {
      continue;
    }
    std::size_t b = colon + 1;
    while (b < line.size() && line[b] == ' ') ++b;
    out[key] = line.substr(b);
  }
  return out;
}

int ToIntOr(const std::string& s, int fallback) {
  try {
    return s.empty() ? fallback : std::stoi(s);
  } catch (const std::exception&) {
    return fallback;
  }
}

}  // namespace

Machine MachineInfo() {
  Machine m;
  std::map<std::string, std::string> info = CpuInfo({"model name", "cpu family", "model", "flags"});
  m.cpu_model = info["model name"].empty() ? "unknown" : info["model name"];
  m.cpu_family = ToIntOr(info["cpu family"], -1);
  m.cpu_model_number = ToIntOr(info["model"], -1);
  // The extensions the kernels choose between (run-time detection: kernels/bf16.h), in this
  // order, as the kernel spells them in the flags line.
  std::istringstream flags(info["flags"]);
  std::set<std::string> have{std::istream_iterator<std::string>(flags), {}};
  for (const char* f : {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                        "avx512_bf16", "amx_tile", "amx_bf16"}) {
    if (have.count(f)) m.isa += m.isa.empty() ? f : std::string(" ") + f;
  }
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  m.date = date;
  utsname u{};
  if (uname(&u) == 0) {
    m.hostname = u.nodename;
    m.kernel = std::string(u.sysname) + " " + u.release;
  }
  m.logical_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  m.openblas = fmt::format("{} (core {})", openblas_get_config(), openblas_get_corename());
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3) m.load_average = {load[0], load[1], load[2]};
  return m;
}

std::string CommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  std::size_t start = 0;
  while (start < all.size()) {
    std::size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    std::string arg = all.substr(start, end - start);
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789-_./=:,+@%") == std::string::npos;
    if (!out.empty()) out += ' ';
    if (plain) {
      out += arg;
    } else {
      out += '\'';
      for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
    start = end + 1;
  }
  return out;
}

}  // namespace cputrain::bench
