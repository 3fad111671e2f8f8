// bench/lora_spec.h: `bench train --lora`'s spec is parsed strictly (every malformed spec is an
// InputError, exit 2, naming what is wrong), and the counts the LoRA rows print are right in
// closed form: the trainable parameters (the figure PEFT prints for the same model), the bytes
// of a step's gradient sync for 1, 2 and 3 groups and processes, and the FLOPs per token.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/lora_spec.h"
#include "common/error.h"
#include "model/presets.h"
#include "model/transformer.h"

namespace cputrain::bench {
namespace {

model::Shape PresetShape(const char* name) {
  const model::Preset* p = model::FindPreset(name);
  EXPECT_NE(p, nullptr) << name;
  return p->shape;
}

TEST(LoraSpec, ParsesWhatIsGivenAndDefaultsAlphaToTwiceR) {
  LoraSpec s = ParseLoraSpec("r=16");
  EXPECT_EQ(s.r, 16);
  EXPECT_EQ(s.alpha, 32);
  EXPECT_TRUE(s.targets.empty());
  EXPECT_FALSE(s.base_bf16);
  EXPECT_EQ(s.Text(), "r=16,alpha=32");

  s = ParseLoraSpec("targets=q_proj+v_proj+o_proj,base=bf16,alpha=8.5,r=4");
  EXPECT_EQ(s.r, 4);
  EXPECT_EQ(s.alpha, 8.5);
  EXPECT_EQ(s.targets, (std::vector<std::string>{"q_proj", "v_proj", "o_proj"}));
  EXPECT_TRUE(s.base_bf16);
  EXPECT_EQ(s.Text(), "r=4,alpha=8.5,targets=q_proj+v_proj+o_proj,base=bf16");
  EXPECT_FALSE(ParseLoraSpec("r=4096,base=fp32").base_bf16);
}

TEST(LoraSpec, RefusesEveryMalformedSpecNamingTheProblem) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "is not key=value"},
      {"16", "is not key=value"},
      {"r=16,", "is not key=value"},
      {"alpha=32", "r (the rank) is required"},
      {"r=0", "not a rank in [1, 4096]"},
      {"r=4097", "not a rank in [1, 4096]"},
      {"r=-1", "not a rank"},
      {"r=1.5", "not a rank"},
      {"r=", "has no value"},
      {"r=16,r=8", "r is given twice"},
      {"r=16,alpha=0", "not a number in (0, 1e6]"},
      {"r=16,alpha=-2", "not a number"},
      {"r=16,alpha=32x", "not a number"},
      {"r=16,alpha=nan", "not a number"},
      {"r=16,alpha=2e6", "not a number"},
      {"r=16,alpha=1,alpha=2", "alpha is given twice"},
      {"r=16,targets=q_proj++v_proj", "target '' is not a module name"},
      {"r=16,targets=q proj", "is not a module name"},
      {"r=16,targets=q_proj+q_proj", "target 'q_proj' is given twice"},
      {"r=16,targets=a,targets=b", "targets is given twice"},
      {"r=16,base=fp16", "the frozen base is fp32 or bf16"},
      {"r=16,base=bf16,base=fp32", "base is given twice"},
      {"r=16,dropout=0.1", "unknown key 'dropout'"},
      {"R=16", "unknown key 'R'"},
  };
  for (const auto& [spec, why] : bad) {
    try {
      ParseLoraSpec(spec);
      ADD_FAILURE() << "'" << spec << "' was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--lora '" + spec + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << spec << ": " << e.what();
      EXPECT_NE(e.hint().find("--lora r=R"), std::string::npos) << e.hint();
    }
  }
}

