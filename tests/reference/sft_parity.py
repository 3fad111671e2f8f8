"""`cputrain-numa sft train` against TRL 0.22.2's SFTTrainer itself.

    python sft_parity.py --cli build/src/cli/cputrain-numa --rows build/tests/reference/sft_rows

Made here: a byte-level BPE tokenizer (the `tokenizers` library) with a ChatML chat template whose
assistant turns sit in {% generation %} blocks, and two tiny random models saved by transformers:
a Qwen2ForCausalLM (attention biases, grouped-query attention) and a LlamaForCausalLM whose
tokenizer adds <s> as Llama's does. Data: a dozen chats (system, user, assistant, multi-turn),
as JSON Lines in each of TRL's forms: messages, prompt-completion strings, conversational
prompt-completion, plain text.

1. Tokenization: for every form and loss option (completion_only_loss on and off,
   assistant_only_loss), the input_ids and labels of every row equal those SFTTrainer's dataset
   preparation and DataCollatorForLanguageModeling make (sft_rows prints ours), truncation at
   max_length included.
   Packed (bfd): the same bins, each with its seq_lengths and labels.
2. Training: 4-6 steps of `sft train` (fp32, the whole dataset each step, lr 1e-3, linear decay)
   against SFTTrainer on the same model directory and JSON Lines file: every step's loss within
   1e-5 relative, on both models, with assistant_only_loss (Qwen2), on prompt-completion (Llama,
   completion_only_loss's default) and on chats; and packed, against SFTTrainer given the
   position ids its collator gives flash attention (transformers then masks attention to each
   document); and with LoRA (both continuing one PEFT adapter, r 8 on q_proj and v_proj). The
   trained output_dir loads in transformers (the adapter in peft). After each run, the eval pass
   (--eval_dataset_path --do_eval) against SFTTrainer.evaluate(): eval_loss within 1e-5,
   eval_mean_token_accuracy equal. `sft predict`'s greedy
   completions equal transformers' generate on the trained directory.
3. Placements: one replica group, two (a synthetic two-socket machine) and gradient
   accumulation train the same losses (the mean over the whole step's kept labels).
4. Refusals (exit 2 before any work, nothing written): a row missing its keys or not JSON named
   by file:line, a role the template raises on, a message without a role, mixed forms,
   assistant_only_loss with a template without generation blocks or on plain text.
Exits 1 on the first difference, printing it.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from datasets import load_dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast,
                          Qwen2Config, Qwen2ForCausalLM)
from peft import LoraConfig, PeftModel, get_peft_model
from trl import SFTConfig, SFTTrainer

QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# SmolLM2 / Qwen2.5's ChatML, with the assistant's text and end marker in generation blocks, and
# a raise_exception on a role it does not know.
CHATML = (
    "{%- for message in messages %}\n"
    "{%- if message.role not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' ~ message.role) }}{% endif %}\n"
    "{%- if loop.first and message.role != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}\n"
    "{%- if message.role == 'assistant' %}<|im_start|>assistant\n"
    "{% generation %}{{ message.content }}<|im_end|>{% endgeneration %}\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PLAIN = CHATML.replace("{% generation %}", "").replace("{% endgeneration %}", "")

QA = [
    ("What is the capital of France?", "Paris."),
    ("Add 2 and 3.", "2 + 3 = 5."),
    ("Name a primary colour.", "Red is one."),
    ("Translate 'hello' to Spanish.", "Hola."),
    ("Is the sky green?", "No, it is usually blue."),
    ("How many legs does a spider have?", "Eight."),
    ("Spell 'cat' backwards.", "t-a-c"),
    ("What comes after Monday?", "Tuesday comes after Monday."),
    ("Give me a word that rhymes with 'tree'.", "Bee."),
    ("What is 10 divided by 4?", "2.5"),
    ("Say something kind.", "You are doing great, keep going!"),
    ("Which is larger, 7 or 12?", "12 is larger than 7."),
]


def chats():
    out = []
    for i, (q, a) in enumerate(QA):
        msgs = []
        if i % 3 == 0:
            msgs.append({"role": "system", "content": "Answer briefly."})
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        if i % 4 == 1:  # multi-turn
            msgs += [{"role": "user", "content": "Thanks! Once more?"}, {"role": "assistant", "content": a + " Again."}]
        out.append(msgs)
    return out


def forms():
    c = chats()
    return {
        "messages": [{"messages": m} for m in c],
        "conv_pc": [{"prompt": m[:-1], "completion": m[-1:]} for m in c],
        "pc": [{"prompt": f"Question: {q}\nAnswer:", "completion": f" {a}"} for q, a in QA],
        "text": [{"text": f"Question: {q}\nAnswer: {a}"} for q, a in QA],
    }


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def make_tokenizer(out_dir, template, llama_bos):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    docs = [json.dumps(r) for rows in forms().values() for r in rows] * 3
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(docs, trainer)
    if llama_bos:  # Llama's tokenizer: <s> before every text (tokenizer(text) adds it)
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    config = {"bos_token": "<s>" if llama_bos else None, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "tokenizer_class": "PreTrainedTokenizerFast",
              "chat_template": template, "model_max_length": 256}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    return PreTrainedTokenizerFast.from_pretrained(out_dir)


def make_model(out_dir, family, tok):
    torch.manual_seed(0)
    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.1,
                  eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                  pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    if family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, rope_theta=1e6))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common, bos_token_id=tok.convert_tokens_to_ids("<s>")))
    model.save_pretrained(out_dir, safe_serialization=True)


def trl_config(out, **kw):
    base = dict(output_dir=out, report_to=[], use_cpu=True, bf16=False, fp16=False,
                gradient_checkpointing=False, dataset_num_proc=None, save_strategy="no",
                logging_steps=1, disable_tqdm=True, seed=42, dataloader_drop_last=False)
    base.update(kw)
    return SFTConfig(**base)


def trl_rows(model_dir, data, max_length, completion_only, assistant_only, work, packing=False):
    """input_ids and labels of every row (packed row: and seq_lengths), as SFTTrainer prepares and
    collates them."""
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    ds = load_dataset("json", data_files=data, split="train", cache_dir=os.path.join(work, "hf-cache"))
    args = trl_config(os.path.join(work, "trl-rows"), max_length=max_length,
                      completion_only_loss=completion_only, assistant_only_loss=assistant_only, packing=packing)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    out = []
    for ex in trainer.train_dataset:
        batch = trainer.data_collator([ex])
        row = {"input_ids": batch["input_ids"][0].tolist(), "labels": batch["labels"][0].tolist()}
        if packing:
            row["seq_lengths"] = list(ex["seq_lengths"])
        out.append(row)
    return out


def our_rows(rows_bin, model_dir, data, max_length, completion_only, assistant_only, packing=False):
    r = subprocess.run([rows_bin, model_dir, data, str(max_length), "1" if completion_only else "0",
                        "1" if assistant_only else "0", "1" if packing else "0"],
                       capture_output=True, text=True, check=True)
    return [json.loads(line) for line in r.stdout.splitlines()]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check_rows(args, model_dir, work):
    cases = 0
    for form, rows in forms().items():
        data = os.path.join(work, f"{form}.jsonl")
        write_jsonl(data, rows)
        conversational = form in ("messages", "conv_pc")
        for completion_only in ([None, False] if "pc" in form else [None]):
            for assistant_only in ([False, True] if conversational else [False]):
                for max_length in (256, 24):
                    ref = trl_rows(model_dir, data, max_length, completion_only, assistant_only, work)
                    ours = our_rows(args.rows, model_dir, data, max_length, completion_only is not False,
                                    assistant_only)
                    if len(ref) != len(ours):
                        fail(f"{form}: {len(ours)} rows, TRL {len(ref)}")
                    for i, (a, b) in enumerate(zip(ours, ref)):
                        if a != b:
                            fail(f"{form} completion_only={completion_only} assistant_only={assistant_only} "
                                 f"max_length={max_length} row {i}:\n ours {a}\n TRL  {b}")
                    cases += 1
    # Packing (bfd): the same rows packed into the same bins, each bin's seq_lengths and labels.
    for form, assistant_only in (("messages", True), ("messages", False), ("pc", False), ("text", False)):
        data = os.path.join(work, f"{form}.jsonl")
        for max_length in (128, 48):
            ref = trl_rows(model_dir, data, max_length, None, assistant_only, work, packing=True)
            ours = our_rows(args.rows, model_dir, data, max_length, True, assistant_only, packing=True)
            if ours != ref:
                fail(f"packed {form} assistant_only={assistant_only} max_length={max_length}:\n ours {ours}\n TRL  {ref}")
            cases += 1
    print(f"tokenization: {cases} cases of {os.path.basename(model_dir)}, every row's ids and labels equal TRL's")


class Recording(SFTTrainer):
    """SFTTrainer recording each training step's loss (the Trainer logs it rounded to 4 digits)."""

    losses = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if model.training:
            loss = out[0] if return_outputs else out
            self.losses.append(loss.item())
        return out


