#include "bench/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "report/svg.h"

namespace cputrain::bench {
namespace {

using nlohmann::json;
using report::BarChart;
using report::Heatmap;
using report::LineChart;
using report::RenderBarChart;
using report::RenderHeatmap;
using report::RenderLineChart;
using report::Series;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- small helpers

double Num(const json& r, const char* key) { return r.at(key).get<double>(); }
std::string Str(const json& r, const char* key) { return r.at(key).get<std::string>(); }
bool Is(const json& r, const char* key, const char* value) {
  return r.contains(key) && r[key].is_string() && r[key].get<std::string>() == value;
}

std::string F(double v, int prec = 1) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, prec) : "-";
}

std::string Bytes(double b) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return b == std::floor(b) ? fmt::format("{} {}", b, kUnits[u])
                            : fmt::format("{:.1f} {}", b, kUnits[u]);
}

// A file-name-safe form of s.
std::string Slug(const std::string& s) {
  std::string out;
  for (char c : s)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  return out;
}

// A Markdown table: the first `left` columns left-aligned, the rest right-aligned (numbers).
struct Table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  std::size_t left = 1;
  std::string Render() const {
    std::string s = "|";
    for (const std::string& h : head) s += " " + h + " |";
    s += "\n|";
    for (std::size_t i = 0; i < head.size(); ++i) s += i < left ? " --- |" : " ---: |";
    s += "\n";
    for (const auto& r : rows) {
      s += "|";
      for (const std::string& c : r) s += " " + c + " |";
      s += "\n";
    }
    return s + "\n";
  }
};

// Collects the files and the README text as the sections are rendered.
class Writer {
 public:
  explicit Writer(std::string dir) : dir_(std::move(dir)) {}
  void Chart(const std::string& name, const std::string& svg, const std::string& alt) {
    WriteFileAtomic(dir_ + "/" + name, svg);
    files_.push_back(dir_ + "/" + name);
    md += fmt::format("![{}]({})\n\n", alt, name);
  }
  void Finish() {
    WriteFileAtomic(dir_ + "/README.md", md);
    files_.insert(files_.begin(), dir_ + "/README.md");
  }
  std::string md;
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<std::string> files_;
};

// ---- memory