// smollm2-135m (L=30 C=576, 9 heads of 64, 3 KV heads): PEFT's q_proj, v_proj at r=16 adds
// A (16, 576) and B (576, 16) to q_proj, A (16, 576) and B (192, 16) to v_proj, per layer:
// 30 x 16 x (576 + 576 + 576 + 192) = 921,600, the count print_trainable_parameters() gives
// (peft 0.21.2 on transformers' LlamaForCausalLM of that config); llama-1b's 1,703,936 likewise.
TEST(LoraRun, TrainableParametersArePeftsCount) {
  const LoraRun llama(PresetShape("smollm2-135m"), ParseLoraSpec("r=16"));
  EXPECT_EQ(llama.trainable(), 921600u);
  EXPECT_EQ(llama.base_params(), PresetShape("smollm2-135m").ParamCount());
  // llama-1b (L=16 C=2048, 32 heads of 64, 8 KV heads): 16 x 16 x (3 x 2048 + 512).
  EXPECT_EQ(LoraRun(PresetShape("llama-1b"), ParseLoraSpec("r=16")).trainable(), 1703936u);
  // GPT-2's default target is c_attn (C -> 3C): tiny (L=2, C=128) at r=8: 2 x 8 x (128 + 384).
  const LoraRun gpt2(PresetShape("tiny"), ParseLoraSpec("r=8"));
  EXPECT_EQ(gpt2.trainable(), 2u * 8 * (128 + 384));
  EXPECT_THROW(LoraRun(PresetShape("tiny"), ParseLoraSpec("r=8,targets=q_proj")), InputError);
}

TEST(LoraRun, ConfigAndPytorchArgumentsNameTheSameAdapters) {
  const LoraRun run(PresetShape("smollm2-135m"), ParseLoraSpec("r=8,alpha=4,base=bf16"));
  Config fp32, bf16;
  bf16.train.bf16 = true;
  run.ApplyTo(&fp32);
  run.ApplyTo(&bf16);
  EXPECT_EQ(fp32.train.lora.r, 8);
  EXPECT_EQ(fp32.train.lora.alpha, 4);
  EXPECT_EQ(fp32.train.lora.dropout, 0);
  EXPECT_TRUE(fp32.train.lora.target_modules.empty());  // the family's default, as resolved
  EXPECT_EQ(fp32.train.lora.base_dtype, "fp32");        // a bf16 base only on bf16 rows
  EXPECT_EQ(bf16.train.lora.base_dtype, "bf16");
  EXPECT_EQ(run.PytorchArgs(), (std::vector<std::string>{"--lora-r", "8", "--lora-alpha", "4",
                                                         "--lora-targets", "q_proj,v_proj"}));
}

// FLOPs per token: the base's products at 4 per weight (6 in a full fine-tune), the adapters at
// 6, attention's 12 L T C unchanged.
TEST(LoraRun, FlopsPerTokenCountsTheFrozenBaseAtFourPerWeight) {
  const model::Shape s = PresetShape("smollm2-135m");
  const int T = 128;
  const double C = 576, F = 1536, qkv = (9 + 2 * 3) * 64, L = 30, V = 49152;
  const double weights = L * (C * qkv + C * C + C * 2 * F + F * C) + V * C;
  const double attention = 12 * L * T * C;
  ASSERT_DOUBLE_EQ(model::TrainFlopsPerToken(s, T), 6 * weights + attention);
  const LoraRun run(s, ParseLoraSpec("r=16"));
  EXPECT_DOUBLE_EQ(run.FlopsPerToken(T), 4 * weights + 6 * 921600.0 + attention);
}

// Sync bytes for n floats: reduce-scatter (G-1) x 4n over all groups, the allgather as much
// again unless the groups share one replica; DDP's allreduce 2 (P-1) x 4n.
TEST(SyncBytes, ClosedFormsForOneTwoAndThreeGroups) {
  const std::size_t n = 921600;
  EXPECT_EQ(GroupSyncBytes(n, 1, false), 0u);
  EXPECT_EQ(GroupSyncBytes(n, 1, true), 0u);
  EXPECT_EQ(GroupSyncBytes(n, 2, true), 4u * n);
  EXPECT_EQ(GroupSyncBytes(n, 2, false), 8u * n);
  EXPECT_EQ(GroupSyncBytes(n, 3, false), 16u * n);
  EXPECT_EQ(GroupSyncBytes(0, 3, false), 0u);
  EXPECT_EQ(DdpSyncBytes(n, 1), 0u);
  EXPECT_EQ(DdpSyncBytes(n, 2), 8u * n);
  EXPECT_EQ(DdpSyncBytes(n, 3), 16u * n);
  // No overflow for a full fine-tune of a large model: 8 x 10^9 floats over 64 groups.
  EXPECT_EQ(GroupSyncBytes(8000000000u, 64, false), 2u * 63 * 4 * 8000000000u);
}

}  // namespace
}  // namespace cputrain::bench