def check_training(args, model_dir, data, steps, extra, work, adapter=None):
    packing = "--packing" in extra
    n = sum(1 for _ in open(data, encoding="utf-8"))
    if packing:  # every packed row in each step
        n = len(our_rows(args.rows, model_dir, data, 128, True, "--assistant_only_loss" in extra, packing=True))
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    if adapter:  # LoRA: both start from the same PEFT adapter (ours continues it: --adapter)
        model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
        extra = extra + ["--adapter", adapter]
    ds = load_dataset("json", data_files=data, split="train", cache_dir=os.path.join(work, "hf-cache"))
    kw = dict(max_length=128, per_device_train_batch_size=n, learning_rate=1e-3, max_steps=steps,
              per_device_eval_batch_size=5, eval_strategy="no",
              lr_scheduler_type="linear", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0)
    if "--assistant_only_loss" in extra:
        kw["assistant_only_loss"] = True
    kw["packing"] = packing
    if "--gradient_checkpointing" in extra:  # the same numerics: both sides recompute
        kw["gradient_checkpointing"] = True
        kw["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    Recording.losses = []
    trainer = Recording(model=model, args=trl_config(os.path.join(work, "trl-train"), **kw),
                        train_dataset=ds, eval_dataset=ds, processing_class=tok)
    if packing:
        if len(trainer.train_dataset) != n:
            fail(f"TRL packed {len(trainer.train_dataset)} rows, ours {n}")
        # What TRL's collator does with flash attention: position ids restarting at each document
        # and no attention mask, from which transformers masks attention to each document (its
        # masking_utils.find_packed_sequence_indices; on CPU TRL leaves them out and warns that
        # documents would attend to each other).
        trainer.data_collator.return_position_ids = True
    trainer.train()
    ref = list(Recording.losses)
    ref_eval = trainer.evaluate()
    out = os.path.join(work, "ours-" + os.path.basename(model_dir))
    shutil.rmtree(out, ignore_errors=True)
    cmd = [args.cli, "sft", "train", "--model_name_or_path", model_dir, "--dataset_path", data,
           "--output_dir", out, "--max_length", "128", "--per_device_train_batch_size", str(n),
           "--learning_rate", "1e-3", "--max_steps", str(steps), "--save_steps", "0",
           "--progress", "quiet", "--eval_dataset_path", data, "--do_eval",
           "--per_device_eval_batch_size", "5"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"sft train exited {r.returncode}:\n{r.stderr}")
    if "--gradient_checkpointing" in extra and "(gradient checkpointing)" not in r.stderr:
        fail(f"sft train --gradient_checkpointing: its memory plan does not say so:\n{r.stderr}")
    ours = [json.loads(line)["loss"] for line in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in line
            and json.loads(line).get("step") is not None and "val_loss" not in line]
    if len(ours) != len(ref):
        fail(f"{len(ours)} steps logged, TRL {len(ref)}: ours {ours} TRL {ref}")
    worst = 0.0
    for s, (a, b) in enumerate(zip(ours, ref)):
        rel = abs(a - b) / abs(b)
        worst = max(worst, rel)
        if not rel <= args.tol:
            fail(f"step {s + 1}: loss {a:.8f}, TRL {b:.8f} (relative {rel:.2e} > {args.tol:g})\n ours {ours}\n TRL  {ref}")
    # The eval pass after training: eval_loss and mean_token_accuracy as the Trainer reports them.
    got = json.load(open(os.path.join(out, "eval_results.json")))
    rel = abs(got["eval_loss"] - ref_eval["eval_loss"]) / abs(ref_eval["eval_loss"])
    acc = abs(got["eval_mean_token_accuracy"] - ref_eval["eval_mean_token_accuracy"])
    if not (rel <= args.tol and acc <= 1e-6):
        fail(f"eval: ours {got}, TRL {ref_eval}")
    # The output_dir is a transformers model directory, or a PEFT adapter.
    if adapter:
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), out)
        extra = extra[:-2]
    else:
        AutoModelForCausalLM.from_pretrained(out)
    PreTrainedTokenizerFast.from_pretrained(out)
    print(f"training {os.path.basename(model_dir)} {' '.join(extra)}{' with LoRA' if adapter else ''}: {steps} steps, losses "
          f"{ref[0]:.5f} -> {ref[-1]:.5f}, worst relative difference {worst:.1e}; eval_loss "
          f"{got['eval_loss']:.5f} (TRL {ref_eval['eval_loss']:.5f}), mean_token_accuracy "
          f"{got['eval_mean_token_accuracy']:.4f}")


