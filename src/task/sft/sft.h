// Supervised fine-tuning of a decoder on chat, prompt-completion or plain-text data: TRL 0.22.2's
// SFTTrainer job (`trl sft`) as a task of the command core (task/task.h; docs/sft.md). Its
// pieces: sft_data.h (the rows read and tokenized as TRL does, with the chat templates of
// src/chat, and their labels); sft_task.cc puts them behind the Task interface: the rows as
// language-model rows whose ignored labels take no loss, the loss the mean over the kept labels of
// each step (as transformers' Trainer divides by num_items_in_batch), eval loss, and `predict`
// generating completions with the KV-cache decoder.
#pragma once

#include <memory>

#include "task/task.h"

namespace cputrain::task {

std::unique_ptr<Task> MakeSftTask();

}  // namespace cputrain::task
