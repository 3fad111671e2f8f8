#include "model/family.h"

#include <fmt/format.h>

namespace cputrain::model {

const std::vector<const Family*>& Families() {
  static const std::vector<const Family*> all = {&kGpt2Family, &kLlamaFamily, &kBertFamily,
                                                 &kDistilBertFamily};
  return all;
}

const Family& FamilyOf(Arch arch) { return *Families().at(static_cast<std::size_t>(arch)); }

std::string FamilyNames() {
  std::string out;
  for (const Family* f : Families()) out += (out.empty() ? "" : ", ") + std::string(f->name);
  return out;
}

const Family* FamilyOfHfType(const std::string& model_type) {
  for (const Family* f : Families())
    if (model_type == f->hf_model_type) return f;
  return nullptr;
}

}  // namespace cputrain::model
