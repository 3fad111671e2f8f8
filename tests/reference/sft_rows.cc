// Our SFT rows for tests/reference/sft_parity.py: a dataset tokenized as `sft train` does
// (task/sft/sft_data.h), one JSON line a row on stdout: {"input_ids": [...], "labels": [...]} with
// -100 for an ignored label (TRL's collator's labels), or {"error": MESSAGE} once on a bad input.
// PACK 1: the packed rows instead (PackBfd), each with its documents' "seq_lengths".
//
//   sft_rows TOKENIZER_DIR DATASET MAX_LENGTH COMPLETION_ONLY(0|1) ASSISTANT_ONLY(0|1) PACK(0|1)
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "common/error.h"
#include "data/tokenizer.h"
#include "task/sft/sft_data.h"

int main(int argc, char** argv) {
  using cputrain::chat::Json;
  if (argc != 7) {
    std::cerr << "usage: sft_rows TOKENIZER_DIR DATASET MAX_LENGTH COMPLETION_ONLY ASSISTANT_ONLY "
                 "PACK\n";
    return 2;
  }
  try {
    const std::string dir = argv[1];
    auto tok = cputrain::data::MakeTokenizer(dir);
    cputrain::chat::ChatTemplate tmpl = cputrain::chat::LoadChatTemplate(dir);
    cputrain::task::SftTokenizing tk;
    tk.tokenizer = tok.get();
    tk.chat = &tmpl;
    tk.special = cputrain::chat::SpecialTokenVariables(dir);
    tk.eos_text = tk.special.value("eos_token", "");
    cputrain::task::SftOptions o;
    o.max_length = std::atoi(argv[3]);
    o.completion_only_loss = std::string(argv[4]) == "1";
    o.assistant_only_loss = std::string(argv[5]) == "1";
    const auto rows = cputrain::task::ReadJsonRows(argv[2], "--dataset_path", 0);
    const cputrain::task::SftRows r =
        cputrain::task::TokenizeSft(rows, argv[2], "--dataset_path", tk, o);
    std::vector<std::vector<std::size_t>> bins;
    if (std::string(argv[6]) == "1") {
      bins = cputrain::task::PackBfd(r, o.max_length);
    } else {
      for (std::size_t i = 0; i < r.rows(); ++i) bins.push_back({i});
    }
    for (const std::vector<std::size_t>& bin : bins) {
      Json ids = Json::array(), labels = Json::array(), lengths = Json::array();
      for (std::size_t i : bin) {
        for (std::size_t k = r.begin[i]; k < r.begin[i + 1]; ++k) {
          ids.push_back(r.ids[k]);
          labels.push_back(r.label[k] ? r.ids[k] : -100);
        }
        lengths.push_back(r.begin[i + 1] - r.begin[i]);
      }
      Json row = {{"input_ids", ids}, {"labels", labels}};
      if (std::string(argv[6]) == "1") row["seq_lengths"] = lengths;
      std::cout << row.dump() << "\n";
    }
  } catch (const cputrain::Error& e) {
    std::cout << Json{{"error", e.what()}}.dump() << "\n";
  }
  return 0;
}
