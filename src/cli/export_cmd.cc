// `cputrain-numa export --format hf|llmc --checkpoint X -o OUT`: writes a model in another
// layout. hf: a Hugging Face directory of the model's family (config.json + model.safetensors) that
// transformers' GPT2LMHeadModel.from_pretrained loads; llmc: an llm.c model.bin. The input is
// anything generate takes (model.bin, a step directory, an out_dir, a Hugging Face directory).
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/hf.h"

namespace cputrain::cli {

void AddExportCommand(CLI::App& app) {
  struct Opts {
    std::string format, checkpoint, out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a checkpoint as a Hugging Face directory (GPT-2 or Llama) or an llm.c model.bin");
  cmd->add_option(
         "--format", o->format,
         "hf: config.json + model.safetensors (GPT2LMHeadModel or LlamaForCausalLM, by the "
         "model's family); llmc: llm.c's model.bin (GPT-2 only)")
      ->required()
      ->check(CLI::IsMember({"hf", "llmc"}));
  cmd->add_option("--checkpoint", o->checkpoint,
                  "model.bin, a checkpoints/step_N directory, a run's out_dir, or a Hugging "
                  "Face GPT-2 or Llama directory")
      ->required();
  cmd->add_option("-o,--output", o->out,
                  "hf: the directory to write (created if needed); llmc: the model.bin to write")
      ->required();
  cmd->callback([o] {
    const std::string file = model::ResolveModelFile(o->checkpoint);
    const model::Shape shape = model::ReadCheckpointShape(file);
    model::ParamLayout layout(shape);
    std::vector<float> params(layout.total());
    model::LoadCheckpoint(file, layout, params.data());
    if (o->format == "hf") {
      model::ExportHf(o->out, layout, params.data());
      fmt::print("wrote {}/{} and {}/{} ({})\n", o->out, model::kHfWeightsFile, o->out,
                 model::kHfConfigFile, shape.ToString());
    } else {
      if (shape.arch != model::Arch::kGpt2) {
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
