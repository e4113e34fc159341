"""The benchmark's report as text: one table per section (the JSON holds every number)."""

from __future__ import annotations

from typing import Any

from benchmarks.cpu import TARGETS
from benchmarks.gpu import format_gpu

def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "NOT met")


def format_report(report: dict[str, Any]) -> str:
    """The human-readable table of a perf report."""
    lines: list[str] = []
    machine = report["machine"]
    lines.append("=" * 100)
    lines.append(f"flow-plugin perf  ({'QUICK: functional check, not a benchmark' if report.get('quick') else 'full run'})")
    lines.append(f"machine: {machine['cpu_model']}; {machine['logical_cores']} logical / {machine['physical_cores']} physical cores; "
                 f"torch threads {machine['torch_threads']}; flags {','.join(machine['cpu_flags'])}")
    lines.append(f"torch {machine['torch']}, transformers {machine['transformers']}, sentence-transformers "
                 f"{machine['sentence_transformers']}; precision 'auto' on CPU = {machine['auto_precision_cpu']}; GPU: {machine['gpu']}")
    lines.append(f"load average at start {machine.get('load_average_start')}, at end {machine.get('load_average_end')} "
                 "(other processes compete for the cores when these exceed 0; ratios below were measured interleaved)")
    sections = report["sections"]
    encode = sections.get("encode")
    if encode:
        lines.append("-" * 100)
        lines.append("1. ENCODING THROUGHPUT (sentences/s; ours = Backbone precision auto vs SentenceTransformer.encode float32)")
        lines.append(f"   {'model':<12} {'device':<6} {'set':<10} {'ST fp32/s':>10} {'ours/s':>9} {'our fp32/s':>10} "
                     f"{'ratio':>6} {'noise p10..p90':>15} {'target':>7} {'':>8}")
        for model, entry in encode.items():
            target = TARGETS["encode_ratio_min"].get(model)
            for device, data in entry["devices"].items():
                slow, fast = data["contenders"]["slow"], data["contenders"]["fast"]
                for set_name, values in data["sets"].items():
                    thr = values["throughput"]
                    ratio = values["speedup_vs_sentence_transformers"]
                    ours32 = thr.get("flow-plugin float32", {}).get("sentences_per_second")
                    ok = None if target is None else ratio["ratio"] >= target
                    lines.append(
                        f"   {model:<12} {device:<6} {set_name:<10} {thr[slow]['sentences_per_second']:>10.1f} "
                        f"{thr[fast]['sentences_per_second']:>9.1f} {ours32 if ours32 is not None else '-':>10} "
                        f"{ratio['ratio']:>6.2f} {ratio['chunk_ratio_p10']:>7.2f}..{ratio['chunk_ratio_p90']:<6.2f} "
                        f"{('>=' + str(target)) if target else '-':>7} {_mark(ok):>8}")
            if "gpu" in entry:
                lines.append(f"   {model:<12} cuda   {entry['gpu']}")
        lines.append("   quality, STS-B test Spearman of raw-embedding cosines (x100 points):")
        for model, entry in encode.items():
            for device, data in entry["devices"].items():
                values = data["sets"].get("stsb-test", {})
                if "stsb_test_spearman" in values:
                    quality = values["stsb_test_spearman"]
                    diff = values["spearman_fast_minus_sentence_transformers"]
                    ok = abs(diff) <= TARGETS["encode_quality_max_abs_diff"]
                    text = ", ".join(f"{name} {100 * value:.3f}" for name, value in quality.items())
                    lines.append(f"   {model:<12} {device:<6} {text}; fast - ST = {100 * diff:+.3f} points "
                                 f"(target |diff| <= 0.05): {_mark(ok)}")
                elif "min_cosine_fast_vs_sentence_transformers" in values:
                    lines.append(f"   {model:<12} {device:<6} (subset: no Spearman) min cosine fast vs ST = "
                                 f"{values['min_cosine_fast_vs_sentence_transformers']}")
        lines.append("-" * 100)
        lines.append("2. HARDWARE EFFICIENCY (matmul FLOPs from real token counts / wall time of encode(), vs dense matmul peak "
                     "timed in the same process)")
        for model, entry in encode.items():
            for device, data in entry["devices"].items():
                peaks = data["peak_gflops"]
                for set_name, values in data["sets"].items():
                    eff = values["efficiency"]
                    fast = data["contenders"]["fast"]
                    achieved = values["achieved_gflops"][fast]
                    padded = values["flops"]["padded_tokens"] / max(values["flops"]["tokens"], 1) - 1
                    frac = eff["fast_fraction_of_bf16_peak"]
                    ok = None if frac is None else frac >= TARGETS["bf16_peak_fraction_min"]
                    low = data.get("peak_gflops_lower_measurement", peaks)
                    frac_low = eff.get("fast_fraction_of_lower_bf16_peak_measurement")
                    lines.append(
                        f"   {model:<12} {device:<6} {set_name:<10} ours {achieved['useful']:.0f} GFLOP/s useful "
                        f"({achieved['executed']:.0f} executed, padding +{100 * padded:.1f}% tokens); ST "
                        f"{values['achieved_gflops'][data['contenders']['slow']]['useful']:.0f}")
                    lines.append(
                        f"   {'':<30} peak bf16 {peaks['bf16']:.0f} (other measurement {low['bf16']:.0f}), fp32 "
                        f"{peaks['float32']:.0f} GFLOP/s; ours/bf16 peak {'-' if frac is None else f'{100 * frac:.0f}%'}"
                        f"{'' if frac_low is None else f' ({100 * frac_low:.0f}% of the other)'} (target >= 40%: "
                        f"{_mark(ok)}); ST/fp32 peak {100 * eff['sentence_transformers_fraction_of_float32_peak']:.0f}%")
        for model, entry in encode.items():
            efficiency = entry.get("matmul_efficiency")
            if efficiency:
                lines.append(
                    f"   {model:<12} per thread CPU second: linear layers {efficiency['linear_gflops']:.0f} GFLOP/s = "
                    f"{100 * efficiency['linear_fraction_of_peak']:.0f}% of the one-thread {efficiency['faster_dtype']} "
                    f"peak at the encoder's shapes ({efficiency['peak_gflops']:.0f}); all matmuls over the whole encode "
                    f"{100 * efficiency['end_to_end_fraction_of_peak']:.0f}% (default precision {efficiency['precision']})")
    flow = sections.get("flow")
    if flow:
        lines.append("-" * 100)
        lines.append("3. FLOW FITTING vs ENCODING, same task corpus (all splits), defaults 3x3 levels, w32, 1 epoch, batch 64")
        for task, entry in flow.items():
            fit, enc = entry["fit"], entry["encode_cached"]
            ok = entry["fit_over_encode"] <= TARGETS["fit_over_encode_max"]
            line = (f"   {task:<16} {entry['n_sentences']} sentences ({entry['n_unique_sentences']} unique): encode "
                    f"{enc['seconds']:.2f}s (cache: unique only), fit {fit['seconds']:.2f}s ({fit['n_steps']} steps, "
                    f"{fit['ms_per_step_including_likelihood_passes']:.1f} ms/step incl. likelihood passes) -> fit/encode "
                    f"{entry['fit_over_encode']:.3f} (target <= 0.25: {_mark(ok)})")
            lines.append(line)
            if "encode_every_sentence" in entry:
                lines.append(f"   {'':<16} encoding every sentence (no cache) {entry['encode_every_sentence']['seconds']:.2f}s "
                             f"-> fit/encode {entry['fit_over_encode_every_sentence']:.3f}")
            ll = f"   {'':<16} mean log-likelihood {fit['fit_log_likelihood']:.3f} (start {fit['initial_log_likelihood']:.3f})"
            if "reference_fit" in entry:
                reference = entry["reference_fit"]
                ll += (f"; pre-optimisation implementation {reference['fit_log_likelihood']:.3f} in "
                       f"{reference['seconds']:.2f}s (speed-up x{entry['fit_speedup_vs_reference']:.1f}, "
                       f"LL difference {entry['log_likelihood_minus_reference']:+.4f})")
            lines.append(ll)
    variants = sections.get("variants")
    if variants:
        lines.append("-" * 100)
        lines.append(f"4. SIX VARIANTS vs ONE ({variants['model']}, tasks: {variants['tasks']}; fresh processes, empty cache)")
        for label, run in variants["runs"].items():
            lines.append(f"   {label:<8} evaluate {run['evaluate']['seconds']:.1f}s (process {run['process_seconds']:.1f}s), "
                         f"peak RSS {run['peak_rss_mib']:.0f} MiB")
        ok = variants["six_over_flow"] <= TARGETS["six_over_one_max"]
        lines.append(f"   six/flow {variants['six_over_flow']:.2f} (target <= 1.3: {_mark(ok)}); six/raw "
                     f"{variants['six_over_raw']:.2f} (raw encodes only test sentences; the calibrated variants also "
                     "encode the train/dev splits they fit on)")
    scaling = sections.get("scaling")
    if scaling:
        lines.append("-" * 100)
        lines.append(f"6. SCALING ({scaling['model']}: encode, then flow fit, one fresh process per size)")
        lines.append(f"   {'sentences':>10} {'tokens':>9} {'encode s':>9} {'ms/sent':>8} {'us/token':>8} {'fit s':>7} "
                     f"{'ms/sent':>8} {'emb MiB':>8} {'enc +RSS':>9} {'fit +RSS':>9} {'peak RSS':>9}")
        for row in scaling["rows"]:
            lines.append(f"   {row['n_sentences']:>10} {row.get('n_tokens', '-'):>9} {row['encode']['seconds']:>9.2f} "
                         f"{row['encode_ms_per_sentence']:>8.3f} {_num3(row.get('encode_us_per_token')):>8} "
                         f"{row['fit']['seconds']:>7.2f} {row['fit_ms_per_sentence']:>8.3f} {row['embeddings_mib']:>8.1f} "
                         f"{_num(row['encode_rss_growth_mib']):>9} {_num(row['fit_rss_growth_mib']):>9} {row['peak_rss_mib']:>9.0f}")
        if "growth" in scaling:
            growth = scaling["growth"]
            lines.append(f"   {growth['size_factor']:.0f}x the sentences: encode x{growth['encode_time_factor']}, fit "
                         f"x{growth['fit_time_factor']} (per-sentence cost last/first: encode "
                         f"{growth['encode_time_per_sentence_last_over_first']} (per token "
                         f"{growth.get('encode_time_per_token_last_over_first')}), fit "
                         f"{growth['fit_time_per_sentence_last_over_first']})")
            lines.append("   (the largest sizes repeat sentences with a ' (k)' suffix, so their sentences have more tokens)")
    memory = report.get("memory")
    if memory:
        lines.append("-" * 100)
        lines.append("5. PEAK RSS per worker process (MiB)")
        for label, value in memory.items():
            lines.append(f"   {label:<70} {_num(value):>8}")
    gpu = report["sections"].get("gpu")
    if gpu:
        lines.append("-" * 100)
        lines.append("6. " + format_gpu(gpu))
    lines.append("=" * 100)
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _num3(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