void MemorySection(const json& recs, Writer& w) {
  w.md += "## Memory bandwidth and latency (`bench memory`)\n\n";
  for (const json& r : recs) {
    if (Is(r, "kind", "setup")) {
      w.md += fmt::format(
          "Topology `{}`; threads {}; memory {}; STREAM arrays 3 x {}, best of {} after a "
          "warm-up; GB/s in STREAM's counting (copy 2 arrays, triad 3).{}\n\n",
          r.value("topology", std::string("?")), r.value("pinned", false) ? "pinned" : "NOT pinned",
          r.value("bound", false) ? "bound to its node" : "placed by first touch",
          Bytes(r.value("array_bytes", 0.0)), r.value("reps", 0),
          r.value("simulated", false)
              ? " **Simulated topology: nothing was pinned or bound; these are this machine's "
                "numbers under the simulated node labels.**"
              : "");
    }
  }
  // Scaling.
  Table t{{"node", "threads", "copy", "triad", "copy (NT stores)", "triad (NT stores)"}, {}, 2};
  std::map<std::pair<int, int>, std::map<std::string, double>> scaling;
  std::map<std::string, Series> lines;
  for (const json& r : recs) {
    if (!Is(r, "kind", "bandwidth") || !Is(r, "test", "scaling")) continue;
    const int node = r.at("cpu_node").get<int>(), k = r.at("threads").get<int>();
    scaling[{node, k}][Str(r, "op")] = Num(r, "gbs");
    Series& s = lines[fmt::format("node {} {}", node, Str(r, "op"))];
    s.name = fmt::format("node {} {}", node, Str(r, "op"));
    s.markers = true;
    s.x.push_back(k);
    s.y.push_back(Num(r, "gbs"));
  }
  for (const auto& [key, ops] : scaling) {
    auto get = [&](const char* op) {
      auto it = ops.find(op);
      return it == ops.end() ? kNaN : it->second;
    };
    t.rows.push_back({std::to_string(key.first), std::to_string(key.second), F(get("copy")),
                      F(get("triad")), F(get("copy_nt")), F(get("triad_nt"))});
  }
  if (!t.rows.empty()) {
    w.md += "Bandwidth per node with 1..all of its cores, memory local (GB/s):\n\n" + t.Render();
    LineChart c;
    c.title = "STREAM bandwidth vs threads, memory local to the node";
    c.x.label = "threads (one per core)";
    c.y.label = "GB/s";
    c.y.min = 0;
    for (auto& [name, s] : lines) c.series.push_back(s);
    w.Chart("memory-scaling.svg", RenderLineChart(c), "bandwidth vs threads");
  }
  // Matrices.
  auto matrix = [&](const char* kind, const char* op, const char* field, const std::string& title,
                    const std::string& unit, const std::string& file) {
    std::set<int> rows, cols;
    std::map<std::pair<int, int>, double> v;
    for (const json& r : recs) {
      if (!Is(r, "kind", kind)) continue;
      if (op && (!Is(r, "test", "matrix") || !Is(r, "op", op))) continue;
      const int i = r.at("cpu_node").get<int>(), j = r.at("mem_node").get<int>();
      rows.insert(i), cols.insert(j);
      v[{i, j}] = Num(r, field);
    }
    if (v.empty()) return;
    Heatmap h;
    h.title = title;
    h.value_label = unit;
    h.row_axis = "CPU node (threads)";
    h.col_axis = "memory node";
    Table mt;
    mt.head.push_back(unit);
    for (int j : cols)
      h.col_labels.push_back(fmt::format("mem {}", j)), mt.head.push_back(fmt::format("mem {}", j));
    for (int i : rows) {
      h.row_labels.push_back(fmt::format("cpu {}", i));
      std::vector<double> row;
      std::vector<std::string> trow = {fmt::format("cpu {}", i)};
      for (int j : cols) {
        auto it = v.find({i, j});
        row.push_back(it == v.end() ? kNaN : it->second);
        trow.push_back(F(row.back()));
      }
      h.values.push_back(row);
      mt.rows.push_back(trow);
    }
    w.md += title + ":\n\n" + mt.Render();
    w.Chart(file, RenderHeatmap(h), title);
  };
  matrix("bandwidth", "triad", "gbs", "Triad bandwidth, node x node (all cores of the CPU node)",
         "GB/s", "memory-triad-matrix.svg");
  matrix("bandwidth", "copy", "gbs", "Copy bandwidth, node x node", "GB/s",
         "memory-copy-matrix.svg");
  matrix("latency", nullptr, "ns_per_load", "Load latency (pointer chase, 1 thread)", "ns",
         "memory-latency.svg");
}

// ---- gemm

