// Writes the seed corpus of fuzz_adapter and fuzz_hf_shards (tests/fuzz/corpus/<target>/): the
// tiny models of fuzz_dir.h, their adapters and shards as this engine writes them.
//   build/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
// Built in the ordinary build only (not a test); rerun it when a format changes.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/files.h"
#include "fuzz_dir.h"
#include "model/checkpoint_path.h"
#include "model/hf.h"
#include "model/peft.h"
#include "model/safetensors.h"

namespace {

using namespace cputrain;
namespace fs = std::filesystem;

std::vector<float> Random(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 0.02f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::string Slurp(const fs::path& p) { return ReadFile(p.string()); }

// <prefix><adapter_config.json>\0<adapter_model.safetensors>
void AdapterSeed(const fs::path& out, const std::string& name, char prefix,
                 const model::Shape& shape, model::LoraConfig cfg) {
  const model::ParamLayout base(shape);
  const model::Lora lora(base, cfg);
  const std::vector<float> p = Random(lora.layout().total(), 7);
  const fs::path dir = fs::temp_directory_path() / ("seed-" + name);
  model::WriteAdapter(dir.string(), lora, p.data(), "");
  std::string seed(1, prefix);
  seed += Slurp(dir / model::kAdapterConfigFile);
  seed += '\0';
  seed += Slurp(dir / model::kAdapterFile);
  fs::remove_all(dir);
  WriteFileAtomic((out / "adapter" / name).string(), seed);
}

// <index>\0<uint32 n><shard 1 (n bytes)><shard 2>; `twice`: the first tensor in both shards.
void ShardsSeed(const fs::path& out, const std::string& name, bool twice) {
  const model::ParamLayout layout(fuzz::TinyLlama());
  const std::vector<float> p = Random(layout.total(), 8);
  const std::vector<model::HfTensorData> t = model::ToHfTensors(layout, p.data());
  const char* files[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  nlohmann::json map = nlohmann::json::object();
  std::vector<model::SafeTensorOut> parts[2];
  for (std::size_t i = 0; i < t.size(); ++i) {
    parts[i % 2].push_back({t[i].name, t[i].shape, t[i].data.data()});
    map[t[i].name] = files[i % 2];
  }
  if (twice) parts[1].push_back({t[0].name, t[0].shape, t[0].data.data()});
  const fs::path dir = fs::temp_directory_path() / ("seed-" + name);
  fs::create_directories(dir);
  std::string shard[2];
  for (int k = 0; k < 2; ++k) {
    model::WriteSafetensors((dir / files[k]).string(), parts[k], {{"format", "pt"}});
    shard[k] = Slurp(dir / files[k]);
  }
  fs::remove_all(dir);
  std::string seed = nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump();
  seed += '\0';
  const uint32_t n = static_cast<uint32_t>(shard[0].size());
  seed.append(reinterpret_cast<const char*>(&n), sizeof n);
  seed += shard[0] + shard[1];
  WriteFileAtomic((out / "hf_shards" / name).string(), seed);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  fs::create_directories(out / "adapter");
  fs::create_directories(out / "hf_shards");
  model::LoraConfig cfg;
  cfg.r = 2;
  cfg.alpha = 4;
  AdapterSeed(out, "llama-q-v.bin", 'l', fuzz::TinyLlama(), cfg);
  AdapterSeed(out, "gpt2-c-attn.bin", 'g', fuzz::TinyGpt2(), cfg);
  cfg.target_modules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                        "gate_proj", "up_proj", "down_proj"};
  cfg.rslora = true;
  cfg.init = model::LoraConfig::Init::kGaussian;
  AdapterSeed(out, "llama-all-modules-rslora.bin", 'l', fuzz::TinyLlama(), cfg);
  ShardsSeed(out, "two-shards.bin", false);
  ShardsSeed(out, "tensor-in-both-shards.bin", true);
  return 0;
}
