#!/usr/bin/env python3
"""Bar chart of a benchmarks/bench.py results.json.

    python3 benchmarks/plot.py results.json out.png

One panel per (workload, mode); one group of bars per TF32 setting; one bar per implementation
(median ms, p10-p90 as error bars, ms printed on top). For a CPU sweep (rows with a `case`):
one group per size and thread count, each bar the time relative to eager's in its group
(the sizes' times span orders of magnitude). Needs matplotlib.
"""

import argparse
import json

IMPLS = ["eager", "compile", "autotune", "fused"]
COLORS = {"eager": "#7f7f7f", "compile": "#1f77b4", "autotune": "#9467bd", "fused": "#d62728"}
LABELS = {
    "eager": "eager",
    "compile": "torch.compile",
    "autotune": "compile max-autotune",
    "fused": "fused_ops",
}
WL_ORDER = [
    "relu_group_norm",
    "group_norm_mean",
    "conv_transpose3d_relu_group_norm",
    "conv3d_group_norm_mean",
]


def make_chart(doc, out_png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in doc["rows"] if r.get("status") == "ok"]
    workloads = [w for w in WL_ORDER if any(r["workload"] == w for r in rows)]
    workloads += sorted({r["workload"] for r in rows} - set(workloads))
    if not workloads:
        raise ValueError("no successful rows to plot")
    modes = [m for m in ("fwd", "fwdbwd") if any(r["mode"] == m for r in rows)]
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    # A CPU sweep has a group of bars per size and thread count: wider panels.
    cases = max(len({r.get("case") for r in rows if r["workload"] == w}) for w in workloads)
    panel_width = max(6.0, 1.0 * cases)
    fig, axes = plt.subplots(
        len(workloads),
        len(modes),
        figsize=(panel_width * len(modes), (3.0 if cases == 1 else 3.6) * len(workloads)),
        squeeze=False,
    )
    for wi, w in enumerate(workloads):
        for mi, mode in enumerate(modes):
            ax = axes[wi, mi]
            wr = [r for r in rows if r["workload"] == w and r["mode"] == mode]
            if not wr:
                ax.axis("off")
                continue
            sweep = any("case" in r for r in wr)
            if sweep:
                groups = list(dict.fromkeys(r["case"] for r in wr))
                group_of = lambda r: r["case"]
                labels = ["\n".join(g.split()[1:]) for g in groups]  # shape, threads
            else:
                groups = sorted(
                    {r["tf32"] for r in wr}, key=lambda t: {"n/a": 0, "on": 1, "off": 2}.get(t, 3)
                )
                group_of = lambda r: r["tf32"]
                labels = ["" if t == "n/a" else f"TF32 {t}" for t in groups]
            width = 0.8 / len(impls)
            top = 0.0
            for j, impl in enumerate(impls):
                xs, ys, lo, hi = [], [], [], []
                for i, g in enumerate(groups):
                    r = next((r for r in wr if group_of(r) == g and r["impl"] == impl), None)
                    if r is None:
                        continue
                    scale = 1.0
                    if sweep:
                        eager = next(
                            (e for e in wr if group_of(e) == g and e["impl"] == "eager"), None
                        )
                        if eager is None:
                            continue
                        scale = 1.0 / eager["median_ms"]
                    xs.append(i - 0.4 + width * (j + 0.5))
                    ys.append(r["median_ms"] * scale)
                    lo.append(max(0.0, r["median_ms"] - r.get("p10_ms", r["median_ms"])) * scale)
                    hi.append(max(0.0, r.get("p90_ms", r["median_ms"]) - r["median_ms"]) * scale)
                    top = max(top, ys[-1])
                if not xs:
                    continue
                ax.bar(
                    xs, ys, width, yerr=[lo, hi], color=COLORS[impl], label=LABELS[impl], capsize=2
                )
                for x, y in zip(xs, ys):
                    ax.text(x, y, f"{y:.3g}", ha="center", va="bottom", fontsize=7)
            ax.set_xticks(range(len(groups)))
            ax.set_xticklabels(labels, fontsize=6 if sweep else None)
            ylabel = "time / eager time" if sweep else "median ms"
            ax.set_ylabel(f"{ylabel} (lower is better)", fontsize=8)
            ax.set_title(f"{w}: {'forward' if mode == 'fwd' else 'forward+backward'}", fontsize=9)
            # Whiskers (p10-p90) of noisy rows may run off the top: the medians set the scale
            # (in a sweep at most 4x eager's, so that one outlier does not flatten the rest).
            if sweep:
                top = min(top, 4.0)
            ax.set_ylim(0, 1.3 * top if top > 0 else 1.0)
            for text in ax.texts:  # values of bars cut by the scale: at the top
                x, y = text.get_position()
                text.set_position((x, min(y, 1.25 * top)))
    env = doc.get("env", {})
    fig.suptitle(
        f"fused_ops benchmark - {env.get('device_name', '?')}, torch {env.get('torch', '?')}"
        f", {env.get('date', '')}",
        fontsize=10,
    )
    handles = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(
        list(handles.values()),
        list(handles.keys()),
        loc="upper center",
        ncol=4,
        fontsize=8,
        bbox_to_anchor=(0.5, 0.975),
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results_json", help="a results.json of benchmarks/bench.py")
    parser.add_argument("out_png", help="the chart to write")
    args = parser.parse_args(argv)
    with open(args.results_json) as f:
        doc = json.load(f)
    print(make_chart(doc, args.out_png))


if __name__ == "__main__":
    main()
