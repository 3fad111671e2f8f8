// `bench train`'s print(rows) and records(rows) (bench/train_suite.h): a model's table, its
// rows' records, and the summaries against the targets.
#include <fmt/format.h>

#include <string>

#include "bench/train_suite.h"
#include "kernels/calibrate.h"

namespace cputrain::bench::train_suite {

void TrainSuite::AddRecords(const ModelRows& rows, SuiteRecords* report) {
  for (const Row& r : rows.all) report->Add(r.record);
}

void TrainSuite::PrintKernels(const ModelPreset& m, const ModelRows& rows, const RowPlan& plan,
                              SuiteRecords* report) const {
  // What auto chose, per precision: the first auto row that says.
  for (const char* precision : {"fp32", "bf16"}) {
    for (const Row* r : rows.Ours()) {
      if (r->forced || !r->kernels.is_object() || !r->kernels.contains(precision)) continue;
      const auto c = kernels::ChoiceFromJson(r->kernels[precision].dump());
      if (!c) continue;
      std::printf("  %s (row %s):\n", r->label.c_str(), precision);
      std::string text = kernels::DescribeChoice(*c);
      for (std::size_t at = 0; (at = text.find('\n', at)) != std::string::npos; at += 3)
        text.replace(at, 1, "\n  ");
      std::printf("  %s\n", text.c_str());
      break;
    }
  }
  // --kernels: auto against the best forced kernel of the same placement.
  for (const auto& [auto_label, forced] : plan.kernel_rows) {
    const Row* a = rows.FindOurs(auto_label);
    const Row* best = nullptr;
    for (const std::string& f : forced) {
      const Row* r = rows.FindOurs(f);
      if (r && (!best || r->tokens_per_s > best->tokens_per_s)) best = r;
    }
    if (!a || !best) continue;
    const double ratio = a->tokens_per_s / best->tokens_per_s;
    std::printf(
        "  auto on %s: %.1f tokens/s vs the best forced kernel (%s) %.1f -> %.3fx "
        "(target >= 0.95: %s)\n",
        auto_label.c_str(), a->tokens_per_s, best->label.c_str(), best->tokens_per_s, ratio,
        Verdict(ratio, 0.95).c_str());
    report->Add({{"kind", "auto_vs_forced_kernel"},
                 {"model", m.name},
                 {"placement", auto_label},
                 {"best_forced", best->label},
                 {"tokens_per_s", a->tokens_per_s},
                 {"forced_tokens_per_s", best->tokens_per_s},
                 {"ratio", ratio}});
    if (check_auto_ > 0 && ratio * check_auto_ < 1) {
      auto_failures_.push_back(fmt::format("{} on {}: auto {:.1f} tokens/s, {} {:.1f}", m.name,
                                           auto_label, a->tokens_per_s, best->label,
                                           best->tokens_per_s));
    }
  }
}

void TrainSuite::PrintTable(const ModelPreset& m, const ModelRows& model_rows) const {
  const bool span = m.shape.head != model::Head::kLm;  // a task head: sequences/s too
  // The rows that ran, ours first (`ours` of them), then the peer's.
  std::vector<const Row*> rows = model_rows.Ours();
  const std::size_t ours = rows.size();
  for (const Row* r : model_rows.Peers()) rows.push_back(r);
  // --lora: PyTorch's best row of each precision, which each row's "vs PT" divides by.
  const Row* torch_best[2] = {nullptr, nullptr};  // fp32, bf16
  for (std::size_t i = ours; i < rows.size(); ++i) {
    const Row*& b = torch_best[rows[i]->bf16 ? 1 : 0];
    if (!b || rows[i]->tokens_per_s > b->tokens_per_s) b = rows[i];
  }
  std::printf("  %-38s %s%9s %8s %6s %9s | %8s %8s %8s %8s %8s | %9s | %s%6s %5s | %s\n",
              "placement", span ? "    seq/s " : "", "tokens/s", "GFLOP/s", "MFU", "step ms",
              "forward", "backward", "comm", "optim", "other", "peak RSS",
              lora_.on() ? fmt::format("{:>6} | {:>10} | {:>24} | ", "vs PT", "trainable",
                                       "sync/step (full FT's)")
                               .c_str()
                         : "",
              "others", "core", "how");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = *rows[i];
    std::string lora_cols;
    if (lora_.on()) {
      const Row* b = torch_best[r.bf16 ? 1 : 0];
      const std::string sync =
          r.sync_bytes_full > 0
              ? fmt::format("{} ({})", FormatBytes(static_cast<uint64_t>(r.sync_bytes)),
                            FormatBytes(static_cast<uint64_t>(r.sync_bytes_full)))
              : std::string("-");
      lora_cols = fmt::format("{:>6} | {:>10.0f} | {:>24} | ",
                              b ? fmt::format("{:.2f}x", r.tokens_per_s / b->tokens_per_s) : "-",
                              r.trainable, sync);
    }
    std::printf(
        "  %-38s %s%9.1f %8.1f %5.1f%% %9.1f | %8.1f %8.1f %8.1f %8.1f %8.1f | %9s | %s%5.0f%% "
        "%4.0f%% | %s\n",
        r.label.c_str(), span ? fmt::format("{:9.3f} ", r.sequences_per_s).c_str() : "",
        r.tokens_per_s, r.gflops, 100 * r.mfu, r.step_ms, r.fwd, r.bwd, r.comm, r.opt, r.other,
        RssText(r.peak_rss).c_str(), lora_cols.c_str(), r.others_pct, r.slowest_core_pct,
        r.note.c_str());
    if (i + 1 == ours && ours < rows.size()) std::printf("  %s\n", std::string(60, '-').c_str());
  }
  bool any_skipped = false;
  for (const Row& r : model_rows.all) any_skipped |= !r.ran();
  if (ours == rows.size() && any_skipped) {
    std::printf("  %s\n", std::string(60, '-').c_str());
  }
  for (const Row& r : model_rows.all) {
    if (!r.ran()) std::printf("  %-38s %9s | %s\n", r.label.c_str(), "skipped", r.skipped.c_str());
  }
}

