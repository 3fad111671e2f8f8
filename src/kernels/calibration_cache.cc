// The calibration's cache and its JSON (kernels/calibrate.h; the file's format: docs/kernels.md).
#include <fcntl.h>
#include <fmt/format.h>
#include <link.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/crc32c.h"
#include "common/files.h"
#include "common/log.h"
#include "kernels/amx_gemm.h"
#include "kernels/bf16.h"
#include "kernels/calibrate.h"
#include "kernels/onednn.h"

extern "C" char* openblas_get_config(void);

namespace cputrain::kernels {
namespace {

constexpr const char* kFormat = "cputrain-numa kernel calibration";
constexpr int kVersion = 1;

// The ISA flags that decide which kernels run and how fast (/proc/cpuinfo's names).
const std::set<std::string>& IsaFlags() {
  static const std::set<std::string> flags = {
      "sse4_2",      "avx",         "avx2",        "fma",        "f16c",
      "avx512f",     "avx512dq",    "avx512cd",    "avx512bw",   "avx512vl",
      "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512ifma", "avx512vbmi",
      "avx_vnni",    "amx_tile",    "amx_bf16",    "amx_int8",   "amx_fp16"};
  return flags;
}

// "AuthenticAMD family 25 model 1 stepping 1 (AMD EPYC); avx avx2 fma ..." from the first
// processor of /proc/cpuinfo.
std::string CpuKey() {
  std::ifstream in("/proc/cpuinfo");
  std::string vendor, family, model, stepping, name, flags;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) break;  // the first processor's block only
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "vendor_id") vendor = value;
    if (key == "cpu family") family = value;
    if (key == "model") model = value;
    if (key == "stepping") stepping = value;
    if (key == "model name") name = value;
    if (key == "flags") flags = value;
  }
  std::string isa;
  std::istringstream fs(flags);
  for (std::string f; fs >> f;) {
    if (IsaFlags().count(f)) isa += (isa.empty() ? "" : " ") + f;
  }
  return fmt::format("{} family {} model {} stepping {} ({}); {}", vendor, family, model, stepping,
                     name, isa);
}

// The main program's GNU build id (hex), or "" where it has none.
std::string BuildId() {
  std::string id;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) -> int {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
          const char* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const char* name = p + sizeof(ElfW(Nhdr));
            const char* desc = name + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
                std::memcmp(name, "GNU", 4) == 0 && desc + nh->n_descsz <= end) {
              auto* s = static_cast<std::string*>(out);
              for (unsigned j = 0; j < nh->n_descsz; ++j)
                *s += fmt::format("{:02x}", static_cast<unsigned char>(desc[j]));
              return 1;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
          }
        }
        return 1;  // the main program is the first object: stop there either way
      },
      &id);
  return id;
}

std::string Env(const char* var) {
  const char* v = std::getenv(var);
  return v ? v : "";
}

std::string Hex(uint32_t x) { return fmt::format("{:08x}", x); }
uint32_t Crc(const std::string& s) { return Crc32c(0, s.data(), s.size()); }

nlohmann::json ClassToJson(const ClassChoice& cc) {
  nlohmann::json t = nlohmann::json::array();
  for (const KernelTiming& k : cc.timings)
    t.push_back({{"kernel", k.kernel}, {"seconds", k.seconds}, {"gflops", k.gflops}});
  return {{"class", GemmClassName(cc.cls)},
          {"chosen", cc.chosen},
          {"flops", cc.flops},
          {"shapes", cc.shapes},
          {"timings", t}};
}

nlohmann::json ToJson(const KernelChoice& c) {
  nlohmann::json classes = nlohmann::json::array();
  for (const ClassChoice& cc : c.classes) classes.push_back(ClassToJson(cc));
  return {{"precision", c.precision},
          {"seconds", c.seconds},
          {"source", c.source},
          {"classes", classes}};
}

// nullopt where `j` is not a choice (a missing or mistyped field, an unknown class).
std::optional<KernelChoice> FromJson(const nlohmann::json& j) {
  try {
    KernelChoice c;
    c.precision = j.at("precision").get<std::string>();
    c.seconds = j.at("seconds").get<double>();
    c.source = j.value("source", "");  // absent in files of before it was recorded
    if (c.precision != "fp32" && c.precision != "bf16") return std::nullopt;
    for (const nlohmann::json& cj : j.at("classes")) {
      ClassChoice cc;
      const std::optional<GemmClass> cls = ParseGemmClass(cj.at("class").get<std::string>());
      if (!cls) return std::nullopt;
      cc.cls = *cls;
      cc.chosen = cj.at("chosen").get<std::string>();
      cc.flops = cj.at("flops").get<double>();
      cc.shapes = cj.at("shapes").get<std::string>();
      for (const nlohmann::json& t : cj.at("timings")) {
        cc.timings.push_back({t.at("kernel").get<std::string>(), t.at("seconds").get<double>(),
                              t.at("gflops").get<double>()});
      }
      c.classes.push_back(std::move(cc));
    }
    return c;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// The file's entries, or an empty object where it is absent; nullopt (and why in *why) where it
// is there but not to be trusted.
std::optional<nlohmann::json> ReadEntries(const std::string& path, const std::string& machine,
                                          std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nlohmann::json::object();
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *why = "not JSON";
  } else if (j.value("format", "") != kFormat || j.value("version", 0) != kVersion) {
    *why = fmt::format("not a version-{} calibration file", kVersion);
  } else if (!j.contains("entries") || !j["entries"].is_object() ||
             j.value("checksum", "") != Hex(Crc(j["entries"].dump()))) {
    *why = "its checksum does not match its entries";
  } else if (j.value("machine", "") != machine) {
    *why = "it was made on another machine";
  } else {
    return j["entries"];
  }
  return std::nullopt;
}

std::string EntryKey(const std::string& precision, const std::string& workload) {
  return precision + " | " + workload;
}

}  // namespace