void GemmSection(const json& recs, Writer& w) {
  w.md +=
      "## GEMM (`bench gemm`)\n\n"
      "`ours` = training's path (one single-threaded OpenBLAS call per pinned worker on its "
      "slice); `openblas-mt` = one OpenBLAS call threading itself over the same number of "
      "threads; `own-avx2` = our packed 6x16 AVX2/FMA kernel on the same slices. % of peak "
      "is against the measured FMA peak of the group (FMA-throughput loop).\n\n";
  Table peaks{{"group", "threads", "one core, 256-bit", "one core, 512-bit", "group, 256-bit",
               "group, 512-bit"},
              {},
              2};
  std::map<int, std::map<std::string, double>> pk;
  std::map<int, int> pk_threads;
  for (const json& r : recs) {
    if (!Is(r, "kind", "peak")) continue;
    const int g = r.at("group").get<int>();
    pk[g][Str(r, "scope") + "/" + Str(r, "isa")] = Num(r, "gflops");
    if (Is(r, "scope", "group")) pk_threads[g] = r.at("threads").get<int>();
  }
  for (const auto& [g, m] : pk) {
    auto get = [&](const char* k) {
      auto it = m.find(k);
      return it == m.end() ? kNaN : it->second;
    };
    peaks.rows.push_back({std::to_string(g), std::to_string(pk_threads[g]), F(get("core/avx2-fma")),
                          F(get("core/avx512f")), F(get("group/avx2-fma")),
                          F(get("group/avx512f"))});
  }
  if (!peaks.rows.empty()) w.md += "Measured FMA peak (GFLOP/s):\n\n" + peaks.Render();

  Table sum{{"model", "group", "implementation", "GEMM time per step (ms)", "GFLOP/s", "% of peak",
             "speed vs ours"},
            {},
            3};
  for (const json& r : recs) {
    if (!Is(r, "kind", "summary")) continue;
    sum.rows.push_back({Str(r, "model"), std::to_string(r.at("group").get<int>()), Str(r, "impl"),
                        F(Num(r, "step_gemm_seconds") * 1e3), F(Num(r, "gflops")),
                        F(Num(r, "pct_peak")) + "%", F(Num(r, "speedup_vs_ours"), 2) + "x"});
  }
  if (!sum.rows.empty()) {
    w.md +=
        "All the matrix products of one training step (each block shape x L, the LM head "
        "once; forward and both backward products):\n\n" +
        sum.Render();
  }
  // Per (model, group): a chart of every product.
  std::map<std::pair<std::string, int>, std::vector<const json*>> by;
  for (const json& r : recs) {
    if (Is(r, "kind", "gemm")) by[{Str(r, "model"), r.at("group").get<int>()}].push_back(&r);
  }
  for (const auto& [key, rs] : by) {
    BarChart c;
    c.title = fmt::format("GEMM GFLOP/s, model {}, group {} ({} threads)", key.first, key.second,
                          rs.front()->at("threads").get<int>());
    c.y_label = "GFLOP/s";
    c.width = 1100;
    c.value_labels = false;
    std::vector<std::string> impls;
    std::map<std::string, std::map<std::string, double>> v;  // impl -> category -> gflops
    Table d{{"shape", "product", "M", "N", "K"}, {}, 2};
    std::map<std::string, std::vector<std::string>> drow;
    double peak = kNaN;
    for (const json* r : rs) {
      const std::string cat = Str(*r, "shape") + " " + Str(*r, "product");
      if (std::find(c.categories.begin(), c.categories.end(), cat) == c.categories.end()) {
        c.categories.push_back(cat);
        drow[cat] = {Str(*r, "shape"), Str(*r, "product"), std::to_string(r->at("M").get<long>()),
                     std::to_string(r->at("N").get<long>()),
                     std::to_string(r->at("K").get<long>())};
      }
      const std::string impl = Str(*r, "impl");
      if (std::find(impls.begin(), impls.end(), impl) == impls.end()) impls.push_back(impl);
      v[impl][cat] = Num(*r, "gflops");
      peak = r->value("peak_gflops", kNaN);
    }
    for (const std::string& impl : impls) {
      BarChart::BarSeries s{impl, {}, ""};
      d.head.push_back(impl + " GFLOP/s");
      for (const std::string& cat : c.categories) {
        auto it = v[impl].find(cat);
        s.values.push_back(it == v[impl].end() ? kNaN : it->second);
        drow[cat].push_back(F(s.values.back()));
      }
      c.series.push_back(s);
    }
    if (std::isfinite(peak)) c.ref_lines.push_back({"measured FMA peak", peak, "#d62728"});
    w.Chart(fmt::format("gemm-{}-g{}.svg", Slug(key.first), key.second), RenderBarChart(c),
            c.title);
    for (const std::string& cat : c.categories) d.rows.push_back(drow[cat]);
    w.md += fmt::format(
        "<details><summary>every product, model {}, group {}</summary>\n\n{}</details>\n\n",
        key.first, key.second, d.Render());
  }
}

