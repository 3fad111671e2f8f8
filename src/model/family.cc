#include "model/family.h"

#include <fmt/format.h>

#include "common/error.h"

namespace cputrain::model {

// The tables, one per line of the registry (each defined in src/model/families/).
#define CPUTRAIN_DECLARE_FAMILY(id, table) extern const Family table;
CPUTRAIN_MODEL_FAMILIES(CPUTRAIN_DECLARE_FAMILY)
#undef CPUTRAIN_DECLARE_FAMILY

const std::vector<const Family*>& Families() {
  static const std::vector<const Family*> all = [] {
#define CPUTRAIN_LIST_FAMILY(id, table) &table,
    std::vector<const Family*> v = {CPUTRAIN_MODEL_FAMILIES(CPUTRAIN_LIST_FAMILY)};
#undef CPUTRAIN_LIST_FAMILY
    // A table's arch is its line: FamilyOf indexes by it.
    for (std::size_t i = 0; i < v.size(); ++i)
      CPUTRAIN_CHECK(
          static_cast<std::size_t>(v[i]->arch) == i,
          fmt::format("family {} is registered as Arch {}, not its own arch", v[i]->name, i));
    return v;
  }();
  return all;
}

const Family& FamilyOf(Arch arch) { return *Families().at(static_cast<std::size_t>(arch)); }

std::string FamilyNames() {
  std::string out;
  for (const Family* f : Families()) out += (out.empty() ? "" : ", ") + std::string(f->name);
  return out;
}

const Family* FindFamily(const std::string& name) {
  for (const Family* f : Families())
    if (name == f->name) return f;
  return nullptr;
}

const Family* FamilyOfHfType(const std::string& model_type) {
  for (const Family* f : Families())
    if (model_type == f->hf_model_type) return f;
  return nullptr;
}

Shape ShapeFromConfigKeys(const Shape& keys) {
  const Family& f = FamilyOf(keys.arch);
  // Encoders have a task head; decoders their LM head, or a classifier (model/head.h).
  if (f.kind.encoder ? keys.head == Head::kLm : keys.head == Head::kSpan) {
    throw InputError(
        fmt::format("model.arch {} with model.head {}: {} has {}", f.name, HeadName(keys.head),
                    f.name,
                    f.kind.encoder ? "a task head (qa or classify)" : "the lm head or classify"),
        "set model.head to match the family (`qa train` sets qa, `classify train` classify)");
  }
  Shape s = f.from_config(keys);
  s.arch = keys.arch;
  s.head = keys.head;
  return s;  // ParamLayout judges the whole shape (Shape::Problem) before any memory is used
}

}  // namespace cputrain::model
