// `qa features` and `qa evaluate` (qa.h): the data side of question answering, commands of the
// qa task beside the core's train and predict.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "data/tokenizer.h"
#include "task/qa/qa.h"
#include "task/qa/squad.h"
#include "task/qa/squad_eval.h"
#include "task/qa/squad_features.h"

namespace cputrain::task {
namespace {

void Print(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0) {
    throw RuntimeError("writing to stdout failed");
  }
}

// One feature as a JSON line with Hugging Face's column names: run_qa.py's training features
// (labels) or validation features (offset_mapping in characters, null outside the context, and
// example_id).
std::string FeatureJson(const QaFeatures& f, std::size_t i, const std::vector<Example>& examples,
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
      if (o.begin == kNoOffset.begin) {
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

void WriteDump(const std::string& path, const QaFeatures& f, const std::vector<Example>& examples,
               bool validation) {
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

struct FeaturesOpts {
  std::string tokenizer, data, dump;
  int max_seq_length = 384, doc_stride = 128;
  bool json = false, train = false, validation = false;
};

void RunFeatures(const FeaturesOpts& o) {
  if (o.train && o.validation) {
    throw InputError("--train excludes --validation", "pass one of them");
  }
  SquadData data = ReadSquad(o.data);
  std::unique_ptr<data::Tokenizer> tok = data::MakeTokenizer(o.tokenizer);
  const SpecialIds special = BertSpecialIds(*tok);
  FeatureOptions fo;
  fo.max_seq_length = o.max_seq_length;
  fo.doc_stride = o.doc_stride;
  fo.keep_offsets = !o.train;
  const QaFeatures f = MakeQaFeatures(data.examples, *tok, special, fo);
  if (!o.dump.empty()) WriteDump(o.dump, f, data.examples, !o.train);
  std::size_t most = 0;
  for (std::size_t e = 0; e < f.num_examples(); ++e) {
    most = std::max(most, f.first_feature(e + 1) - f.first_feature(e));
  }
  if (!o.json) {
    Print(fmt::format(
        "{}: {} examples ({} unanswerable, {} answers not matching the context), {} {} "
        "features of {} tokens (doc_stride {}), at most {} per example\n",
        data.path, data.examples.size(), data.unanswerable, data.answer_mismatches, f.size(),
        o.train ? "training" : "validation", fo.max_seq_length, fo.doc_stride, most));
    return;
  }
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
  j["kind"] = o.train ? "train" : "validation";
  Print(j.dump() + "\n");
}

Extra FeaturesCommand() {
  auto o = std::make_shared<FeaturesOpts>();
  return {
      "features",
      "Read a SQuAD file and make run_qa.py's features ([CLS] question [SEP] context window "
      "[SEP], padded); print how many",
      {Option("tokenizer", "a BERT WordPiece vocab.txt or its directory", &o->tokenizer).Required(),
       Option("data", "SQuAD v1.1/v2.0 JSON, or Hugging Face records (JSON Lines or a JSON list)",
              &o->data)
           .Required(),
       {"max_seq_length", "tokens a feature (T), question and specials included",
        &o->max_seq_length, 4, 1 << 20},
       {"doc_stride", "context tokens shared by consecutive windows of a long context",
        &o->doc_stride, 0, 1 << 20},
       {"train", "training features: labels start_positions / end_positions", &o->train},
       {"validation", "validation features (the default): offset_mapping and example_id",
        &o->validation},
       {"json", "print the counts as one JSON object", &o->json},
       {"dump", "write the features as JSON Lines, Hugging Face's columns (for tests)", &o->dump}},
      [o] { RunFeatures(*o); }};
}

struct EvaluateOpts {
  std::string data, predictions, na_prob_file;
  bool v2 = false;
  double na_prob_thresh = 1.0;
};

Extra EvaluateCommand() {
  auto o = std::make_shared<EvaluateOpts>();
  return {
      "evaluate",
      "Score predictions against a SQuAD file as the official evaluate-v1.1.py (exact_match, "
      "f1) or evaluate-v2.0.py (--version_2_with_negative) does",
      {Option("data", "the SQuAD file with the gold answers (dev-v1.1.json)", &o->data).Required(),
       Option("predictions", "predictions.json: {id: answer text}", &o->predictions).Required(),
       {"version_2_with_negative",
        "SQuAD v2.0 scoring: unanswerable questions, \"\" predicts no answer", &o->v2},
       {"na_prob_file",
        "v2.0: {id: probability of no answer} (e.g. null_odds.json); adds best_exact, "
        "best_f1 and their thresholds",
        &o->na_prob_file},
       {"na_prob_thresh", "v2.0: predict no answer where the probability is above this",
        &o->na_prob_thresh, -1e300, 1e300}},
      [o] {
        if (!o->na_prob_file.empty() && !o->v2) {
          throw InputError("--na_prob_file is for SQuAD v2.0 scoring",
                           "add --version_2_with_negative");
        }
        const SquadData data = ReadSquad(o->data);
        const auto preds = ReadPredictions(o->predictions);
        std::vector<std::pair<std::string, double>> na;
        if (!o->na_prob_file.empty()) na = ReadNaProbs(o->na_prob_file);
        const SquadScores s =
            EvaluatePredictions(data.examples, preds, o->v2,
                                o->na_prob_file.empty() ? nullptr : &na, o->na_prob_thresh);
        Print(s.ToJson() + "\n");
      }};
}

}  // namespace

std::vector<Extra> QaExtras() { return {FeaturesCommand(), EvaluateCommand()}; }

}  // namespace cputrain::task
