// The encoder families' forward and backward passes (BERT, DistilBERT; family.h's BlockKind
// says what an encoder block is): post-norm blocks with bidirectional attention over each row's
// real positions, dropout where Hugging Face's modeling code has it, and a task head with its
// loss. Kept beside transformer.cc's decoder rather than inside it: the post-norm order moves
// every norm and residual add, and the two read more plainly apart. A classifier's passes run on
// each row's real positions alone, packed (Activations::Unpad: nothing real depends on padding);
// the span head's stay on the padded (B,T) rows.
#include <algorithm>
#include <cstdint>

#include "common/error.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/head.h"
#include "model/net.h"

namespace cputrain::model {
namespace {

// Dropout sites of a layer: 0 after the embeddings (layer -1) or before the head (layer L);
// 1 attention probabilities, 2 attention output, 3 MLP output.
enum Site : uint64_t { kEmbOrHead = 0, kAttnProbs = 1, kAttnOut = 2, kMlpOut = 3 };

// The seed of one site's mask from the step's seed (SplitMix64's finalizer over the pair).
uint64_t SiteSeed(uint64_t seed, int layer, Site site) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(layer + 2) * 4 + site + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A classifier's passes run on the rows' real positions alone (Activations::Unpad); the span
// head reads every position's logits, padded ones included (their softmax over T): padded.
const Activations::Packed* Packing(const ParamLayout& layout, Activations& a, int B, int T) {
  return layout.shape().head == Head::kClassify ? a.Unpad(B, T) : nullptr;
}

// What both passes need: the net, the activations and the dropout of this batch.
struct Pass {
  Pass(const ParamLayout& layout, const float* params, float* grads, const LoraPass* lora,
       Activations& a, int B, int T)
      : n(layout, B, T, params, grads, lora, a.dropout, Packing(layout, a, B, T)),
        a(a),
        B(B),
        T(T) {}
  Net n;
  Activations& a;
  const int B, T;
  // Probability p of a site if dropout is on (else 0), with its seed and the global index of
  // this buffer's first element (row0 times the elements per row).
  float P(float p) const { return a.dropout.on ? p : 0.f; }
  uint64_t Seed(int layer, Site site) const { return SiteSeed(a.dropout.seed, layer, site); }
  uint64_t HiddenOffset() const { return a.dropout.row0 * static_cast<uint64_t>(T) * n.C; }
  kernels::AttentionOptions Attn(int layer) const {
    kernels::AttentionOptions o;
    o.kv_len = a.lengths;
    o.row_start = n.row_start;
    o.dropout = P(n.s.attn_dropout);
    o.dropout_seed = Seed(layer, kAttnProbs);
    o.dropout_offset = a.dropout.row0 * static_cast<uint64_t>(n.NH) * T * T;
    return o;
  }
  // x (N,C) dropped in place at a hidden site (nothing when p is 0).
  void Drop(WorkerPool& pool, float* x, float p, int layer, Site site) const {
    if (p > 0) {
      kernels::DropoutRowsForward(pool, x, x, n.N, n.C, p, Seed(layer, site), HiddenOffset(),
                                  n.row_index);
    }
  }
  // The embedding kernels' view of the rows.
  kernels::PackedRows Rows() const { return {n.N, n.row_index}; }
  // A classifier's dropout of its pooled (B,C) vectors (model/head.h): the head's site, indexed
  // by the rows' global element index.
  HeadDropout ClassifierDropout() const {
    return {P(n.s.head_dropout), Seed(n.s.L, kEmbOrHead),
            a.dropout.row0 * static_cast<uint64_t>(n.C)};
  }
  // The gradient through that dropout: into out, or dout itself when p is 0.
  const float* DropBack(WorkerPool& pool, float* out, const float* dout, float p, int layer,
                        Site site) const {
    if (!(p > 0)) return dout;
    kernels::DropoutRowsBackward(pool, out, dout, n.N, n.C, p, Seed(layer, site), HiddenOffset(),
                                 n.row_index);
    return out;
  }
};

// Block l from x (N,C), the previous block's output, into a.layers[l]: the forward's, and the
// backward's recompute under gradient checkpointing (transformer.h, Activations), which runs the
// same kernels in the same order (the same bits; the block's output ln2, kept per layer, is
// written again with them).
void BlockForward(WorkerPool& pool, const Pass& pass, const Bf16Operands* bf16, int l,
                  const float* x) {
  namespace k = kernels;
  const Net& n = pass.n;
  Activations& a = pass.a;
  const int B = pass.B, T = pass.T, C = n.C;
  const std::size_t N = n.N;
  auto linear = [&](float* out, const float* inp, Tensor w, Tensor b, int IC, int OC) {
    n.Linear(pool, bf16, out, inp, w, b, l, IC, OC, OC);
  };
  auto norm = [&](float* out, float* mean, float* rstd, const float* inp, Tensor w, Tensor b) {
    k::LayerNormForward(pool, out, mean, rstd, inp, n.P(w, l), n.P(b, l), N, C, n.s.norm_eps);
  };
  const float hidden_p = pass.P(n.s.hidden_dropout);
  Activations::Layer& A = a.layers[l];
  linear(A.qkv, x, kQkvw, kQkvb, C, n.Q);
  const k::AttentionOptions opt = pass.Attn(l);
  if (bf16) {
    k::AttentionForwardBf16(pool, A.atty, A.att, A.qkv, bf16->in, bf16->attn, B, T, C, n.NH, n.KV,
                            opt);
  } else {
    k::AttentionForward(pool, A.atty, A.att, A.qkv, B, T, C, n.NH, n.KV, opt);
  }
  linear(A.attproj, A.atty, kAttprojw, kAttprojb, C, C);
  if (n.kind.attn_out_dropout) pass.Drop(pool, A.attproj, hidden_p, l, kAttnOut);
  k::ResidualForward(pool, A.residual2, x, A.attproj, N * C);
  norm(A.ln1, A.ln1_mean, A.ln1_rstd, A.residual2, kLn1w, kLn1b);
  linear(A.fch, A.ln1, kFcw, kFcb, C, n.F);
  k::GeluErfForward(pool, A.fch_gelu, A.fch, N * n.F);
  linear(A.fcproj, A.fch_gelu, kFcprojw, kFcprojb, n.F, C);
  pass.Drop(pool, A.fcproj, hidden_p, l, kMlpOut);
  k::ResidualForward(pool, A.residual3, A.ln1, A.fcproj, N * C);
  norm(A.ln2, A.ln2_mean, A.ln2_rstd, A.residual3, kLn2w, kLn2b);
}

}  // namespace

double EncoderForwardPass(WorkerPool& pool, const ParamLayout& layout, const float* params,
                          Activations& a, int B, int T, bool with_loss, const Bf16Operands* bf16,
                          const LoraPass* lora) {
  namespace k = kernels;
  const Pass pass(layout, params, nullptr, lora, a, B, T);
  const Net& n = pass.n;
  const Shape& s = n.s;
  const int C = n.C;
  const std::size_t N = n.N;
  auto P = [&](Tensor t, int l = 0) { return n.P(t, l); };
  auto linear = [&](float* out, const float* inp, Tensor w, Tensor b, int l, int IC, int OC) {
    n.Linear(pool, bf16, out, inp, w, b, l, IC, OC, OC);
  };
  auto norm = [&](float* out, float* mean, float* rstd, const float* inp, Tensor w, Tensor b,
                  int l) {
    k::LayerNormForward(pool, out, mean, rstd, inp, P(w, l), P(b, l), N, C, s.norm_eps);
  };
  const float hidden_p = pass.P(s.hidden_dropout);

  a.PoisonRedZones();
  // x = drop(normE(wte[token] + wpe[t] + wtt[type]))
  k::EncoderForward(pool, a.emb, a.inputs, P(kWte), P(kWpe), B, T, C,
                    layout.has(kWtt) ? a.types : nullptr, P(kWtt), pass.Rows());
  norm(a.encoded, a.emb_mean, a.emb_rstd, a.emb, kLnEw, kLnEb, 0);
  pass.Drop(pool, a.encoded, hidden_p, -1, kEmbOrHead);
  const float* x = a.encoded;
  for (int l = 0; l < s.L; ++l) {
    BlockForward(pool, pass, bf16, l, x);
    x = a.layers[l].ln2;
  }
  if (s.head == Head::kClassify) {
    return ClassifyForward(pool, n, a, x, bf16, with_loss, pass.ClassifierDropout());
  }
  // The span head's input: the last hidden state, dropped (DistilBERT's qa_dropout) into lnf.
  std::copy(x, x + N * C, a.lnf);
  pass.Drop(pool, a.lnf, pass.P(s.head_dropout), s.L, kEmbOrHead);
  linear(a.logits, a.lnf, kHeadw, kHeadb, 0, C, 2);
  if (!with_loss) return 0.0;
  // BertForQuestionAnswering: (CE(start) + CE(end)) / 2 per row, a label outside [0, T) ignored.
  k::SpanCrossEntropyForward(pool, a.losses, a.lse, a.logits, a.starts, a.ends, B, T);
  double sum = 0;  // in row order: the same for any pool size
  for (int b = 0; b < B; ++b) sum += 0.5 * (a.losses[2 * b] + a.losses[2 * b + 1]);
  return sum;
}

void EncoderBackwardPass(WorkerPool& pool, const ParamLayout& layout, const float* params,
                         float* grads, Activations& a, int B, int T, float dloss,
                         FunctionRef<void(std::size_t)> on_ready, bool acc,
                         const Bf16Operands* bf16, const LoraPass* lora) {
  namespace k = kernels;
  const Pass pass(layout, params, grads, lora, a, B, T);
  const Net& n = pass.n;
  const Shape& s = n.s;
  const int C = n.C;
  const std::size_t N = n.N;
  auto P = [&](Tensor t, int l = 0) { return n.P(t, l); };
  auto G = [&](Tensor t, int l = 0) { return n.G(t, l); };  // null: frozen (LoRA)
  auto linear_back = [&](float* dinp, Tensor w, Tensor b, int l, const float* dout,
                         const float* inp, int IC, int OC) {
    n.LinearBack(pool, bf16, dinp, w, b, l, dout, inp, IC, OC, OC, acc);
  };
  // d inp of a LayerNorm, written into a.dln (the kernel adds: zeroed first), and its weights'.
  auto norm_back = [&](const float* dout, const float* inp, const float* mean, const float* rstd,
                       Tensor w, Tensor b, int l) {
    ZeroFill(pool, a.dln, N * C);
    k::LayerNormBackward(pool, a.dln, G(w, l), G(b, l), dout, inp, P(w, l), mean, rstd, N, C, acc);
  };
  const float hidden_p = pass.P(s.hidden_dropout);

  // Loss and head: dlogits in place; d of the head's input into dresidual, back through its
  // dropout: the gradient of the last block's output. A classifier's: model/head.h.
  if (s.head == Head::kClassify) {
    ClassifyBackward(pool, n, a, a.dresidual, bf16, dloss, acc, pass.ClassifierDropout());
  } else {
    k::SpanCrossEntropyBackward(pool, a.logits, a.logits, a.lse, a.starts, a.ends, 0.5f * dloss,
                                0.5f * dloss, B, T);
    linear_back(a.dresidual, kHeadw, kHeadb, 0, a.logits, a.lnf, C, 2);
    pass.DropBack(pool, a.dresidual, a.dresidual, pass.P(s.head_dropout), s.L, kEmbOrHead);
  }
  on_ready(n.trained().output_begin());

  for (int l = s.L - 1; l >= 0; --l) {
    Activations::Layer& A = a.layers[l];
    const float* x = l > 0 ? a.layers[l - 1].ln2 : a.encoded;
    // Gradient checkpointing: the block's views again from its kept input (the last block's are
    // still the forward's).
    if (a.checkpointed() && l < s.L - 1) BlockForward(pool, pass, bf16, l, x);
    // a.dresidual: d of the block's output ln2. Through norm2: dln = d residual3, which flows to
    // ln1 directly and through the MLP.
    norm_back(a.dresidual, A.residual3, A.ln2_mean, A.ln2_rstd, kLn2w, kLn2b, l);
    const float* dmlp = pass.DropBack(pool, a.datty, a.dln, hidden_p, l, kMlpOut);
    // fch_gelu is shared by the layers: this layer's again, where fcproj's backward reads it.
    if (n.ReadsInput(kFcprojw, l)) k::GeluErfForward(pool, A.fch_gelu, A.fch, N * n.F);
    linear_back(a.dfch, kFcprojw, kFcprojb, l, dmlp, A.fch_gelu, n.F, C);
    k::GeluErfBackward(pool, a.dfch, A.fch, a.dfch, N * n.F);
    linear_back(a.dresidual, kFcw, kFcb, l, a.dfch, A.ln1, C, n.F);
    k::ResidualForward(pool, a.dresidual, a.dresidual, a.dln, N * C);  // d ln1
    // Through norm1: dln = d residual2, which flows to x directly and through attention.
    norm_back(a.dresidual, A.residual2, A.ln1_mean, A.ln1_rstd, kLn1w, kLn1b, l);
    const float* dattn = n.kind.attn_out_dropout
                             ? pass.DropBack(pool, a.dresidual, a.dln, hidden_p, l, kAttnOut)
                             : a.dln;
    linear_back(a.datty, kAttprojw, kAttprojb, l, dattn, A.atty, C, C);
    const k::AttentionOptions opt = pass.Attn(l);
    if (bf16) {
      k::AttentionBackwardBf16(pool, a.dqkv, a.att_scratch, bf16->attn, bf16->in, bf16->dout,
                               a.datty, A.qkv, A.att, B, T, C, n.NH, n.KV, opt);
    } else {
      k::AttentionBackward(pool, a.dqkv, a.att_scratch, a.datty, A.qkv, A.att, B, T, C, n.NH, n.KV,
                           opt);
    }
    linear_back(a.dresidual, kQkvw, kQkvb, l, a.dqkv, x, C, n.Q);
    k::ResidualForward(pool, a.dresidual, a.dresidual, a.dln, N * C);  // d x
    on_ready(n.trained().block_begin(l));
  }
  // Embeddings: back through their dropout and norm, then into the three tables. The token
  // embedding starts at zero (rows the batch does not use stay zero); the kernel adds into it.
  // Under LoRA only the tables and norm that train (saved modules) get gradients: with none of
  // them, nothing below the blocks runs.
  float* dwte = G(kWte);
  float* dwpe = G(kWpe);
  float* dwtt = G(kWtt);
  const bool tables = dwte || dwpe || dwtt;
  if (tables || G(kLnEw) || G(kLnEb)) {
    pass.DropBack(pool, a.dresidual, a.dresidual, hidden_p, -1, kEmbOrHead);
    norm_back(a.dresidual, a.emb, a.emb_mean, a.emb_rstd, kLnEw, kLnEb, 0);
  }
  if (dwte && !acc) ZeroFill(pool, dwte, layout.info(kWte).numel);
  if (tables) {
    k::EncoderBackward(pool, dwte, dwpe, a.dln, a.inputs, B, T, C, acc,
                       layout.has(kWtt) ? a.types : nullptr, dwtt, s.types, pass.Rows());
  }
  // Positions past this batch's T (a task's dynamic padding pads each batch to its longest row):
  // no gradient, not a stale one from a longer batch.
  if (dwpe && !acc)
    std::fill(dwpe + static_cast<std::size_t>(T) * C, dwpe + static_cast<std::size_t>(s.maxT) * C,
              0.f);
  if (dwte && s.pad_token >= 0) {  // nn.Embedding(padding_idx): the padding row learns nothing
    std::fill_n(dwte + static_cast<std::size_t>(s.pad_token) * C, C, 0.f);
  }
  on_ready(0);
}

}  // namespace cputrain::model