def make_adapter(model_dir, out):
    """A PEFT LoRA adapter of model_dir (r 8, alpha 16, q_proj and v_proj), B made non-zero so
    that the first step's gradients reach A too."""
    torch.manual_seed(1)
    pm = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                        LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                                   task_type="CAUSAL_LM"))
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    pm.save_pretrained(out)
    return out


def check_predict(args, model_dir, work):
    """`sft predict` (KV-cache decoder, greedy) against transformers' generate on the trained
    directory: the same completion of each prompt, chats rendered with add_generation_prompt."""
    prompts = [{"prompt": m[:-1]} for m in chats()[:4]] + [{"messages": chats()[5]}]
    data = os.path.join(work, "prompts.jsonl")
    write_jsonl(data, prompts)
    out = os.path.join(work, "predict")
    r = subprocess.run([args.cli, "sft", "predict", "--model_name_or_path", model_dir, "--dataset_path", data,
                        "--output_dir", out, "--max_length", "128", "--max_new_tokens", "12"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"sft predict exited {r.returncode}:\n{r.stderr}")
    ours = [json.loads(line)["completion"][0]["content"] for line in open(os.path.join(out, "predictions.jsonl"))]
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    for i, p in enumerate(prompts):
        chat = p["prompt"] if "prompt" in p else p["messages"][:-1]
        ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt")
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.pad_token_id)
        new = gen[0, ids.shape[1]:].tolist()
        if new and new[-1] == tok.eos_token_id:
            new = new[:-1]
        ref = tok.decode(new)
        if ours[i] != ref:
            fail(f"prompt {i}: sft predict {ours[i]!r}, transformers generate {ref!r}")
    print(f"predict: {len(prompts)} greedy completions equal transformers' generate (the first: {ours[0]!r})")