void TrainSuite::PrintAccumulation(const ModelPreset& m, const ModelRows& rows, const RowPlan& plan,
                                   SuiteRecords* report) const {
  for (const auto& [one, many] : plan.accum_pairs) {
    const Row *a = rows.FindOurs(one), *b = rows.FindOurs(many);
    if (!a || !b) continue;
    const double ratio = b->tokens_per_s / a->tokens_per_s;
    std::printf(
        "  accumulation on %s: k=%d %.1f tokens/s vs k=1 %.1f -> %.3f (target >= 0.97: "
        "%s)\n",
        one.c_str(), accum_, b->tokens_per_s, a->tokens_per_s, ratio,
        ratio >= 0.97 ? "met" : "missed");
    report->Add({{"kind", "accumulation"},
                 {"model", m.name},
                 {"placement", one},
                 {"k", accum_},
                 {"tokens_per_s_k1", a->tokens_per_s},
                 {"tokens_per_s_k", b->tokens_per_s},
                 {"ratio", ratio}});
  }
}

void TrainSuite::PrintBf16Ratios(const ModelPreset& m, const ModelRows& rows,
                                 const std::vector<std::pair<std::string, std::string>>& pairs,
                                 bool targets, SuiteRecords* report) {
  auto verdict = [&](double ratio, double target) {
    return targets ? fmt::format("target >= {:g}: {}", target, Verdict(ratio, target))
                   : std::string("LoRA: no target for bf16 over fp32");
  };
  const Row *best = nullptr, *torch = nullptr;
  for (const auto& [fp32, bf16] : pairs) {
    const Row *a = rows.FindOurs(fp32), *b = rows.FindOurs(bf16);
    if (!a || !b) continue;
    if (!best || b->tokens_per_s > best->tokens_per_s) best = b;
    const double ratio = b->tokens_per_s / a->tokens_per_s;
    std::printf("  bf16 on %s: %.1f tokens/s vs fp32 %.1f -> %.2fx (%s)\n", fp32.c_str(),
                b->tokens_per_s, a->tokens_per_s, ratio, verdict(ratio, 1.6).c_str());
    report->Add({{"kind", "bf16_vs_fp32"},
                 {"model", m.name},
                 {"placement", fp32},
                 {"tokens_per_s_fp32", a->tokens_per_s},
                 {"tokens_per_s_bf16", b->tokens_per_s},
                 {"ratio", ratio}});
  }
  for (const Row* r : rows.Peers()) {
    if (r->bf16 && (!torch || r->tokens_per_s > torch->tokens_per_s)) torch = r;
  }
  if (best && torch) {
    const double ratio = best->tokens_per_s / torch->tokens_per_s;
    std::printf(
        "  bf16, ours best: %s, %.1f tokens/s (MFU %.1f%% of the bf16 peak); PyTorch autocast "
        "best: %s, %.1f -> %.2fx (%s)%s\n",
        best->label.c_str(), best->tokens_per_s, 100 * best->mfu, torch->label.c_str(),
        torch->tokens_per_s, ratio, fmt::format("target >= 1.5: {}", Verdict(ratio, 1.5)).c_str(),
        RssRatioText(best->peak_rss, torch->peak_rss).c_str());
    nlohmann::json rec = {{"kind", "bf16_vs_pytorch_autocast"},
                          {"model", m.name},
                          {"placement", best->label},
                          {"pytorch_placement", torch->label},
                          {"tokens_per_s", best->tokens_per_s},
                          {"pytorch_tokens_per_s", torch->tokens_per_s},
                          {"ratio", ratio}};
    if (best->peak_rss > 0 && torch->peak_rss > 0) {
      rec["peak_rss_bytes"] = best->peak_rss;
      rec["pytorch_peak_rss_bytes"] = torch->peak_rss;
      rec["rss_ratio"] = best->peak_rss / torch->peak_rss;
    }
    report->Add(rec);
  }
}

