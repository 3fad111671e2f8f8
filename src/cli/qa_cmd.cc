// `cputrain-numa qa`: extractive question answering on SQuAD (docs/question-answering.md).
// This file holds the data side: `qa features` (what run_qa.py's preprocessing makes of a file)
// and `qa evaluate` (the official SQuAD scripts); `qa train` and `qa predict` plug into the same
// `qa` command through AddQaCommand.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "data/tokenizer.h"
#include "task/squad.h"
#include "task/squad_eval.h"
#include "task/squad_features.h"

namespace cputrain::cli {
namespace {

void Print(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0) {
    throw RuntimeError("writing to stdout failed");
  }
}

// One feature as a JSON line with Hugging Face's column names: run_qa.py's training features
// (labels) or validation features (offset_mapping in characters, null outside the context, and
// example_id).
std::string FeatureJson(const task::QaFeatures& f, std::size_t i,
                        const std::vector<task::Example>& examples,
                        const std::vector<std::uint32_t>& byte_to_char, bool validation) {
  using ojson = nlohmann::ordered_json;
  const int T = f.max_seq_length();
  std::vector<std::int32_t> types(T), mask(T);
  f.TokenTypeIds(i, types.data());
  f.AttentionMask(i, mask.data());
  const auto ids = f.input_ids(i);
  ojson j;
  j["input_ids"] = std::vector<std::int32_t>(ids.begin(), ids.end());
  j["token_type_ids"] = types;
  j["attention_mask"] = mask;
  if (!validation) {
    j["start_positions"] = f.row(i).start_position;
    j["end_positions"] = f.row(i).end_position;
  } else {
    ojson offsets = ojson::array();
    for (const data::Offset& o : f.offsets(i)) {
      if (o.begin == task::kNoOffset.begin) {
        offsets.push_back(nullptr);
      } else {
        offsets.push_back({byte_to_char[o.begin], byte_to_char[o.end]});
      }
    }
    j["offset_mapping"] = std::move(offsets);
    j["example_id"] = examples[static_cast<std::size_t>(f.row(i).example_index)].id;
  }
  return j.dump(-1, ' ', /*ensure_ascii=*/false) + "\n";
}

void WriteDump(const std::string& path, const task::QaFeatures& f,
               const std::vector<task::Example>& examples, bool validation) {
  AtomicFileWriter out(path);
  std::vector<std::uint32_t> byte_to_char;
  for (std::size_t e = 0; e < examples.size(); ++e) {
    const std::string& c = examples[e].context;
    byte_to_char.assign(c.size() + 1, 0);
    // byte_to_char[b]: the characters that start before byte b (at a character's first byte,
    // its index; at the end, the length).
    std::uint32_t chars = 0;
    for (std::size_t b = 0; b < c.size(); ++b) {
      if ((static_cast<unsigned char>(c[b]) & 0xC0) != 0x80) ++chars;
      byte_to_char[b + 1] = chars;
    }
    for (std::size_t i = f.first_feature(e); i < f.first_feature(e + 1); ++i) {
      out.Write(FeatureJson(f, i, examples, byte_to_char, validation));
    }
  }
  out.Commit();
}

}  // namespace

