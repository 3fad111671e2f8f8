// model/ internal: the task heads over any family's body (Shape::head). The span head (question
// answering) lives in encoder.cc; this module is sequence classification, Hugging Face's
// *ForSequenceClassification, for every family through its table (family.h):
//
//   encoders (BertForSequenceClassification, DistilBertForSequenceClassification): the first
//     token's state x0 (B,C) -> pool = act(x0 @ Wp^T + bp) -> drop(pool) -> logits (B,K) =
//     pool @ Wc^T + bc; act tanh for BERT's pooler ("pooler.dense"), ReLU for DistilBERT's
//     pre_classifier (Family::classify_pooling); the dropout is Shape::head_dropout
//     (classifier_dropout or hidden_dropout_prob; seq_classif_dropout);
//   decoders (LlamaForSequenceClassification and the other families' XForSequenceClassification):
//     the state of each row's last token that is not the padding token (Shape::pad_token, the
//     config's pad_token_id; as transformers finds it: the rightmost such position, 0 when there
//     is none) after the final norm -> logits (B,K) = x @ Ws^T ("score.weight", no bias); the
//     model has no LM head.
// The loss per row, by Shape::problem (problem_type): cross-entropy over the K logits against
// the label in Activations::starts; mean squared error of the K outputs against
// Activations::label_values (regression, K = 1 as usual); binary cross-entropy with logits of
// each of the K labels against label_values' 0/1 (multi-label) — each the mean over the row's
// outputs, so the Stepper's mean over rows is transformers' mean over all of them.
//
// Thread safety: as Forward / Backward's (transformer.h).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/family.h"
#include "model/net.h"

namespace cputrain::model {

// The model's tensors: the family's table, adjusted for its head (a decoder classifier has the
// score tensor instead of an LM head). What ParamLayout(shape) lays out.
std::vector<TensorInfo> ModelTensors(const Shape& s);

// The family's Hugging Face tensors and its head's (a decoder's score.weight), in table order.
// The rows live as long as the program.
const std::vector<HfTensor>& HfTensorsOf(const Family& f);

// The head config.json describes, into s (whose family and vocabulary are read): its first
// architecture (a *ForSequenceClassification: a classifier of num_labels / id2label outputs and
// problem_type's loss; else the family's span head for an encoder, its LM head for a decoder)
// and, for a decoder classifier, pad_token_id. InputError naming the key of a head this engine
// cannot run.
void ReadHfHead(const nlohmann::json& cfg, const std::string& path, Shape* s);

// config.json's head keys for s: a classifier's architecture, id2label / label2id (LABEL_i, as
// transformers writes them for a new head), problem_type and a decoder's pad_token_id.
void WriteHfHead(const Shape& s, nlohmann::json* cfg);

// The dropout of the pooled vector while training (encoders): probability, seed, and the global
// index of this buffer's first element (rows before it x C).
struct HeadDropout {
  float p = 0;
  uint64_t seed = 0, offset = 0;
};

// The classifier's forward over the body's output x (n.N rows of C: B rows of T, or an encoder's
// unpadded rows; a decoder's after its final norm): logits (B,K) into a.logits; with_loss: the
// sum of the rows' losses.
double ClassifyForward(WorkerPool& pool, const Net& n, Activations& a, const float* x,
                       const Bf16Operands* bf16, bool with_loss, const HeadDropout& drop);
// Its backward after ClassifyForward(with_loss): the head's gradients (written, or added with
// accumulate), and dx (n.N,C) written: zero but at each row's pooled position. dloss: d(loss)/d
// (each row's loss).
void ClassifyBackward(WorkerPool& pool, const Net& n, Activations& a, float* dx,
                      const Bf16Operands* bf16, float dloss, bool accumulate,
                      const HeadDropout& drop);

}  // namespace cputrain::model
