"""Small question-answering models and data for tests/qa_train_test.cc, made here by transformers
(nothing is downloaded).

    python make_qa_models.py <out_dir>

Writes into out_dir:
  ref/          tests/reference/squad_reference.py's output: the WordPiece tokenizer
                (ref/tokenizer: BertTokenizerFast.save_pretrained of its small uncased
                vocabulary), SQuAD v1.1 / v2.0 files (ref/v1.json, ref/v2.json) and run_qa.py's
                features of them at T=48, doc_stride=16
  bert/         BertForQuestionAnswering (hidden 64, 2 layers, 4 heads, intermediate 128,
                max_position_embeddings 64, hidden_dropout_prob and attention_probs_dropout_prob
                0.1: dropout on), save_pretrained(safe_serialization=True), with the tokenizer
  distilbert/   DistilBertModel of the same size (dropout, attention_dropout, qa_dropout 0.1): no
                qa head, so the engine initializes one; with the tokenizer
  gpt2/         a GPT2LMHeadModel (a decoder: refused by qa train), safetensors, no tokenizer
  bpe/          a byte-level BPE tokenizer.json (not WordPiece: refused by qa train)
"""
import os
import runpy
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (BertConfig, BertForQuestionAnswering, BertTokenizerFast,
                          DistilBertConfig, DistilBertModel, GPT2Config, GPT2LMHeadModel)

HERE = os.path.dirname(os.path.abspath(__file__))
C, L, NH, F, MAXT = 64, 2, 4, 128, 64


def main():
    out = sys.argv[1]
    ref = os.path.join(out, "ref")
    # squad_reference.py does its work when run (its main() reads sys.argv[1]).
    argv = sys.argv
    sys.argv = [argv[0], ref]
    runpy.run_path(os.path.join(HERE, "..", "reference", "squad_reference.py"),
                   run_name="__main__")
    sys.argv = argv
    tok = BertTokenizerFast.from_pretrained(os.path.join(ref, "tokenizer"))
    V = len(tok)

    torch.manual_seed(20261125)
    bert = BertForQuestionAnswering(
        BertConfig(vocab_size=V, hidden_size=C, num_hidden_layers=L, num_attention_heads=NH,
                   intermediate_size=F, max_position_embeddings=MAXT, type_vocab_size=2,
                   hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1))
    distil = DistilBertModel(
        DistilBertConfig(vocab_size=V, dim=C, n_layers=L, n_heads=NH, hidden_dim=F,
                         max_position_embeddings=MAXT, dropout=0.1, attention_dropout=0.1,
                         qa_dropout=0.1))
    for name, model in (("bert", bert), ("distilbert", distil)):
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        tok.save_pretrained(d)

    GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=MAXT, n_embd=C, n_layer=1,
                               n_head=NH)).save_pretrained(os.path.join(out, "gpt2"),
                                                           safe_serialization=True)

    bpe = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")},
                               merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    os.makedirs(os.path.join(out, "bpe"), exist_ok=True)
    bpe.save(os.path.join(out, "bpe", "tokenizer.json"))


main()