void AddQaFeaturesCommand(CLI::App& qa) {
  struct Opts {
    std::string tokenizer, data, dump;
    int max_seq_length = 384, doc_stride = 128;
    bool json = false, train = false, validation = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = qa.add_subcommand(
      "features",
      "Read a SQuAD file and make run_qa.py's features ([CLS] question [SEP] context window "
      "[SEP], padded); print how many");
  cmd->add_option("--tokenizer", opts->tokenizer, "a BERT WordPiece vocab.txt or its directory")
      ->required();
  cmd->add_option("--data", opts->data,
                  "SQuAD v1.1/v2.0 JSON, or Hugging Face records (JSON Lines or a JSON list)")
      ->required();
  cmd->add_option("--max_seq_length,--max-seq-length", opts->max_seq_length,
                  "tokens a feature (T), question and specials included");
  cmd->add_option("--doc_stride,--doc-stride", opts->doc_stride,
                  "context tokens shared by consecutive windows of a long context");
  auto* train = cmd->add_flag("--train", opts->train,
                              "training features: labels start_positions / end_positions");
  cmd->add_flag("--validation", opts->validation,
                "validation features (the default): offset_mapping and example_id")
      ->excludes(train);
  cmd->add_flag("--json", opts->json, "print the counts as one JSON object");
  cmd->add_option("--dump", opts->dump,
                  "write the features as JSON Lines, Hugging Face's columns (for tests)");
  cmd->callback([opts] {
    task::SquadData data = task::ReadSquad(opts->data);
    std::unique_ptr<data::Tokenizer> tok = data::MakeTokenizer(opts->tokenizer);
    const task::SpecialIds special = task::BertSpecialIds(*tok);
    task::FeatureOptions fo;
    fo.max_seq_length = opts->max_seq_length;
    fo.doc_stride = opts->doc_stride;
    fo.keep_offsets = !opts->train;
    const task::QaFeatures f = task::MakeQaFeatures(data.examples, *tok, special, fo);
    if (!opts->dump.empty()) WriteDump(opts->dump, f, data.examples, !opts->train);
    std::size_t most = 0;
    for (std::size_t e = 0; e < f.num_examples(); ++e) {
      most = std::max(most, f.first_feature(e + 1) - f.first_feature(e));
    }
    if (opts->json) {
      nlohmann::ordered_json j;
      j["data"] = data.path;
      j["layout"] = data.layout;
      j["examples"] = data.examples.size();
      j["unanswerable"] = data.unanswerable;
      j["answer_mismatches"] = data.answer_mismatches;
      j["features"] = f.size();
      j["max_features_per_example"] = most;
      j["max_seq_length"] = fo.max_seq_length;
      j["doc_stride"] = fo.doc_stride;
      j["kind"] = opts->train ? "train" : "validation";
      Print(j.dump() + "\n");
    } else {
      Print(fmt::format(
          "{}: {} examples ({} unanswerable, {} answers not matching the context), {} {} "
          "features of {} tokens (doc_stride {}), at most {} per example\n",
          data.path, data.examples.size(), data.unanswerable, data.answer_mismatches, f.size(),
          opts->train ? "training" : "validation", fo.max_seq_length, fo.doc_stride, most));
    }
  });
}

void AddQaEvaluateCommand(CLI::App& qa) {
  struct Opts {
    std::string data, predictions, na_prob_file;
    bool v2 = false;
    double na_prob_thresh = 1.0;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = qa.add_subcommand(
      "evaluate",
      "Score predictions against a SQuAD file as the official evaluate-v1.1.py (exact_match, "
      "f1) or evaluate-v2.0.py (--version_2_with_negative) does");
  cmd->add_option("--data", opts->data, "the SQuAD file with the gold answers (dev-v1.1.json)")
      ->required();
  cmd->add_option("--predictions", opts->predictions, "predictions.json: {id: answer text}")
      ->required();
  cmd->add_flag("--version_2_with_negative,--version-2-with-negative", opts->v2,
                "SQuAD v2.0 scoring: unanswerable questions, \"\" predicts no answer");
  cmd->add_option("--na_prob_file,--na-prob-file", opts->na_prob_file,
                  "v2.0: {id: probability of no answer} (e.g. null_odds.json); adds best_exact, "
                  "best_f1 and their thresholds");
  cmd->add_option("--na_prob_thresh,--na-prob-thresh", opts->na_prob_thresh,
                  "v2.0: predict no answer where the probability is above this")
      ->check(FiniteRange(-1e300, 1e300));
  cmd->callback([opts] {
    if (!opts->na_prob_file.empty() && !opts->v2) {
      throw InputError("--na_prob_file is for SQuAD v2.0 scoring", "add --version_2_with_negative");
    }
    const task::SquadData data = task::ReadSquad(opts->data);
    const auto preds = task::ReadPredictions(opts->predictions);
    std::vector<std::pair<std::string, double>> na;
    if (!opts->na_prob_file.empty()) na = task::ReadNaProbs(opts->na_prob_file);
    const task::SquadScores s =
        task::EvaluatePredictions(data.examples, preds, opts->v2,
                                  opts->na_prob_file.empty() ? nullptr : &na, opts->na_prob_thresh);
    Print(s.ToJson() + "\n");
  });
}

void AddQaCommand(CLI::App& app, const std::string& command_line) {
  CLI::App* qa = app.add_subcommand(
      "qa", "Extractive question answering (SQuAD, as Hugging Face's run_qa.py): see `qa --help`");
  qa->require_subcommand(1);
  AddQaTrainCommand(*qa, command_line);
  AddQaPredictCommand(*qa);
  AddQaFeaturesCommand(*qa);
  AddQaEvaluateCommand(*qa);
}

}  // namespace cputrain::cli
