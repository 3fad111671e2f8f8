// Hugging Face model directories in and out, for every family (docs/formats.md, "Hugging Face
// model directories"): config.json (its model_type picks the family, family.h) and the weights in
// model.safetensors or sharded as model.safetensors.index.json + the files its weight_map names.
//
// Reading checks every tensor's presence, dtype and shape against config.json and refuses any
// tensor that is not part of the model (except the buffers the family lists as ignorable); F32,
// BF16 and F16 are converted to fp32. A tied model's lm_head.weight, if present, must equal the
// embedding (a file where it differs is refused, not silently untied). Writing gives F32
// model.safetensors under the names save_pretrained writes (no lm_head.weight when tied) and
// then config.json, each atomically, so transformers loads it with no missing or unexpected key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/params.h"

namespace cputrain::model {

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";

// True if `path` is a directory holding config.json.
bool IsHfDir(const std::string& path);

// The model's shape from <dir>/config.json. Throws InputError naming the key of a config this
// engine cannot run (an unknown model_type, an activation or option no family has, ...), and
// when the directory has no weights.
// head: the task head to read it with (its checkpoint may have been saved with another head, or
// none: a pretraining checkpoint), and a classifier's outputs and loss when set (shape.h,
// HeadSpec); unset: the head its architectures name. need_weights false: config.json alone
// (`cputrain-numa plan` sizes a model before its weights are downloaded).
Shape ReadHfShape(const std::string& dir, std::optional<HeadSpec> head = std::nullopt,
                  bool need_weights = true);

// Loads the weights of <dir> into params (layout.total() floats); config.json's shape must be
// layout.shape(). Padding rows are zero. An encoder's task head that the weights lack (a
// pretrained body) is initialized from head_seed as RandomInit does, with a note; other heads'
// tensors (family.h, hf_dropped_prefixes) are dropped with a note.
// done (params.h): told of each tensor copy once its every part is read and checked; the tensors
// are read layer by layer, so at most one layer's are pending at a time.
void LoadHf(const std::string& dir, const ParamLayout& layout, float* params,
            uint64_t head_seed = 0);
void LoadHf(const std::string& dir, const ParamLayout& layout, float* params, uint64_t head_seed,
            TensorDone done);

// Writes dir/model.safetensors (F32, metadata {"format": "pt"}) and then dir/config.json;
// creates dir if needed.
void ExportHf(const std::string& dir, const ParamLayout& layout, const float* params);

// config.json's text for `shape` (keys sorted, two-space indent, as transformers writes it).
std::string HfConfigJson(const Shape& shape);

// A flat buffer (parameters, or gradients in the same layout) as Hugging Face tensors: names and
// shapes as ExportHf writes them, data copied out (q/k/v and gate/up split, Conv1D transposed,
// padding rows dropped).
struct HfTensorData {
  std::string name;  // without the family's optional prefix
  std::vector<std::uint64_t> shape;
  std::vector<float> data;
  bool head = false;  // a task head's (saved without the prefix)
};
std::vector<HfTensorData> ToHfTensors(const ParamLayout& layout, const float* flat);

}  // namespace cputrain::model
