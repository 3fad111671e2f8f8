// peft_roundtrip BASE ADAPTER OUT [SEED]: the adapter ADAPTER of the Hugging Face model BASE read
// with model/peft.h's LoadAdapter and written to OUT with WriteAdapter, for peft_parity.py: PEFT
// must load OUT as the adapter it saved itself (same logits).
//
// With SEED, OUT holds new values instead: A and B drawn by LoraInit with init_lora_weights=False
// (both random) from SEED and each module to save moved off the base (+ 0.01 sin(i)), so that PEFT
// loading OUT and `export --adapter OUT --merge` can be compared on an adapter that PEFT never
// wrote. Exit 0 on success; an Error's exit code (2: bad input) with its message otherwise.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/lora.h"
#include "model/peft.h"
#include "runtime/worker_pool.h"

namespace {

namespace model = cputrain::model;

int Run(const std::string& base_dir, const std::string& in, const std::string& out,
        const char* seed) {
  const std::string file = model::ResolveModelFile(base_dir);
  const model::ParamLayout base(model::ReadCheckpointShape(file));
  const model::AdapterInfo info = model::ReadAdapterConfig(in);
  std::unique_ptr<model::Lora> lora = model::OpenAdapter(in, base);
  std::vector<float> params(lora->layout().total());
  if (!seed) {
    model::LoadAdapter(in, *lora, params.data());
  } else {
    model::LoraConfig c = lora->config();
    c.init = model::LoraConfig::Init::kRandom;
    lora = std::make_unique<model::Lora>(base, c);
    std::vector<float> weights(base.total());
    model::LoadCheckpoint(file, base, weights.data());
    cputrain::WorkerPool pool(std::vector<int>(1, 0), nullptr, "init");
    model::LoraInit(pool, *lora, std::strtoull(seed, nullptr, 10), weights.data(), params.data());
    const model::ParamLayout& L = lora->layout();
    for (const model::LoraSaved& x : lora->saved()) {
      const model::TensorInfo& t = L.info(x.t);
      const std::size_t real = t.real_rows ? t.real_rows * (t.numel / t.shape[0]) : t.numel;
      for (int l = 0; l < (t.per_layer ? L.shape().L : 1); ++l) {
        float* p = params.data() + L.offset(x.t, l);
        for (std::size_t i = 0; i < real; ++i) p[i] += 0.01f * std::sin(1.0f + i + 3.0f * l);
      }
    }
  }
  model::WriteAdapter(out, *lora, params.data(), info.base_model_name_or_path);
  std::printf("%s\n", lora->Describe().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: peft_roundtrip BASE ADAPTER OUT [SEED]\n");
    return 2;
  }
  try {
    return Run(argv[1], argv[2], argv[3], argc == 5 ? argv[4] : nullptr);
  } catch (const cputrain::Error& e) {
    std::fprintf(stderr, "peft_roundtrip: %s\n  hint: %s\n", e.what(), e.hint().c_str());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peft_roundtrip: %s\n", e.what());
    return 1;
  }
}
