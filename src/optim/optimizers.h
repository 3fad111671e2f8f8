// optim/: the optimizers MakeOptimizer (optimizer.h) builds that live in files of their own.
#pragma once

#include <memory>

#include "optim/optimizer.h"

namespace cputrain::optim {

// transformers.optimization.Adafactor (adafactor.cc).
std::unique_ptr<Optimizer> MakeAdafactor(const OptimConfig& c, const model::ParamLayout& layout);

}  // namespace cputrain::optim
