#include "model/presets.h"

#include "model/family.h"

namespace cputrain::model {

const std::vector<Preset>& Presets() {
  static const std::vector<Preset> all = [] {
    std::vector<Preset> p;
    for (const Family* f : Families()) p.insert(p.end(), f->presets.begin(), f->presets.end());
    return p;
  }();
  return all;
}

const Preset* FindPreset(const std::string& name) {
  for (const Preset& p : Presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::string PresetNames() {
  std::string out;
  for (const Preset& p : Presets()) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

}  // namespace cputrain::model
