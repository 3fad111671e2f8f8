// `cputrain-numa generate`: continues a prompt with a trained checkpoint, one position per new
// token (KV cache), printing tokens as they come. --adapter DIR merges a PEFT LoRA adapter into
// the checkpoint's weights in memory first (model/peft.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "common/error.h"
#include "data/tokenizer.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/checkpoint_path.h"
#include "model/decoder.h"
#include "model/family.h"
#include "model/hf.h"
#include "model/peft.h"
#include "topology/binding.h"
#include "topology/placement.h"
#include "topology/topology.h"

namespace cputrain::cli {

namespace {

// The model must know every id the tokenizer produces (V >= its vocabulary), and must not have
// been trained with another tokenizer: a model of V >= 50257 read GPT-2 ids (or a
// tokenizer.json's), which the bytes tokenizer would print as bytes. A V in between (300) is a
// bytes model with spare rows.
void CheckTokenizerFits(const data::Tokenizer& tok, const model::Shape& shape,
                        const std::string& path) {
  const int gpt2_vocab = data::kGpt2VocabSize;
  if (tok.vocab_size() > shape.V) {
    throw InputError(fmt::format("checkpoint '{}' has a vocabulary of {} but tokenizer '{}' has "
                                 "{} tokens",
                                 path, shape.V, tok.name(), tok.vocab_size()),
                     shape.V == 256 ? "use --tokenizer bytes" : "use the model's tokenizer");
  }
  if (tok.name() == "bytes" && shape.V >= gpt2_vocab) {
    throw InputError(
        fmt::format("checkpoint '{}' has a vocabulary of {}, but tokenizer "
                    "'bytes' has 256 tokens: it would print the model's ids as bytes",
                    path, shape.V),
        model::FamilyOf(shape.arch).vocab_tokenizer
            ? fmt::format("use --tokenizer {}", model::FamilyOf(shape.arch).vocab_tokenizer)
            : "use --tokenizer DIR, the model's tokenizer.json directory");
  }
}

// --tokenizer auto: a Hugging Face directory's own tokenizer.json (or vocab.json + merges.txt;
// MakeTokenizer picks), else by the model's vocabulary: the family's vocab_tokenizer (GPT-2's
// BPE) for V >= 50257, bytes below (V = 256, or a bytes model with spare rows). Says on stderr
// which it picked.
std::unique_ptr<data::Tokenizer> ChooseTokenizer(const std::string& flag, const std::string& file,
                                                 const model::Shape& shape) {
  if (flag != "auto") return data::MakeTokenizer(flag);
  std::error_code ec;
  const char* implied = model::FamilyOf(shape.arch).vocab_tokenizer;
  std::string name = implied && shape.V >= data::kGpt2VocabSize ? implied : "bytes";
  const bool own = model::IsHfDir(file) &&
                   (std::filesystem::exists(std::filesystem::path(file) / "tokenizer.json", ec) ||
                    std::filesystem::exists(std::filesystem::path(file) / "vocab.json", ec));
  if (own) {
    name = file;
  } else if (!implied && shape.V > 256) {
    // GPT-2's vocabulary is a guess only a family whose vocabulary implies it can take.
    throw InputError(fmt::format("'{}' is a {} model without a tokenizer beside it", file,
                                 model::ArchName(shape.arch)),
                     "pass --tokenizer DIR: the Hugging Face directory holding the model's "
                     "tokenizer.json");
  }
  std::fprintf(stderr, "note: tokenizer %s (from the model's %s; --tokenizer overrides)\n",
               name.c_str(),
               name == file ? "directory" : fmt::format("vocabulary of {}", shape.V).c_str());
  return data::MakeTokenizer(name);
}

struct GenerateOptions {
  std::string checkpoint, tokenizer = "auto", prompt, adapter;
  int tokens = 256;
  float temperature = 1.0f;
  int top_k = 40;
  float top_p = 1.0f;
  uint64_t seed = 1337;
  std::string topology = "this";
};

// Writes o.tokens tokens continuing `ids` to stdout, on `pool`'s workers.
void Generate(WorkerPool& pool, const model::Shape& shape, const model::ParamLayout& layout,
              const float* params, const data::Tokenizer& tok, const GenerateOptions& o,
              std::vector<int> ids) {
  // The model sees at most maxT positions. When the cache is full, generation goes on with a
  // sliding window: the cache is rebuilt from the last maxT/2 tokens (a recompute every
  // maxT/2 tokens, instead of one per token without a cache).
  const int keep = std::max(1, shape.maxT / 2);
  if (static_cast<int>(ids.size()) > shape.maxT) {
    std::fprintf(stderr, "note: the prompt is %zu tokens; the model sees its last %d\n", ids.size(),
                 keep);
  }
  pool.Run([&] {
    model::Decoder dec(pool, layout, params);
    model::Sampler sampler(o.temperature, o.top_k, o.seed, o.top_p);
    std::vector<int> history = ids;
    auto refill = [&]() -> const float* {
      dec.Reset();
      const float* logits = nullptr;
      const std::size_t from =
          history.size() > static_cast<std::size_t>(shape.maxT) ? history.size() - keep : 0;
      for (std::size_t i = from; i < history.size(); ++i) logits = dec.Feed(history[i]);
      return logits;
    };
    const float* logits = refill();
    for (int i = 0; i < o.tokens; ++i) {
      // Only ids the tokenizer can print (a model may have a larger vocabulary).
      const int next = sampler.Next(logits, tok.vocab_size());
      // The end of text (gpt2's <|endoftext|>, a tokenizer.json's eos): the model is done.
      if (next == tok.eot_token() || next == tok.eos_token()) break;
      const std::string text = tok.DecodeContinuation(&next, 1);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      history.push_back(next);
      if (i + 1 == o.tokens) break;
      if (dec.position() == dec.max_positions()) {
        history.erase(history.begin(), history.end() - keep);  // `next` stays, last
        logits = refill();
      } else {
        logits = dec.Feed(next);
      }
    }
  });
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Continue a prompt with a trained checkpoint");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "model.bin, a checkpoints/step_N directory, a run's out_dir (its newest "
                  "checkpoint), e.g. out/quickstart, or a Hugging Face directory of a decoder "
                  "family (" +
                      model::FamilyNames() + ")")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "auto (from the model: its Hugging Face directory's tokenizer.json or vocab.json "
                  "+ merges.txt, else gpt2 for a vocabulary of 50257 or more, bytes below), gpt2, "
                  "bytes, a tokenizer.json or a directory holding one, or a directory with "
                  "vocab.json + merges.txt");
  cmd->add_option("--adapter", o->adapter,
                  "a PEFT LoRA adapter directory (adapter_config.json + "
                  "adapter_model.safetensors) of the --checkpoint model, merged into it before "
                  "generating (as PEFT's merge_and_unload)");
  cmd->add_option("--prompt", o->prompt, "text to continue (empty: start of a document)");
  cmd->add_option("--tokens", o->tokens, "tokens to generate")->check(AtLeast(1));
  cmd->add_option("--temperature", o->temperature, "0 = greedy; higher = more random")
      ->check(FiniteRange(0, 100));
  cmd->add_option("--top-k", o->top_k, "sample among the k most likely tokens (0 = all)")
      ->check(AtLeast(0));
  cmd->add_option("--top-p", o->top_p,
                  "nucleus sampling: among the top-k, the fewest most likely tokens whose "
                  "probabilities sum to at least p (1 = off)")
      ->check(FiniteRange(0, 1));
  cmd->add_option("--seed", o->seed, "sampling seed")->check(SeedRange());
  cmd->add_option("--topology", o->topology, "machine whose first group's CPUs run it");
  cmd->callback([o] {
    kernels::InitBlas();
    const std::string file = model::ResolveModelFile(o->checkpoint);
    const model::Shape shape = model::ReadCheckpointShape(file);
    if (shape.head != model::Head::kLm) {
      throw InputError(fmt::format("'{}' is a {} {} model, not a language model", o->checkpoint,
                                   model::ArchName(shape.arch), model::HeadName(shape.head)),
                       shape.head == model::Head::kClassify
                           ? "classify texts with it: cputrain-numa classify predict"
                           : "answer questions with it: cputrain-numa qa predict");
    }
    std::unique_ptr<data::Tokenizer> tok = ChooseTokenizer(o->tokenizer, file, shape);
    CheckTokenizerFits(*tok, shape, o->checkpoint);
    model::ParamLayout layout(shape);
    std::vector<float> params(layout.total());
    model::LoadCheckpoint(file, layout, params.data());

    // Run on the first group's pinned CPUs of this machine.
    const topo::Topology t = topo::LoadTopology(o->topology);
    const topo::Plan plan =
        topo::PlanPlacement(t, topo::PlacementConfig{}, std::getenv("OMP_NUM_THREADS"));
    auto binder = topo::MakeBinder(t);
    WorkerPool pool(plan.groups[0].cpus, binder.get(), "gen");
    if (!o->adapter.empty()) {
      model::MergeAdapter(pool, o->adapter, layout, params.data());
      std::fprintf(stderr, "note: adapter %s merged into the model\n", o->adapter.c_str());
    }

    // Every id the tokenizer produces is < vocab_size() <= shape.V (checked above).
    // The prompt as the model saw documents in training (prepare-data's framing): with the
    // tokenizer's bos when it adds one (Hugging Face's add_special_tokens), no eos. An empty
    // prompt is the start of a document: bos, else gpt2's end-of-text, else a newline.
    std::vector<int> ids;
    const std::vector<int>& before = tok->special_frame().before;
    ids.insert(ids.end(), before.begin(), before.end());
    if (!o->prompt.empty()) tok->Encode(o->prompt, &ids);
    if (ids.empty()) ids.push_back(tok->eot_token() >= 0 ? tok->eot_token() : '\n');
    std::fwrite(o->prompt.data(), 1, o->prompt.size(), stdout);
    std::fflush(stdout);
    Generate(pool, shape, layout, params.data(), *tok, *o, std::move(ids));
    std::fputc('\n', stdout);
  });
}

}  // namespace cputrain::cli