std::string MachineKey() {
  const char* blas = openblas_get_config();
  const OpenblasCore core = OpenblasCoreInfo();
  return fmt::format(
      "cpu {}; build {}; openblas {} core {}; onednn {}; amx {}; env OPENBLAS_CORETYPE={} "
      "ONEDNN_MAX_CPU_ISA={} DNNL_MAX_CPU_ISA={} CPUTRAIN_DISABLE_BF16={}",
      CpuKey(), BuildId(), blas ? blas : "?", core.name,
      OnednnGemm::Available() ? OnednnGemm::Version() + " " + OnednnGemm::Isa() : "none",
      amx::Granted() ? "granted" : "no", Env("OPENBLAS_CORETYPE"), Env("ONEDNN_MAX_CPU_ISA"),
      Env("DNNL_MAX_CPU_ISA"), Env(kDisableBf16Env));
}

std::string CalibrationCache::DefaultDir() {
  if (const std::string d = Env("CPUTRAIN_CACHE_DIR"); !d.empty()) return d;
  if (const std::string x = Env("XDG_CACHE_HOME"); !x.empty()) return x + "/cputrain-numa";
  if (const std::string h = Env("HOME"); !h.empty()) return h + "/.cache/cputrain-numa";
  return "";
}

CalibrationCache::CalibrationCache(std::string dir, std::string machine)
    : dir_(dir.empty() ? DefaultDir() : std::move(dir)), machine_(std::move(machine)) {
  if (!dir_.empty()) path_ = fmt::format("{}/kernels-{}.json", dir_, Hex(Crc(machine_)));
}

std::optional<KernelChoice> CalibrationCache::Find(const std::string& workload,
                                                   const std::string& precision) const {
  if (path_.empty()) return std::nullopt;
  std::string why;
  const std::optional<nlohmann::json> entries = ReadEntries(path_, machine_, &why);
  if (!entries) {
    log::NoticeOnce("calibration-cache-corrupt",
                    fmt::format("ignoring the kernel calibration cache {}: {} (the kernels are "
                                "measured again and the file rewritten)",
                                path_, why));
    return std::nullopt;
  }
  const auto it = entries->find(EntryKey(precision, workload));
  if (it == entries->end()) return std::nullopt;
  return FromJson(*it);
}

KernelChoice CalibrationCache::Publish(const std::string& workload, const KernelChoice& choice,
                                       bool* theirs, bool replace) const {
  if (theirs) *theirs = false;
  const auto unwritable = [&](const std::string& what) {
    log::NoticeOnce("calibration-cache-unwritable",
                    fmt::format("the kernel calibration is not cached ({}): every run "
                                "measures again; set CPUTRAIN_CACHE_DIR to a writable directory",
                                what));
    return choice;
  };
  if (path_.empty()) return unwritable("no cache directory: HOME is not set");
  try {
    MakeDirs(dir_);
  } catch (const std::exception& e) {
    return unwritable(e.what());
  }
  const int lock = ::open((path_ + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return unwritable(fmt::format("{}.lock: {}", path_, std::strerror(errno)));
  ::flock(lock, LOCK_EX);
  KernelChoice kept = choice;
  try {
    std::string why;
    nlohmann::json entries = ReadEntries(path_, machine_, &why).value_or(nlohmann::json::object());
    const std::string key = EntryKey(choice.precision, workload);
    std::optional<KernelChoice> existing;
    if (entries.contains(key) && !replace) existing = FromJson(entries[key]);
    if (existing) {
      kept = *existing;
      if (theirs) *theirs = true;
    } else {
      entries[key] = ToJson(choice);
      const nlohmann::json file = {{"format", kFormat},
                                   {"version", kVersion},
                                   {"machine", machine_},
                                   {"entries", entries},
                                   {"checksum", Hex(Crc(entries.dump()))}};
      WriteFileAtomic(path_, file.dump(1) + "\n");
    }
  } catch (const std::exception& e) {
    ::flock(lock, LOCK_UN);
    ::close(lock);
    return unwritable(e.what());
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return kept;
}

std::string ChoiceToJson(const KernelChoice& choice) { return ToJson(choice).dump(); }

std::optional<KernelChoice> ChoiceFromJson(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return FromJson(j);
}

}  // namespace cputrain::kernels
