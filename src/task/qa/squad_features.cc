// MakeQaFeatures: run_qa.py's prepare_train_features / prepare_validation_features
// (squad_features.h).
#include "task/qa/squad_features.h"

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "common/error.h"
#include "text/python_text.h"

namespace cputrain::task {
namespace {

// One example, tokenized, and where its windows lie in the context's tokens.
struct Tokenized {
  std::vector<int> q_ids, c_ids;
  std::vector<data::Offset> c_offsets;
  std::vector<std::pair<int, int>> windows;  // [begin, end) context tokens
  // The first answer's bytes in the context, found once per example: finding them walks the
  // context from its start (answer_start counts characters), so once per window made a context
  // of n bytes cost n^2 / stride (issue 32: 2 MB took 11 s, 50 MB about two hours).
  std::optional<ByteSpan> answer;
  std::optional<InputError> error;
};

// The windows of the `tokenizers` library's Encoding::truncate (direction right) applied to the
// context when the pair overflows T: length L = T - 3 - n_q, starts 0, L - stride, ..., the last
// one the first to reach the end.
void Windows(const Example& ex, int T, int stride, Tokenized* t) {
  const int nq = static_cast<int>(t->q_ids.size()), nc = static_cast<int>(t->c_ids.size());
  if (static_cast<long>(nq) + nc + 3 <= T) {
    t->windows.emplace_back(0, nc);
    return;
  }
  const long L = static_cast<long>(T) - 3 - nq;
  if (L < 1) {
    t->error = InputError(
        fmt::format("question '{}' is {} tokens: with [CLS] and two [SEP] it leaves no room for "
                    "the context in --max_seq_length {}",
                    ex.id, nq, T),
        "raise --max_seq_length or shorten the question (Hugging Face's tokenizer fails on it "
        "too: \"Truncation error: Second sequence not long enough to be truncated\")");
    return;
  }
  if (stride >= L) {
    t->error = InputError(
        fmt::format("question '{}' is {} tokens, which leaves {} context tokens a window in "
                    "--max_seq_length {}: not more than --doc_stride {}",
                    ex.id, nq, L, T, stride),
        "lower --doc_stride below the window, or raise --max_seq_length (Hugging Face's tokenizer "
        "panics here: \"stride must be strictly less than max_len\")");
    return;
  }
  for (long start = 0;; start += L - stride) {
    const long stop = std::min<long>(start + L, nc);
    t->windows.emplace_back(static_cast<int>(start), static_cast<int>(stop));
    if (stop == nc) break;
  }
}

// run_qa.py's labels for one window. `off` holds what the fast tokenizer's offset_mapping would:
// (0,0) for [CLS], [SEP] and padding, byte offsets for the rest. Bytes order as characters do,
// so every comparison it makes comes out the same.
std::pair<int, int> Label(const std::optional<ByteSpan>& answer, const data::Offset* off, int T,
                          int context_begin, int context_end) {
  if (!answer || context_end == context_begin) return {0, 0};
  const ByteSpan& a = *answer;
  int ts = context_begin, te = context_end - 1;
  if (!(off[ts].begin <= a.begin && off[te].end >= a.end)) return {0, 0};
  // As run_qa.py: past the window's last token the (0,0) of [SEP] and the padding also compare
  // <= start, so an answer starting in the window's last token is labelled T - 1.
  while (ts < T && off[ts].begin <= a.begin) ++ts;
  while (te >= 0 && off[te].end >= a.end) --te;
  return {ts - 1, te + 1};
}

}  // namespace

SpecialIds BertSpecialIds(const data::Tokenizer& tokenizer) {
  SpecialIds s{tokenizer.TokenId("[CLS]"), tokenizer.TokenId("[SEP]"), tokenizer.TokenId("[PAD]")};
  for (auto [name, id] : {std::pair{"[CLS]", s.cls}, {"[SEP]", s.sep}, {"[PAD]", s.pad}}) {
    if (id < 0) {
      throw InputError(fmt::format("tokenizer {} has no {} token", tokenizer.name(), name),
                       "question answering needs a BERT vocabulary (vocab.txt) with [CLS], [SEP] "
                       "and [PAD]");
    }
  }
  return s;
}

void QaFeatures::TokenTypeIds(std::size_t i, std::int32_t* out) const {
  const Row& r = rows_[i];
  for (int t = 0; t < T_; ++t) out[t] = t >= r.context_begin && t < r.length ? 1 : 0;
}

void QaFeatures::AttentionMask(std::size_t i, std::int32_t* out) const {
  for (int t = 0; t < T_; ++t) out[t] = t < rows_[i].length ? 1 : 0;
}

QaFeatures MakeQaFeatures(const std::vector<Example>& examples, const data::Tokenizer& tokenizer,
                          const SpecialIds& special, const FeatureOptions& o) {
  if (o.max_seq_length < 4 || o.max_seq_length > (1 << 20)) {
    throw InputError(fmt::format("--max_seq_length {} is outside [4, 1048576]", o.max_seq_length),
                     "[CLS], [SEP], [SEP] and one token at least; BERT-base takes 512 at most");
  }
  if (o.doc_stride < 0 || o.doc_stride > (1 << 20)) {
    throw InputError(fmt::format("--doc_stride {} is outside [0, 1048576]", o.doc_stride));
  }
  const int T = o.max_seq_length;
  const std::size_t Tz = static_cast<std::size_t>(T);
  QaFeatures f;
  f.T_ = T;
  f.first_.push_back(0);
  // Chunks of examples bound the tokens held at once; within one, tokenizing and filling run in
  // parallel, and features come out in example order whatever the thread count.
  constexpr std::size_t kChunk = 2048;
  std::vector<Tokenized> tok;
  for (std::size_t c0 = 0; c0 < examples.size(); c0 += kChunk) {
    const std::size_t c1 = std::min(examples.size(), c0 + kChunk);
    tok.assign(c1 - c0, Tokenized{});
    tbb::parallel_for(c0, c1, [&](std::size_t e) {
      Tokenized& t = tok[e - c0];
      std::vector<data::Offset> q_offsets;
      tokenizer.EncodeWithOffsets(PyLstrip(examples[e].question), &t.q_ids, &q_offsets);
      tokenizer.EncodeWithOffsets(examples[e].context, &t.c_ids, &t.c_offsets);
      Windows(examples[e], T, o.doc_stride, &t);
      if (!examples[e].answer_starts.empty()) t.answer = AnswerBytes(examples[e], 0);
    });
    const std::size_t n0 = f.rows_.size();
    std::vector<std::size_t> first(c1 - c0 + 1, n0);
    for (std::size_t e = c0; e < c1; ++e) {
      if (tok[e - c0].error) throw *tok[e - c0].error;
      first[e - c0 + 1] = first[e - c0] + tok[e - c0].windows.size();
    }
    const std::size_t n1 = first.back();
    f.rows_.resize(n1);
    f.ids_.resize(n1 * Tz);
    if (o.keep_offsets) f.offsets_.resize(n1 * Tz);
    tbb::parallel_for(c0, c1, [&](std::size_t e) {
      const Tokenized& t = tok[e - c0];
      std::vector<data::Offset> hf_off(Tz);
      for (std::size_t w = 0; w < t.windows.size(); ++w) {
        const std::size_t i = first[e - c0] + w;
        const auto [wb, we] = t.windows[w];
        std::int32_t* ids = f.ids_.data() + i * Tz;
        int p = 0;
        ids[p++] = special.cls;
        for (int id : t.q_ids) ids[p++] = id;
        ids[p++] = special.sep;
        const int context_begin = p;
        std::fill(hf_off.begin(), hf_off.end(), data::Offset{0, 0});
        for (int k = wb; k < we; ++k) {
          hf_off[p] = t.c_offsets[k];
          ids[p++] = t.c_ids[k];
        }
        const int context_end = p;
        ids[p++] = special.sep;
        const int length = p;
        std::fill(ids + p, ids + T, special.pad);
        const auto [start, end] = Label(t.answer, hf_off.data(), T, context_begin, context_end);
        f.rows_[i] = {length, context_begin, start, end, static_cast<std::int32_t>(e)};
        if (o.keep_offsets) {
          data::Offset* off = f.offsets_.data() + i * Tz;
          std::fill(off, off + T, kNoOffset);
          std::copy(hf_off.begin() + context_begin, hf_off.begin() + context_end,
                    off + context_begin);
        }
      }
    });
    for (std::size_t e = c0; e < c1; ++e) f.first_.push_back(first[e - c0 + 1]);
  }
  return f;
}

}  // namespace cputrain::task