// ---- collectives

void CollectivesSection(const json& recs, Writer& w) {
  w.md +=
      "## Collectives between groups (`bench collectives`)\n\n"
      "Bus bandwidth as nccl-tests counts it (allreduce 2(G-1)/G x bytes / time, "
      "reduce-scatter and allgather (G-1)/G x bytes / time); `membound` is the "
      "memory-bandwidth bound from the STREAM figures of the same run and the traffic model "
      "of docs/collectives.md.\n\n";
  int G = 0;
  std::vector<std::string> stream;
  for (const json& r : recs) {
    if (Is(r, "impl", "stream")) {
      stream.push_back(fmt::format("{} {} GB/s", Str(r, "op"), F(Num(r, "busbw_gbs"))));
    } else if (r.contains("groups")) {
      G = r.at("groups").get<int>();
    }
  }
  w.md += fmt::format("G = {} groups. STREAM in the same run: {}.\n\n", G,
                      stream.empty() ? "-" : fmt::format("{}", fmt::join(stream, ", ")));
  std::vector<std::string> ops;
  std::map<std::string, std::map<std::string, std::map<double, double>>> bw;  // op->impl->bytes
  for (const json& r : recs) {
    if (Is(r, "impl", "stream")) continue;
    const std::string op = Str(r, "op");
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
    bw[op][Str(r, "impl")][Num(r, "bytes")] = Num(r, "busbw_gbs");
  }
  for (const std::string& op : ops) {
    LineChart c;
    c.title = fmt::format("{}: bus bandwidth vs buffer size (G={})", op, G);
    c.x.label = "buffer size";
    c.x.log = true;
    c.x.format = "bytes";
    c.y.label = "busbw (GB/s)";
    c.y.log = true;
    c.legend_left = true;
    for (const auto& [impl, pts] : bw[op]) {
      Series s;
      s.name = impl == "cputrain" ? "cputrain (default stores)" : impl == "mpi" ? "Open MPI" : impl;
      s.markers = true;
      if (impl == "membound") s.color = "#888888", s.width = 1.2;
      for (const auto& [b, v] : pts) s.x.push_back(b), s.y.push_back(v);
      c.series.push_back(s);
    }
    w.Chart(fmt::format("collectives-{}.svg", Slug(op)), RenderLineChart(c), c.title);
    Table t{{"size", "ours busbw (GB/s)", "Open MPI busbw (GB/s)", "ours / MPI",
             "bound busbw (GB/s)", "ours % of bound"},
            {},
            1};
    const auto& impls = bw[op];
    auto get = [&](const char* impl, double b) {
      auto it = impls.find(impl);
      if (it == impls.end()) return kNaN;
      auto jt = it->second.find(b);
      return jt == it->second.end() ? kNaN : jt->second;
    };
    auto it = impls.find("cputrain");
    if (it == impls.end()) continue;
    for (const auto& [b, ours] : it->second) {
      const double mpi = get("mpi", b), bound = get("membound", b);
      t.rows.push_back({Bytes(b), F(ours, 2), F(mpi, 2),
                        std::isfinite(mpi) ? F(ours / mpi, 1) + "x" : "-", F(bound, 2),
                        std::isfinite(bound) ? F(100 * ours / bound, 0) + "%" : "-"});
    }
    w.md += t.Render();
  }
}

// ---- train

// What a train record's rows are grouped under: its model, and for a LoRA fine-tune (`bench
// train --lora`, a "lora" object) the adapters, so that LoRA rows never share a table, a chart or
// a summary with full fine-tunes of the same model: "llama-1b", "llama-1b LoRA r=16".
std::string TrainKey(const json& r) {
  std::string key = Str(r, "model");
  if (r.contains("lora") && r["lora"].is_object()) {
    key += fmt::format(" LoRA r={}", r["lora"].value("r", 0));
  }
  return key;
}

