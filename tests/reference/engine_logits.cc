// engine_logits CHECKPOINT IDS OUT: the engine's fp32 logits for given token ids, for the
// transformers parity test (transformers_parity.py in this directory).
//
//   CHECKPOINT  anything model.init_from takes: a model.bin, a step directory, a run's out_dir
//               or a Hugging Face GPT-2 directory (src/model/checkpoint_path.h)
//   IDS         a safetensors file with "idx", (B, T) token ids stored as F32 (exact below 2^24)
//   OUT         written as a safetensors file with "logits", (B, T, V) F32: the real vocabulary,
//               without the padding columns V..Vp-1
// An encoder with a span head (BERT, DistilBERT question answering) reads "idx", "types" (B, T),
// "lengths" (B: each row's unpadded length, the attention mask's ones) and, with GRADS, "starts"
// and "ends" (B); its "logits" are (B, T, 2): start, end. Its GRADS are d(mean over rows of
// (CE(start) + CE(end)) / 2), BertForQuestionAnswering's loss, named as ToHfTensors names them
// (the body without the "bert." prefix).
//
//
// --head classify:K: CHECKPOINT (a body) is read as a classifier of K outputs (its head as the
// adapter or the body's checkpoint has it).
// --adapter DIR: CHECKPOINT is the base and DIR a PEFT LoRA adapter of it (model/peft.h:
// OpenAdapter, LoadAdapter); the passes run with the adapters (model::LoraPass, as the trainer
// runs them, without dropout), and GRADS holds the trainable tensors' gradients alone (the
// adapters' A and B, the modules to save) under the names PEFT saves them with
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), plus "loss".
//
// A classifier (model/head.h: BERT's, DistilBERT's, a decoder's score) reads "idx", "types" (an
// encoder's), "lengths" and, with GRADS, "labels" (B, 1: single-label ids) or "values" (B, K F32:
// regression or multi-label targets); its "logits" are (B, K), its GRADS those of the mean over
// rows of its problem_type's loss.
//
// The forward pass is model::Forward (src/model/transformer.h), the one the trainer and eval run,
// on a one-thread pool. Exit 0 on success, 1 with a message on stderr otherwise.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/hf.h"
#include "model/lora.h"
#include "model/peft.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "runtime/worker_pool.h"

