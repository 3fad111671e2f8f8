// engine_logits CHECKPOINT IDS OUT: the engine's fp32 logits for given token ids, for the
// transformers parity test (transformers_parity.py in this directory).
//
//   CHECKPOINT  anything model.init_from takes: a model.bin, a step directory, a run's out_dir
//               or a Hugging Face GPT-2 directory (src/model/checkpoint_path.h)
//   IDS         a safetensors file with "idx", (B, T) token ids stored as F32 (exact below 2^24)
//   OUT         written as a safetensors file with "logits", (B, T, V) F32: the real vocabulary,
//               without the padding columns V..Vp-1
//
// The forward pass is model::Forward (src/model/transformer.h), the one the trainer and eval run,
// on a one-thread pool. Exit 0 on success, 1 with a message on stderr otherwise.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"

namespace {

int Run(const std::string& checkpoint, const std::string& ids_path, const std::string& out) {
  using namespace cputrain;
  kernels::InitBlas();
  const std::string file = model::ResolveModelFile(checkpoint);
  const model::ParamLayout layout(model::ReadCheckpointShape(file));
  const model::Shape s = layout.shape();
  std::vector<float> params(layout.total());
  model::LoadCheckpoint(file, layout, params.data());

  model::SafetensorsFile in = model::SafetensorsFile::Open(ids_path);
  const model::SafeTensor* idx = in.Find("idx");
  if (!idx || idx->shape.size() != 2) {
    std::fprintf(stderr, "engine_logits: %s has no 2-D tensor 'idx'\n", ids_path.c_str());
    return 1;
  }
  const int B = static_cast<int>(idx->shape[0]), T = static_cast<int>(idx->shape[1]);
  if (B < 1 || T < 1 || T > s.maxT) {
    std::fprintf(stderr, "engine_logits: idx is (%d, %d); T must be 1..%d\n", B, T, s.maxT);
    return 1;
  }
  std::vector<float> ids(idx->numel);
  in.ReadF32(*idx, ids.data());

  WorkerPool pool(std::vector<int>(1, 0), nullptr, "logits");
  model::Activations acts(s, B, T, 1);
  std::vector<float> mem(acts.floats(), 0.f);
  std::vector<int> tokens(2 * static_cast<std::size_t>(B) * T, 0);
  acts.Bind(mem.data(), tokens.data());
  for (int i = 0; i < B * T; ++i) {
    const int id = static_cast<int>(ids[i]);
    if (static_cast<float>(id) != ids[i] || id < 0 || id >= s.V) {
      std::fprintf(stderr, "engine_logits: idx[%d] = %g is not a token id below V = %d\n", i,
                   static_cast<double>(ids[i]), s.V);
      return 1;
    }
    acts.inputs[i] = id;
  }
  model::Forward(pool, layout, params.data(), acts, B, T, /*with_loss=*/false);

  std::vector<float> logits(static_cast<std::size_t>(B) * T * s.V);
  for (std::size_t n = 0; n < static_cast<std::size_t>(B) * T; ++n)
    for (int v = 0; v < s.V; ++v) logits[n * s.V + v] = acts.logits[n * s.Vp + v];
  const std::vector<std::uint64_t> shape = {static_cast<std::uint64_t>(B),
                                            static_cast<std::uint64_t>(T),
                                            static_cast<std::uint64_t>(s.V)};
  model::WriteSafetensors(out, {{"logits", shape, logits.data()}}, {});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: engine_logits CHECKPOINT IDS.safetensors OUT.safetensors\n");
    return 1;
  }
  try {
    return Run(argv[1], argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_logits: %s\n", e.what());
    return 1;
  }
}
