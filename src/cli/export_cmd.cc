// `cputrain-numa export --format hf|llmc|gguf --checkpoint X -o OUT [--adapter DIR --merge]`:
// writes a model in another layout. hf: a Hugging Face directory of the model's family
// (config.json + model.safetensors) that transformers' from_pretrained loads; llmc: an llm.c
// model.bin; gguf: llama.cpp's GGUF file with the tokenizer (model/gguf.h, docs/gguf.md). The input
// is anything generate takes (model.bin, a step directory, an out_dir, a Hugging Face directory).
// --adapter DIR --merge: the input with a PEFT LoRA adapter merged in (PEFT's merge_and_unload;
// model/peft.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "data/vocab_list.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/family.h"
#include "model/gguf.h"
#include "model/hf.h"
#include "model/peft.h"
#include "runtime/worker_pool.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"

namespace cputrain::cli {
namespace {

// --format gguf's tokenizer: --tokenizer, else the checkpoint's own directory when it holds a
// tokenizer.json (a Hugging Face model directory). Checked before the weights are read.
data::VocabList GgufVocab(const std::string& tokenizer, const std::string& checkpoint, int V) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string path = tokenizer;
  if (path.empty() && fs::is_regular_file(fs::path(checkpoint) / "tokenizer.json", ec)) {
    path = checkpoint;
  }
  if (path.empty()) {
    throw InputError(fmt::format("--format gguf writes the tokenizer into the file, and '{}' "
                                 "holds no tokenizer.json",
                                 checkpoint),
                     "pass --tokenizer DIR: the model's Hugging Face tokenizer (tokenizer.json, "
                     "tokenizer_config.json)");
  }
  return data::ListVocab(path, V);
}

}  // namespace

void AddExportCommand(CLI::App& app) {
  struct Opts {
    std::string format, checkpoint, out, adapter, tokenizer, outtype = "f16";
    bool merge = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a checkpoint as a Hugging Face directory, an llm.c model.bin or a llama.cpp GGUF "
      "file, optionally with a PEFT LoRA adapter merged in (--adapter DIR --merge)");
  cmd->add_option("--format", o->format,
                  "hf: config.json + model.safetensors (GPT2LMHeadModel, LlamaForCausalLM, "
                  "BertForQuestionAnswering, ..., by the model's family and head); llmc: llm.c's "
                  "model.bin (GPT-2 only); gguf: llama.cpp's GGUF v3 file with the tokenizer "
                  "(the decoder families; docs/gguf.md)")
      ->required()
      ->check(CLI::IsMember({"hf", "llmc", "gguf"}));
  cmd->add_option("--checkpoint", o->checkpoint,
                  "model.bin, a checkpoints/step_N directory, a run's out_dir, or a Hugging "
                  "Face model directory (the base model, with --adapter)")
      ->required();
  cmd->add_option("-o,--output", o->out,
                  "hf: the directory to write (created if needed); llmc: the model.bin to write; "
                  "gguf: the .gguf file to write")
      ->required();
  cmd->add_option("--outtype", o->outtype,
                  "gguf: the weights' type (norms, biases and positions stay f32, as "
                  "convert_hf_to_gguf.py writes them)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}))
      ->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "gguf: the model's Hugging Face tokenizer (a directory with tokenizer.json; "
                  "default: --checkpoint's when it holds one)");
  cmd->add_option("--adapter", o->adapter,
                  "a PEFT LoRA adapter directory (adapter_config.json + "
                  "adapter_model.safetensors) of the --checkpoint model; needs --merge");
  cmd->add_flag("--merge", o->merge,
                "write the --checkpoint model with the --adapter merged into its weights "
                "(PEFT's merge_and_unload)");
  cmd->callback([o] {
    if (!o->adapter.empty() && !o->merge) {
      throw InputError(
          "--adapter without --merge: the adapter directory is already PEFT's export of the "
          "adapter (PeftModel.from_pretrained loads it over the base)",
          "add --merge to write the base model with the adapter merged in");
    }
    if (o->merge && o->adapter.empty()) {
      throw InputError("--merge needs --adapter DIR, the PEFT adapter to merge",
                       "pass --adapter DIR (adapter_config.json + adapter_model.safetensors)");
    }
    const std::string file = model::ResolveModelFile(o->checkpoint);
    const model::Shape shape = model::ReadCheckpointShape(file);
    data::VocabList vocab;
    if (o->format == "gguf") {
      model::CheckGgufModel(shape);  // before the tokenizer: BERT has no GGUF export at all
      vocab = GgufVocab(o->tokenizer, o->checkpoint, shape.V);
      model::CheckGguf(shape, vocab);
    }
    model::ParamLayout layout(shape);
    std::vector<float> params(layout.total());
    model::LoadCheckpoint(file, layout, params.data());
    if (o->merge) {
      // The merge's products on this machine's first group of CPUs, as generate runs.
      const topo::Topology t = topo::LoadTopology("this");
      const topo::Plan plan =
          topo::PlanPlacement(t, topo::PlacementConfig{}, std::getenv("OMP_NUM_THREADS"));
      auto binder = topo::MakeBinder(t);
      WorkerPool pool(plan.groups[0].cpus, binder.get(), "merge");
      model::MergeAdapter(pool, o->adapter, layout, params.data());
      fmt::print("merged adapter {} into {}\n", o->adapter, o->checkpoint);
    }
    if (o->format == "hf") {
      model::ExportHf(o->out, layout, params.data());
      fmt::print("wrote {}/{} and {}/{} ({})\n", o->out, model::kHfWeightsFile, o->out,
                 model::kHfConfigFile, shape.ToString());
    } else if (o->format == "gguf") {
      const model::GgufOutType type = model::GgufOutTypeFromName(o->outtype);
      const model::GgufSummary s = model::ExportGguf(o->out, layout, params.data(), vocab, type,
                                                     std::filesystem::path(o->out).stem().string());
      fmt::print(
          "wrote {} ({} tensors, {} {}{}{}, {:.1f} MB; {} tokens; {})\n", o->out, s.tensors,
          s.quantized, o->outtype, s.f32 ? fmt::format(", {} f32", s.f32) : "",
          s.f16_fallback ? fmt::format(", {} f16 (rows not a multiple of 32)", s.f16_fallback) : "",
          s.bytes / 1e6, vocab.tokens.size(), shape.ToString());
    } else {
      if (!model::FamilyOf(shape.arch).llmc) {
        throw InputError(fmt::format("--format llmc: llm.c's model.bin holds GPT-2 only, and "
                                     "'{}' is a {} model",
                                     o->checkpoint, model::ArchName(shape.arch)),
                         "use --format hf (a Hugging Face directory)");
      }
      model::SaveCheckpoint(o->out, layout, params.data());
      fmt::print("wrote {} ({})\n", o->out, shape.ToString());
    }
  });
}

}  // namespace cputrain::cli