namespace {

// Reads a (B, T) F32 tensor of token ids below V into dst (B*T ints); false with a message if
// it is missing or holds something else.
bool ReadIds(cputrain::model::SafetensorsFile& in, const char* name, int B, int T, int V,
             int* dst) {
  const cputrain::model::SafeTensor* t = in.Find(name);
  if (!t || t->shape.size() != 2 || t->shape[0] != static_cast<std::uint64_t>(B) ||
      t->shape[1] != static_cast<std::uint64_t>(T)) {
    std::fprintf(stderr, "engine_logits: %s has no (%d, %d) tensor '%s'\n", in.path().c_str(), B, T,
                 name);
    return false;
  }
  std::vector<float> ids(t->numel);
  in.ReadF32(*t, ids.data());
  for (int i = 0; i < B * T; ++i) {
    const int id = static_cast<int>(ids[i]);
    if (static_cast<float>(id) != ids[i] || id < 0 || id >= V) {
      std::fprintf(stderr, "engine_logits: %s[%d] = %g is not a token id below V = %d\n", name, i,
                   static_cast<double>(ids[i]), V);
      return false;
    }
    dst[i] = id;
  }
  return true;
}

// The trainable buffer `grads` (lora's layout) under PEFT's names: WriteAdapter names them, into
// a scratch directory beside `path` that is removed again. Appends to `tensors`, whose data
// points into `keep`.
void AdapterGrads(const cputrain::model::Lora& lora, const float* grads, const std::string& path,
                  std::vector<std::vector<float>>& keep,
                  std::vector<cputrain::model::SafeTensorOut>& tensors) {
  using namespace cputrain;
  const std::string dir = path + ".adapter-names";
  model::WriteAdapter(dir, lora, grads, "");
  model::SafetensorsFile f = model::SafetensorsFile::Open(dir + "/" + model::kAdapterFile);
  keep.reserve(f.tensors().size());
  for (const model::SafeTensor& t : f.tensors()) {
    keep.emplace_back(t.numel);
    f.ReadF32(t, keep.back().data());
    tensors.push_back({t.name, t.shape, keep.back().data()});
  }
  std::filesystem::remove_all(dir);
}

int Run(const std::string& checkpoint, const std::string& adapter, const std::string& head,
        const std::string& ids_path, const std::string& out, const std::string& grads_out) {
  using namespace cputrain;
  kernels::InitBlas();
  const std::string file = model::ResolveModelFile(checkpoint);
  std::optional<model::HeadSpec> spec;
  if (!head.empty()) {  // "classify:K": a body read as a classifier of K outputs
    spec = model::HeadSpec(model::Head::kClassify);
    spec->labels = std::stoi(head.substr(head.find(':') + 1));
  }
  const model::ParamLayout layout(model::ReadCheckpointShape(file, spec));
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
  WorkerPool pool(std::vector<int>(1, 0), nullptr, "logits");
  model::Activations acts(s, B, T, 1);
  std::vector<float> mem(acts.floats(), 0.f);
  std::vector<int> tokens(model::Activations::TokenInts(s, B, T), 0);
  acts.Bind(mem.data(), tokens.data());
  if (!ReadIds(in, "idx", B, T, s.V, acts.inputs)) return 1;
  const bool with_grads = !grads_out.empty();
  const bool encoder = s.encoder();
  const bool classify = s.head == model::Head::kClassify;
  if (classify) {
    if (encoder && !ReadIds(in, "types", B, T, std::max(s.types, 1), acts.types)) return 1;
    if (!ReadIds(in, "lengths", B, 1, T + 1, acts.lengths)) return 1;
    if (with_grads && s.problem == model::ProblemType::kSingleLabel &&
        !ReadIds(in, "labels", B, 1, s.labels, acts.starts))
      return 1;
    if (with_grads && s.problem != model::ProblemType::kSingleLabel) {
      const model::SafeTensor* v = in.Find("values");
      if (!v || v->numel != static_cast<std::uint64_t>(B) * s.labels) {
        std::fprintf(stderr, "engine_logits: %s has no (%d, %d) tensor 'values'\n",
                     ids_path.c_str(), B, s.labels);
        return 1;
      }
      in.ReadF32(*v, acts.label_values);
    }
  } else if (encoder) {
    if (!ReadIds(in, "types", B, T, std::max(s.types, 1), acts.types)) return 1;
    if (!ReadIds(in, "lengths", B, 1, T + 1, acts.lengths)) return 1;
    if (with_grads && (!ReadIds(in, "starts", B, 1, T + 1, acts.starts) ||
                       !ReadIds(in, "ends", B, 1, T + 1, acts.ends)))
      return 1;
  } else if (with_grads && !ReadIds(in, "targets", B, T, s.V, acts.targets)) {
    return 1;
  }
  // The adapter: its trainable buffer and the activations of its sites.
  std::unique_ptr<model::Lora> lora;
  std::vector<float> lora_params, lora_acts;
  model::LoraPass pass;
  if (!adapter.empty()) {
    lora = model::OpenAdapter(adapter, layout);
    lora_params.resize(lora->layout().total());
    model::LoadAdapter(adapter, *lora, lora_params.data());
    lora_acts.assign(lora->ActFloats(B, T), 0.f);
    pass = {lora.get(), lora_params.data(), lora_acts.data()};
  }
  const model::LoraPass* with_lora = lora ? &pass : nullptr;
  const double loss_sum = model::Forward(pool, layout, params.data(), acts, B, T,
                                         /*with_loss=*/with_grads, nullptr, nullptr, with_lora);

  const int V = classify ? s.labels : encoder ? 2 : s.V, stride = s.head_width();
  const std::size_t positions =
      classify ? 1 : static_cast<std::size_t>(T);  // a classifier's: per row
  std::vector<float> logits(static_cast<std::size_t>(B) * positions * V);
  for (std::size_t n = 0; n < static_cast<std::size_t>(B) * positions; ++n)
    for (int v = 0; v < V; ++v) logits[n * V + v] = acts.logits[n * stride + v];
  std::vector<std::uint64_t> shape = {static_cast<std::uint64_t>(B), static_cast<std::uint64_t>(T),
                                      static_cast<std::uint64_t>(V)};
  if (classify) shape.erase(shape.begin() + 1);
  model::WriteSafetensors(out, {{"logits", shape, logits.data()}}, {});
  if (!with_grads) return 0;

  // d(mean cross-entropy over the B*T positions)/d(every parameter), under Hugging Face's names
  // (a tied embedding's gradient includes the LM head's share, as autograd's for the one tensor);
  // an encoder's loss is a mean over the B rows.
  // With an adapter, only the trainable buffer's.
  const float N = static_cast<float>(B) * (encoder || classify ? 1 : T);
  std::vector<float> grads(lora ? lora->layout().total() : layout.total(), 0.f);
  model::Backward(
      pool, layout, params.data(), grads.data(), acts, B, T, 1.0f / N, [](std::size_t) {},
      /*accumulate=*/false, nullptr, with_lora);
  std::vector<model::SafeTensorOut> tensors;
  std::vector<model::HfTensorData> hf;
  std::vector<std::vector<float>> adapter_grads;
  if (lora) {
    AdapterGrads(*lora, grads.data(), grads_out, adapter_grads, tensors);
  } else {
    hf = model::ToHfTensors(layout, grads.data());
    for (const model::HfTensorData& t : hf) tensors.push_back({t.name, t.shape, t.data.data()});
  }
  const float loss = static_cast<float>(loss_sum / N);
  tensors.push_back({"loss", {1}, &loss});
  model::WriteSafetensors(grads_out, std::move(tensors), {});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string adapter, head;
  while (argc > 2 && (std::string(argv[1]) == "--adapter" || std::string(argv[1]) == "--head")) {
    (std::string(argv[1]) == "--adapter" ? adapter : head) = argv[2];
    argc -= 2;
    argv += 2;
  }
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr,
                 "usage: engine_logits [--adapter PEFT_DIR] [--head classify:K] CHECKPOINT "
                 "IDS.safetensors OUT.safetensors [GRADS.safetensors]\n");
    return 1;
  }
  try {
    return Run(argv[1], adapter, head, argv[2], argv[3], argc == 5 ? argv[4] : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_logits: %s\n", e.what());
    return 1;
  }
}