void TrainSection(const json& recs, Writer& w) {
  w.md +=
      "## Training throughput (`bench train`)\n\n"
      "tokens/s = B x T / median step time; GFLOP/s = model::TrainFlopsPerToken x tokens/s "
      "(the same formula for PyTorch); MFU = GFLOP/s / the measured FMA peak of the cores "
      "used. The step split is group 0's (forward, backward compute, communication, "
      "optimizer, other = the rest). The last two columns say whether a row was disturbed: "
      "the CPU share other processes took while it ran, and the slowest core's FMA speed "
      "just before and after it in % of the peak (on a shared VM a core can run at half "
      "speed for a while with no process of the VM to blame).\n\n";
  std::vector<std::string> models;
  for (const json& r : recs) {
    if (r.contains("tokens_per_s") && r.contains("model")) {
      const std::string m = TrainKey(r);
      if (std::find(models.begin(), models.end(), m) == models.end()) models.push_back(m);
    }
  }
  for (const std::string& m : models) {
    std::string shape;
    Table t{{"placement", "tokens/s", "GFLOP/s", "MFU", "step (ms)", "forward", "backward", "comm",
             "optimizer", "other", "CPU taken by others", "slowest core"},
            {},
            1};
    BarChart tok, split;
    tok.title = fmt::format("{}: training tokens/s per placement", m);
    tok.y_label = "tokens/s";
    split.title = fmt::format("{}: where a step's time goes (ms)", m);
    split.y_label = "ms per step";
    split.stacked = true;
    BarChart::BarSeries ours{"cputrain-numa", {}, "#1f77b4"}, torch{"PyTorch", {}, "#ff7f0e"};
    const char* parts[] = {"forward_ms", "backward_ms", "comm_ms", "optimizer_ms", "other_ms"};
    std::vector<BarChart::BarSeries> ps = {{"forward", {}, "#1f77b4"},
                                           {"backward", {}, "#2ca02c"},
                                           {"communication", {}, "#d62728"},
                                           {"optimizer", {}, "#9467bd"},
                                           {"other", {}, "#bbbbbb"}};
    for (const json& r : recs) {
      if (!r.contains("tokens_per_s") || TrainKey(r) != m) continue;
      shape = r.value("model_shape", shape);
      const bool is_torch = Is(r, "impl", "pytorch");
      const std::string label = Str(r, "placement");
      t.rows.push_back(
          {(is_torch ? "" : "cputrain-numa ") + label, F(Num(r, "tokens_per_s")),
           F(Num(r, "gflops")), F(100 * Num(r, "mfu")) + "%", F(Num(r, "step_ms")),
           F(r.value("forward_ms", kNaN)), F(r.value("backward_ms", kNaN)),
           is_torch ? "(in backward)" : F(r.value("comm_ms", kNaN)),
           F(r.value("optimizer_ms", kNaN)), F(r.value("other_ms", kNaN)),
           r.contains("others_cpu_pct") ? F(Num(r, "others_cpu_pct"), 0) + "%" : "-",
           r.contains("slowest_core_pct") ? F(Num(r, "slowest_core_pct"), 0) + "%" : "-"});
      tok.categories.push_back(label);
      ours.values.push_back(is_torch ? kNaN : Num(r, "tokens_per_s"));
      torch.values.push_back(is_torch ? Num(r, "tokens_per_s") : kNaN);
      split.categories.push_back(label);
      for (std::size_t k = 0; k < 5; ++k) ps[k].values.push_back(r.value(parts[k], 0.0));
    }
    w.md += fmt::format("### {} ({})\n\n", m, shape) + t.Render();
    for (const json& r : recs) {
      if (!Is(r, "kind", "summary") || TrainKey(r) != m) continue;
      if (r.contains("ratio_vs_pytorch_best")) {
        const double ratio = Num(r, "ratio_vs_pytorch_best");
        w.md += fmt::format(
            "- Ours, best: **{}** at {} tokens/s; PyTorch's best: **{}** at {} tokens/s: "
            "**{}x** ({}).\n",
            Str(r, "best_placement"), F(Num(r, "best_tokens_per_s")),
            Str(r, "pytorch_best_placement"), F(Num(r, "pytorch_best_tokens_per_s")), F(ratio, 2),
            r.contains("lora") ? std::string("LoRA: no target set")
            : ratio >= 1       ? std::string("target >= 1: met")
                               : fmt::format("target >= 1: missed by {:.0f}%", 100 * (1 - ratio)));
      } else if (r.contains("best_placement")) {
        w.md += fmt::format("- Ours, best: **{}** at {} tokens/s (PyTorch not run).\n",
                            Str(r, "best_placement"), F(Num(r, "best_tokens_per_s")));
      }
      if (r.contains("two_groups_vs_one")) {
        const double ratio = Num(r, "two_groups_vs_one");
        w.md +=
            fmt::format("- {} vs {}: **{}x** (target >= 1: {}).\n", Str(r, "two_groups_label"),
                        Str(r, "one_group_label"), F(ratio, 2),
                        ratio >= 1 ? "met" : fmt::format("missed by {:.0f}%", 100 * (1 - ratio)));
      }
      w.md += "\n";
    }
    tok.series = {ours};
    if (std::any_of(torch.values.begin(), torch.values.end(),
                    [](double v) { return std::isfinite(v); })) {
      tok.series.push_back(torch);
    }
    w.Chart(fmt::format("train-{}-tokens.svg", Slug(m)), RenderBarChart(tok), tok.title);
    split.series = ps;
    w.Chart(fmt::format("train-{}-breakdown.svg", Slug(m)), RenderBarChart(split), split.title);
  }
}

