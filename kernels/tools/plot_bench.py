#!/usr/bin/env python3
"""Plots for BENCHMARKS.md from the JSON the GPU runs wrote (benchmarks/*.json[l]).

    python3 kernels/tools/plot_bench.py benchmarks/ttf-<gpu>-<date>.jsonl [more .jsonl] benchmarks/flash-vs-sdpa-<gpu>-<date>.json

writes benchmarks/time-to-find.png (median seconds to the first finding and to a minimised seed,
per kernel, with every seed's value as a dot; the rows of every .jsonl given, in order) and benchmarks/flash-vs-sdpa.png (TFLOP/s by
sequence length, per head_dim and causal). Needs matplotlib (not needed by anything else).
"""
import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def time_to_find(paths: list, out: Path) -> None:
    rows = [json.loads(l) for path in paths for l in path.read_text().splitlines() if l.strip()]
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, k in enumerate(kernels):
        rs = [r for r in rows if r["kernel"] == k and r["found"]]
        first = [r["first_finding_s"] for r in rs]
        minimised = [r["minimised_s"] for r in rs]
        ax.bar(i - 0.2, statistics.median(first), 0.4, color="tab:blue", label="first finding" if i == 0 else None)
        ax.bar(i + 0.2, statistics.median(minimised), 0.4, color="tab:orange", label="minimised seed" if i == 0 else None)
        ax.scatter([i - 0.2] * len(first), first, s=8, color="black", zorder=3)
        ax.scatter([i + 0.2] * len(minimised), minimised, s=8, color="black", zorder=3)
    ax.set_xticks(range(len(kernels)), kernels, rotation=35, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("seconds from `cudafuzz fuzz` start (median of seeds)")
    ax.set_title("time to find: " + ", ".join(p.stem for p in paths))
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def flash_vs_sdpa(path: Path, out: Path) -> None:
    data = json.loads(path.read_text())
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, d in zip(axes, (64, 128)):
        for causal, style in ((False, "-"), (True, "--")):
            rs = sorted((r for r in data["rows"] if r["head_dim"] == d and r["causal"] == causal), key=lambda r: r["seq"])
            seqs = [r["seq"] for r in rs]
            tag = "causal" if causal else "non-causal"
            ax.plot(seqs, [r["flash_fwd_tflops"] for r in rs], style, marker="o", color="tab:blue", label=f"flash_fwd {tag}")
            ax.plot(seqs, [r["sdpa_tflops"] for r in rs], style, marker="s", color="tab:gray", label=f"SDPA flash {tag}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length")
        ax.set_title(f"head_dim {d}")
    axes[0].set_ylabel("TFLOP/s (fp16)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"flash_fwd vs PyTorch SDPA, {data['gpu']}, {data['date']}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    paths = [Path(a) for a in sys.argv[1:]]
    ttf = [p for p in paths if p.suffix == ".jsonl"]
    if ttf:
        time_to_find(ttf, ttf[0].parent / "time-to-find.png")
    for p in paths:
        if p.suffix != ".jsonl":
            flash_vs_sdpa(p, p.parent / "flash-vs-sdpa.png")


if __name__ == "__main__":
    main()
