// model/: the registry of model families — one line per family, and the only place that lists
// them. Each line is X(id, table): `id` becomes Arch::id (shape.h), `table` is the family's
// `const Family` (family.h), defined in its own file under src/model/families/ (which CMake
// compiles without being told). Adding a family is that file plus one line here.
//
// The order is Arch's: the first family is a default-constructed Shape's (GPT-2, llm.c's model).
// Arch values are never written to a file (checkpoints and state.bin name the family), so a new
// line may go anywhere after the first.
#pragma once

#define CPUTRAIN_MODEL_FAMILIES(X)  \
  X(kGpt2, kGpt2Family)             \
  X(kLlama, kLlamaFamily)           \
  X(kBert, kBertFamily)             \
  X(kDistilBert, kDistilBertFamily) \
  X(kQwen2, kQwen2Family)           \
  X(kQwen3, kQwen3Family)           \
  X(kMistral, kMistralFamily)       \
  X(kGemma3, kGemma3Family)         \
  X(kPhi3, kPhi3Family)