// ---- mpi-sync

void MpiSyncSection(const json& recs, Writer& w) {
  w.md +=
      "## Gradient sync across processes (`bench mpi-sync`)\n\n"
      "The trainer's hierarchical sync (shared-memory reduce-scatter inside a process, the "
      "owners' parts allreduced across processes, allgather inside) against one flat "
      "MPI_Allreduce of the whole gradient per process.\n\n";
  Table t{{"model", "ranks x groups", "method", "time (ms)", "algbw (GB/s)", "vs flat"}, {}, 3};
  double flat = kNaN;
  for (const json& r : recs) {
    if (Str(r, "method").rfind("flat", 0) == 0) flat = Num(r, "seconds");
  }
  for (const json& r : recs) {
    t.rows.push_back({r.value("model", std::string("?")),
                      fmt::format("{} x {}", r.value("ranks", 0), r.value("groups_per_rank", 0)),
                      Str(r, "method"), F(Num(r, "seconds") * 1e3), F(Num(r, "algbw_gbs"), 2),
                      std::isfinite(flat) ? F(flat / Num(r, "seconds"), 2) + "x" : "-"});
  }
  w.md += t.Render();
}

// The suites the report draws, in the order `bench all` runs them.
struct Section {
  const char* suite;
  void (*draw)(const json& records, Writer& w);
};
const Section kSections[] = {{"memory", MemorySection},
                             {"gemm", GemmSection},
                             {"collectives", CollectivesSection},
                             {"train", TrainSection},
                             {"mpi-sync", MpiSyncSection}};

const Section* FindSection(const std::string& suite) {
  for (const Section& s : kSections) {
    if (suite == s.suite) return &s;
  }
  return nullptr;
}