def check_placements(args, model_dir, data, work):
    """The loss is the mean over the whole step's kept labels: one replica group of 6 rows, two
    groups of 3 (a synthetic two-socket machine) and one group of 3 with 2 accumulated
    micro-batches train the same losses (packed, assistant_only_loss)."""
    runs = {"1 group": ["6", "1", "synthetic:pack:1 numa:1 core:2 pu:1"],
            "2 groups": ["3", "1", "synthetic:pack:2 numa:1 core:1 pu:1"],
            "accumulation": ["3", "2", "synthetic:pack:1 numa:1 core:2 pu:1"]}
    losses = {}
    for name, (batch, accum, topo) in runs.items():
        out = os.path.join(work, "placement-" + name.replace(" ", "-"))
        r = subprocess.run([args.cli, "sft", "train", "--model_name_or_path", model_dir, "--dataset_path", data,
                            "--output_dir", out, "--max_length", "128", "--assistant_only_loss", "--packing",
                            "--max_steps", "3", "--learning_rate", "1e-3", "--per_device_train_batch_size", batch,
                            "--gradient_accumulation_steps", accum, "--topology", topo, "--progress", "quiet"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{name}: sft train exited {r.returncode}:\n{r.stderr}")
        losses[name] = [json.loads(line)["loss"] for line in open(os.path.join(out, "metrics.jsonl"))
                        if '"loss"' in line and "val_loss" not in line]
    first = losses["1 group"]
    for name, got in losses.items():
        if len(got) != 3 or any(abs(a - b) > 1e-6 * abs(b) for a, b in zip(got, first)):
            fail(f"{name}: losses {got}, 1 group {first}")
    print(f"placements: 1 group, 2 groups and accumulation train the same losses {[round(x, 5) for x in first]}")


def check_refusals(args, model_dir, plain_dir, work):
    def refused(name, rows, extra, want, model=model_dir):
        data = os.path.join(work, name + ".jsonl")
        write_jsonl(data, rows) if isinstance(rows, list) else open(data, "w").write(rows)
        out = os.path.join(work, "refused-" + name)
        r = subprocess.run([args.cli, "sft", "train", "--model_name_or_path", model, "--dataset_path", data,
                            "--output_dir", out, "--max_length", "128", "--progress", "quiet"] + extra,
                           capture_output=True, text=True)
        if r.returncode != 2 or want not in r.stderr or os.path.exists(out):
            fail(f"{name}: exit {r.returncode}, output_dir written: {os.path.exists(out)}, "
                 f"want exit 2 naming {want!r}:\n{r.stderr}")
    good = forms()["messages"]
    refused("missing-key", good[:2] + [{"conversation": []}] + good[2:], [], "missing-key.jsonl:3")
    refused("bad-json", json.dumps(good[0]) + "\n{oops\n", [], "bad-json.jsonl:2")
    bad_role = [dict(r) for r in good]
    bad_role[4] = {"messages": [{"role": "robot", "content": "beep"}, {"role": "assistant", "content": "x"}]}
    refused("bad-role", bad_role, [], "Unknown role: robot")
    refused("no-role", [{"messages": [{"content": "hi"}]}], [], "no-role.jsonl:1")
    refused("mixed-forms", [good[0], {"text": "plain"}], [], "mixed-forms.jsonl:2")
    refused("no-generation", good, ["--assistant_only_loss"], "generation", model=plain_dir)
    refused("text-assistant-only", forms()["text"], ["--assistant_only_loss"], "not conversational")
    print("refusals: 7 bad inputs refused with exit 2 before any work, nothing written")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cli", required=True)
    p.add_argument("--rows", required=True)
    p.add_argument("--tol", type=float, default=1e-5)
    args = p.parse_args()
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="sft_parity_")
    try:
        qwen, llama, plain = (os.path.join(work, n) for n in ("qwen2", "llama", "plain"))
        make_model(qwen, "qwen2", make_tokenizer(qwen, CHATML, llama_bos=False))
        make_model(llama, "llama", make_tokenizer(llama, CHATML, llama_bos=True))
        make_model(plain, "qwen2", make_tokenizer(plain, PLAIN, llama_bos=False))
        check_rows(args, qwen, work)
        check_rows(args, llama, work)
        data = {k: os.path.join(work, f"{k}.jsonl") for k in forms()}
        check_training(args, qwen, data["messages"], 6, ["--assistant_only_loss"], work)
        check_predict(args, os.path.join(work, "ours-qwen2"), work)
        check_training(args, llama, data["pc"], 6, [], work)
        check_training(args, llama, data["messages"], 4, [], work)
        check_training(args, qwen, data["messages"], 6, ["--assistant_only_loss", "--packing"], work)
        check_training(args, llama, data["pc"], 6, ["--packing"], work)
        check_training(args, qwen, data["messages"], 6, ["--assistant_only_loss", "--packing"], work,
                       adapter=make_adapter(qwen, os.path.join(work, "adapter0")))
        # A LoRA fine-tune of a Llama with gradient checkpointing, packing and assistant-only loss
        # (issue 44's 7-8B recipe, on a small random model): the plan says it checkpoints, the
        # losses are TRL's with its own gradient checkpointing.
        check_training(args, llama, data["messages"], 4,
                       ["--assistant_only_loss", "--packing", "--gradient_checkpointing"], work,
                       adapter=make_adapter(llama, os.path.join(work, "adapter1")))
        check_placements(args, qwen, data["messages"], work)
        check_refusals(args, qwen, plain, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("sft parity: OK")


if __name__ == "__main__":
    main()
