// `cputrain-numa export --format hf|llmc --checkpoint X -o OUT [--adapter DIR --merge]`: writes
// a model in another layout. hf: a Hugging Face directory of the model's family (config.json +
// model.safetensors) that transformers' from_pretrained loads; llmc: an llm.c model.bin. The input
// is anything generate takes (model.bin, a step directory, an out_dir, a Hugging Face directory).
// --adapter DIR --merge: the input with a PEFT LoRA adapter merged in (PEFT's merge_and_unload;
// model/peft.h).
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/family.h"
#include "model/hf.h"
#include "model/peft.h"
#include "runtime/worker_pool.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"

namespace cputrain::cli {

void AddExportCommand(CLI::App& app) {
  struct Opts {
    std::string format, checkpoint, out, adapter;
    bool merge = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a checkpoint as a Hugging Face directory or an llm.c model.bin, optionally with a "
      "PEFT LoRA adapter merged in (--adapter DIR --merge)");
  cmd->add_option("--format", o->format,
                  "hf: config.json + model.safetensors (GPT2LMHeadModel, LlamaForCausalLM, "
                  "BertForQuestionAnswering, ..., by the model's family and head); llmc: llm.c's "
                  "model.bin (GPT-2 only)")
      ->required()
      ->check(CLI::IsMember({"hf", "llmc"}));
  cmd->add_option("--checkpoint", o->checkpoint,
                  "model.bin, a checkpoints/step_N directory, a run's out_dir, or a Hugging "
                  "Face model directory (the base model, with --adapter)")
      ->required();
  cmd->add_option("-o,--output", o->out,
                  "hf: the directory to write (created if needed); llmc: the model.bin to write")
      ->required();
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