void MachineTable(const Machine& m, Writer& w) {
  std::string topo;
  const json& t = m.topology;
  if (!t.empty()) {
    topo = fmt::format("{} package(s), {} NUMA node(s), {} core(s), {} PU(s){}",
                       t.value("packages", 0), t.value("numa_nodes", 0), t.value("cores", 0),
                       t.value("pus", 0), t.value("simulated", false) ? " (simulated)" : "");
  }
  std::string load;
  if (m.load_average.size() == 3) {
    load = fmt::format("{:.2f} {:.2f} {:.2f}", m.load_average[0], m.load_average[1],
                       m.load_average[2]);
  }
  auto or_unknown = [](const std::string& s) { return s.empty() ? std::string("?") : s; };
  Table tab{{"machine", ""}, {}, 2};
  tab.rows = {{"CPU", or_unknown(m.cpu_model)},
              {"topology", topo},
              {"logical CPUs", std::to_string(m.logical_cpus)},
              {"kernel", or_unknown(m.kernel)},
              {"OpenBLAS", or_unknown(m.openblas)},
              {"date (UTC)", or_unknown(m.date)},
              {"load average at start", or_unknown(load)}};
  w.md += tab.Render();
}

void RunsTable(const std::map<std::string, RunStats>& runs, Writer& w) {
  Table t{{"suite", "run time (s)", "CPU taken by other processes", "load average before",
           "after (ours included)"},
          {},
          1};
  for (const Section& s : kSections) {  // in the order `bench all` runs them
    auto it = runs.find(s.suite);
    if (it == runs.end()) continue;
    const RunStats& r = it->second;
    t.rows.push_back({s.suite, F(r.seconds), F(r.others_cpu_pct, 0) + "%", F(r.load_start, 2),
                      F(r.load_end, 2)});
  }
  w.md +=
      "How busy the machine was while each suite ran (the CPU share other processes took; "
      "the 1-minute load averages count the benchmark's own threads too):\n\n" +
      t.Render();
}

// Leaves out, with a warning, the suites the report cannot draw; throws if none is left.
void CheckDrawable(const BenchDocument& doc, const std::string& source) {
  bool any = false;
  for (const SuiteRecords& s : doc.suites) {
    if (FindSection(s.suite()) == nullptr) {
      log::Warn("report: '{}' has records of an unknown suite '{}'; left out", source, s.suite());
    } else {
      any |= !s.records().empty();
    }
  }
  if (!any) {
    std::string known;
    for (const Section& s : kSections) known += (known.empty() ? "" : ", ") + std::string(s.suite);
    throw InputError(
        fmt::format("'{}' has no benchmark records of a suite the report draws", source),
        "the report draws the suites " + known);
  }
}

}  // namespace

std::vector<std::string> WriteBenchReport(const BenchDocument& doc, const std::string& source,
                                          const std::string& dir) {
  CheckDrawable(doc, source);
  MakeDirs(dir);
  Writer w(dir);
  w.md += "# cputrain-numa benchmark report\n\n";
  if (doc.machine) MachineTable(*doc.machine, w);
  w.md += fmt::format("Results: `{}`{}.\n", source,
                      doc.quick ? " (a --quick smoke run: small sizes, few repetitions)" : "");
  if (!doc.command.empty()) w.md += fmt::format("Produced by: `{}`\n", doc.command);
  w.md += fmt::format("Charts and this page: `cputrain-numa report {} -o {}`\n\n", source, dir);
  if (!doc.runs.empty()) RunsTable(doc.runs, w);
  w.md += "How each figure is measured: docs/benchmarks.md in the cputrain-numa repository.\n\n";
  for (const Section& s : kSections) {
    const SuiteRecords* recs = doc.Find(s.suite);
    if (recs == nullptr) continue;
    try {
      s.draw(recs->records(), w);
    } catch (const json::exception& e) {
      throw InputError(fmt::format("'{}': a {} record lacks a field the report needs or has the "
                                   "wrong type: {}",
                                   source, s.suite, e.what()),
                       "pass the unmodified output of `cputrain-numa bench`");
    }
  }
  w.Finish();
  return w.files();
}

}  // namespace cputrain::bench