void TrainSuite::PrintSummaries(const ModelPreset& m, const ModelRows& rows, const RowPlan& plan,
                                const LoraRun* lora, SuiteRecords* report) const {
  const bool span = m.shape.head != model::Head::kLm;  // a task head: sequences/s too
  // The fp32 rows' best (the bf16 rows have their own summary, PrintBf16Ratios).
  auto best_of = [&](const std::vector<const Row*>& v) -> const Row* {
    const Row* best = nullptr;
    for (const Row* r : v) {
      if (r->bf16 || r->forced) continue;  // auto's rows: what a user runs
      if (!best || r->tokens_per_s > best->tokens_per_s) best = r;
    }
    return best;
  };
  PrintAccumulation(m, rows, plan, report);
  PrintBf16Ratios(m, rows, plan.bf16_pairs, lora == nullptr, report);
  const Row* our_best = best_of(rows.Ours());
  const Row* torch_best = best_of(rows.Peers());
  nlohmann::json summary = {{"kind", "summary"}, {"model", m.name}};
  if (our_best) {
    std::printf(
        "  ours, best: %s, %.1f tokens/s%s\n", our_best->label.c_str(), our_best->tokens_per_s,
        span ? fmt::format(" ({:.3f} sequences/s)", our_best->sequences_per_s).c_str() : "");
    summary["best_placement"] = our_best->label;
    summary["best_tokens_per_s"] = our_best->tokens_per_s;
    summary["best_sequences_per_s"] = our_best->sequences_per_s;
  }
  if (lora) {
    summary["lora"] = LoraRecord(*lora, lora_.base_bf16);
    summary["trainable_params"] = lora->trainable();
    summary["cpu"] = cpu_;
  }
  if (our_best && torch_best) {
    const double ratio = our_best->tokens_per_s / torch_best->tokens_per_s;
    // The same speed target for a LoRA fine-tune as for a full one (issue 25: >= 1.5x
    // transformers + peft on llama-1b).
    const double target = SpeedTarget(m);
    std::printf("  PyTorch, best: %s, %.1f tokens/s -> ours / PyTorch's best = %.2fx (%s)%s\n",
                torch_best->label.c_str(), torch_best->tokens_per_s, ratio,
                fmt::format("target >= {:g}: {}", target, Verdict(ratio, target)).c_str(),
                RssRatioText(our_best->peak_rss, torch_best->peak_rss).c_str());
    if (lora) summary["pytorch_trainable_params"] = torch_best->trainable;
    summary["pytorch_best_placement"] = torch_best->label;
    summary["pytorch_best_tokens_per_s"] = torch_best->tokens_per_s;
    summary["pytorch_best_sequences_per_s"] = torch_best->sequences_per_s;
    summary["ratio_vs_pytorch_best"] = ratio;
    summary["target"] = target;
    if (our_best->peak_rss > 0 && torch_best->peak_rss > 0) {
      summary["peak_rss_bytes"] = our_best->peak_rss;
      summary["pytorch_peak_rss_bytes"] = torch_best->peak_rss;
      summary["rss_ratio_vs_pytorch_best"] = our_best->peak_rss / torch_best->peak_rss;
    }
  }
  // G groups x (n/G) against 1 x n, for the placements of that name.
  const Row* one = rows.FindOurs(fmt::format("1x{}", real_cores_));
  const Row* two = rows.FindOurs(fmt::format("2x{}", real_cores_ / 2));
  if (one && two) {
    const double ratio = two->tokens_per_s / one->tokens_per_s;
    std::printf("  %s vs %s: %.2fx (target >= 1: %s)\n", two->label.c_str(), one->label.c_str(),
                ratio, Verdict(ratio, 1).c_str());
    summary["two_groups_vs_one"] = ratio;
    summary["two_groups_label"] = two->label;
    summary["one_group_label"] = one->label;
  }
  report->Add(summary);
}

}  // namespace cputrain::bench::train_suite
