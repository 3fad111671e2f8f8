#include "bench/schema.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"

namespace cputrain::bench {
namespace {

using nlohmann::json;

const char* const kHint =
    "pass the file written by `cputrain-numa bench all --json FILE` (an object with \"suites\") "
    "or by `bench <suite> --json FILE` (a list of records)";

std::string StrOr(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// Appends `recs` (a JSON list) to doc's records of `suite`, checking that every record says it
// belongs there.
void AddRecords(BenchDocument* doc, const std::string& suite, const json& recs,
                const std::string& path) {
  SuiteRecords* to = nullptr;
  for (SuiteRecords& s : doc->suites) to = s.suite() == suite ? &s : to;
  if (to == nullptr) to = &doc->suites.emplace_back(suite);
  for (const json& r : recs) {
    const std::string said = r.is_object() ? StrOr(r, "suite") : "";
    if (said.empty() || said != suite) {
      throw InputError(
          fmt::format("'{}': a record is not from any benchmark suite{}: {}", path,
                      said.empty() ? " (it has no \"suite\" field)"
                                   : fmt::format(" (it says '{}', listed under '{}')", said, suite),
                      r.dump().substr(0, 120)),
          kHint);
    }
    to->Add(r);
  }
}

BenchDocument ParseDocument(const json& doc, const std::string& path) {
  if (!doc.contains("suites") || !doc["suites"].is_object()) {
    throw InputError(
        fmt::format("'{}' is a JSON object without a \"suites\" object: not a benchmark report",
                    path),
        kHint);
  }
  BenchDocument res;
  if (doc.contains("machine") && doc["machine"].is_object() && !doc["machine"].empty()) {
    res.machine = Machine::FromJson(doc["machine"]);
  }
  res.command = StrOr(doc, "command");
  res.quick = doc.value("quick", false);
  for (const auto& [name, recs] : doc["suites"].items()) {
    if (!recs.is_array()) {
      throw InputError(fmt::format("'{}': suites.{} is not a list of records", path, name), kHint);
    }
    // Records written before they carried "suite" are claimed by the list they sit in.
    json claimed = recs;
    for (json& r : claimed) {
      if (r.is_object() && !r.contains("suite")) r["suite"] = name;
    }
    AddRecords(&res, name, claimed, path);
  }
  if (doc.contains("runs") && doc["runs"].is_object()) {
    for (const auto& [name, run] : doc["runs"].items()) res.runs[name] = RunStats::FromJson(run);
  }
  if (doc.contains("errors") && doc["errors"].is_object()) {
    for (const auto& [name, e] : doc["errors"].items()) {
      res.errors[name] = e.is_string() ? e.get<std::string>() : e.dump();
    }
  }
  return res;
}

}  // namespace

json Machine::ToJson() const {
  json j = {{"cpu_model", cpu_model},
            {"cpu_family", cpu_family},
            {"cpu_model_number", cpu_model_number},
            {"isa", isa},
            {"date", date},
            {"logical_cpus", logical_cpus},
            {"openblas", openblas},
            {"topology", topology}};
  if (!hostname.empty()) j["hostname"] = hostname;
  if (!kernel.empty()) j["kernel"] = kernel;
  if (!load_average.empty()) j["load_average"] = load_average;
  return j;
}

std::string Machine::Describe() const {
  std::string cpu = cpu_model;
  if (cpu_family >= 0) {
    cpu += fmt::format(" (family {} model {}{}{})", cpu_family, cpu_model_number,
                       isa.empty() ? "" : "; ", isa);
  }
  return fmt::format("{}, {} logical CPUs; {}; {}", cpu, logical_cpus, openblas, date);
}

Machine Machine::FromJson(const json& j) {
  Machine m;
  if (!j.is_object()) return m;
  m.cpu_model = StrOr(j, "cpu_model");
  m.isa = StrOr(j, "isa");
  for (auto [key, field] : {std::pair{"cpu_family", &m.cpu_family},
                            std::pair{"cpu_model_number", &m.cpu_model_number}}) {
    if (j.contains(key) && j[key].is_number_integer()) *field = j[key].get<int>();
  }
  m.date = StrOr(j, "date");
  m.hostname = StrOr(j, "hostname");
  m.kernel = StrOr(j, "kernel");
  m.openblas = StrOr(j, "openblas");
  if (j.contains("logical_cpus") && j["logical_cpus"].is_number()) {
    m.logical_cpus = j["logical_cpus"].get<int>();
  }
  if (j.contains("load_average") && j["load_average"].is_array()) {
    for (const json& v : j["load_average"]) {
      if (v.is_number()) m.load_average.push_back(v.get<double>());
    }
  }
  if (j.contains("topology") && j["topology"].is_object()) m.topology = j["topology"];
  return m;
}

json RunStats::ToJson() const {
  return {{"seconds", seconds},
          {"load_start", load_start},
          {"load_end", load_end},
          {"others_cpu_pct", others_cpu_pct}};
}

RunStats RunStats::FromJson(const json& j) {
  RunStats r;
  if (!j.is_object()) return r;
  r.seconds = j.value("seconds", r.seconds);
  r.load_start = j.value("load_start", r.load_start);
  r.load_end = j.value("load_end", r.load_end);
  r.others_cpu_pct = j.value("others_cpu_pct", r.others_cpu_pct);
  return r;
}

void SuiteRecords::Add(json record) {
  CPUTRAIN_CHECK(record.is_object(), "a bench record is a JSON object");
  record["suite"] = suite_;
  records_.push_back(std::move(record));
}

void SuiteRecords::WriteJson(const std::string& path) const {
  WriteFileAtomic(path, records_.dump(2) + "\n");
}

const SuiteRecords* BenchDocument::Find(const std::string& suite) const {
  for (const SuiteRecords& s : suites) {
    if (s.suite() == suite) return &s;
  }
  return nullptr;
}

json BenchDocument::ToJson() const {
  json doc = {{"machine", machine ? machine->ToJson() : json::object()},
              {"command", command},
              {"quick", quick},
              {"suites", json::object()},
              {"runs", json::object()}};
  for (const SuiteRecords& s : suites) doc["suites"][s.suite()] = s.records();
  for (const auto& [name, run] : runs) doc["runs"][name] = run.ToJson();
  if (!errors.empty()) doc["errors"] = errors;
  return doc;
}

BenchDocument BenchDocument::Parse(const std::string& text, const std::string& path) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("'{}' is not JSON: {}", path, e.what()), kHint);
  }
  BenchDocument res;
  if (doc.is_object()) {
    res = ParseDocument(doc, path);
  } else if (doc.is_array()) {
    for (const json& r : doc) {
      const std::string suite = r.is_object() ? StrOr(r, "suite") : "";
      AddRecords(&res, suite, json::array({r}), path);
    }
  } else {
    throw InputError(
        fmt::format("'{}' holds a JSON {}, not a benchmark report", path, doc.type_name()), kHint);
  }
  bool any = false;
  for (const SuiteRecords& s : res.suites) any |= !s.records().empty();
  if (!any) throw InputError(fmt::format("'{}' has no benchmark records", path), kHint);
  return res;
}

BenchDocument BenchDocument::Load(const std::string& path) {
  return Parse(ReadFile(path), path);  // ReadFile: InputError if unreadable
}

}  // namespace cputrain::bench
