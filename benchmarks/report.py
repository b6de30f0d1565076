"""Reports of the fused-ops benchmark (benchmarks/bench.py).

Holds: the tables printed at the end of a run and written to results.txt (details per
implementation, summary per workload / mode / TF32 setting, in the CPU sweep per size and
thread count too, and the kernels each fused row ran: ``fused_ops.dispatch_path``), the GPU
targets (PASS / MISS / N/A; judged on CUDA only), the environment record, and the writing of
results.json, results.txt and results.png (through plot.py, where matplotlib is installed).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

import torch
from timing import log
from workloads import BYTE_COUNTS, FLOP_COUNTS, IMPLS, MODES, WORKLOAD_NAMES, spec_json

HERE = os.path.dirname(os.path.abspath(__file__))

SHORT = {
    "conv_transpose3d_relu_group_norm": "convT3d_relu_gn",
    "conv3d_group_norm_mean": "conv3d_gn_mean",
}
TF32_ORDER = {"n/a": 0, "on": 1, "off": 2}


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)


def fmt_ms(e):
    if e is None:
        return "-"
    if e.get("status") != "ok":
        return "skip" if e.get("status") == "skipped" else "ERR"
    return f"{e['median_ms']:.3f}"


def speedup(results, key, impl):
    f = results.get(key + ("fused",))
    o = results.get(key + (impl,))
    if not f or not o or f.get("status") != "ok" or o.get("status") != "ok":
        return None
    return o["median_ms"] / f["median_ms"]


def row_keys(results):
    """The (case, mode, tf32) groups, by workload, then case (in run order), TF32, mode."""
    first = {}  # group -> (workload, order of its case)
    cases = []
    for (case, mode, tf32, _impl), e in results.items():
        if case not in cases:
            cases.append(case)
        first.setdefault((case, mode, tf32), (e.get("workload", case), cases.index(case)))

    def order(k):
        workload, case_index = first[k]
        wl = WORKLOAD_NAMES.index(workload) if workload in WORKLOAD_NAMES else 9
        return (wl, case_index, TF32_ORDER.get(k[2], 3), MODES.index(k[1]))

    return sorted(first, key=order)


def lead(results, key, sweep):
    """The first cells of a row: workload (and in the sweep shape, threads), mode, TF32."""
    e = next(results[key + (i,)] for i in IMPLS if key + (i,) in results)
    name = e.get("workload", key[0])
    cells = [SHORT.get(name, name)]
    if sweep:
        cells += ["x".join(str(s) for s in e.get("shape", [])), str(e.get("threads"))]
    return cells + [key[1], key[2]]


def lead_header(sweep):
    return ["workload"] + (["shape", "threads"] if sweep else []) + ["mode", "tf32"]


def format_table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(
        str(c).rjust(w) if i else str(c).ljust(w)  # noqa: E731
        for i, (c, w) in enumerate(zip(r, widths))
    )
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep] + [line(r) for r in rows])


def summary_table(results, sweep=False):
    """One row per (case, mode, tf32): median ms of each implementation and the fused
    speedups (other / fused). The sweep shows only the implementations it ran, and the
    fused GB/s and fraction of the copy bandwidth where there are bytes to move."""
    impls = [i for i in IMPLS if not sweep or any(k[3] == i for k in results)]
    others = [i for i in impls if i != "fused"]
    if sweep:
        ratios = [f"{i}/fused" for i in others]
        paired = any("paired_eager_ratio" in e for e in results.values())
        ratios += ["paired eager/fused"] if paired else []
        tail = ["fused GB/s", "%copyBW"]
    else:
        ratios = ["fused x eager", "x compile", "x autotune"]
        tail = []
    header = lead_header(sweep) + [f"{i} ms" for i in impls] + ratios + tail
    rows = []
    for key in row_keys(results):
        cells = lead(results, key, sweep) + [fmt_ms(results.get(key + (i,))) for i in impls]
        for i in others:
            s = speedup(results, key, i)
            cells.append(f"{s:.2f}x" if s else "-")
        if sweep:
            f = results.get(key + ("fused",)) or {}
            ok = f.get("status") == "ok"
            if paired:
                p = f.get("paired_eager_ratio")
                cells.append(f"{p:.2f}x" if ok and p else "-")
            cells.append(f"{f['GBps']:.4g}" if ok and "GBps" in f else "-")
            cells.append(f"{f['pct_copy_bw']:.0f}%" if ok and "pct_copy_bw" in f else "-")
        rows.append(cells)
    return format_table(header, rows)


def detail_table(results, sweep=False):
    header = lead_header(sweep) + [
        "impl",
        "p10 ms",
        "median",
        "p90 ms",
        "GB/s",
        "%copyBW",
        "TFLOP/s",
        "%mm",
        "max|err|",
        "relL2err",
        "peak MiB",
        "note",
    ]
    rows = []
    for key in row_keys(results):
        for impl in IMPLS:
            e = results.get(key + (impl,))
            if e is None:
                continue
            ok = e.get("status") == "ok"
            g = lambda k, f, e=e, ok=ok: (f % e[k]) if ok and e.get(k) is not None else "-"
            note = ""
            if not ok:
                note = f"{e.get('status')}: {e.get('error', '')}"[:48]
            elif "compile_s" in e:
                note = f"compile {e['compile_s']:.1f}s"
            elif e.get("retried_batches") or e.get("contended_batches"):
                # CPU: batches timed again because other processes ran, and kept contended
                note = f"retimed {e['retried_batches']}, contended {e['contended_batches']}"
            rows.append(
                lead(results, key, sweep)
                + [
                    impl,
                    g("p10_ms", "%.3f"),
                    g("median_ms", "%.3f"),
                    g("p90_ms", "%.3f"),
                    g("GBps", "%.4g"),
                    g("pct_copy_bw", "%.0f%%"),
                    g("TFLOPs", "%.3g"),
                    g("pct_matmul", "%.0f%%"),
                    g("max_abs_err", "%.1e"),
                    g("rel_l2_err", "%.1e"),
                    g("peak_extra_MiB", "%.0f"),
                    note,
                ]
            )
    return format_table(header, rows)


def paths_table(results, sweep=False):
    """The kernels of each fused row (fused_ops.dispatch_path), one line per workload, size
    and TF32 setting where the modes (and thread counts) agree."""
    groups = {}  # (lead cells but mode and threads..., path) -> modes
    for key in row_keys(results):
        e = results.get(key + ("fused",))
        if not e or not ("path" in e or "path_error" in e):
            continue
        cells = lead(results, key, sweep)
        path = e.get("path") or f"unknown ({e['path_error']})"
        where = tuple(cells[:2] if sweep else cells[:1]) + (key[2], path)
        modes = groups.setdefault(where, [])
        if key[1] not in modes:
            modes.append(key[1])
    header = ["workload"] + (["shape"] if sweep else []) + ["tf32", "modes", "fused path"]
    rows = [list(w[:-1]) + [",".join(m), w[-1]] for w, m in groups.items()]
    return format_table(header, rows)


def targets(results):
    out = []

    def bw(w):
        e = results.get((w, "fwd", "n/a", "fused"))
        if not e or e.get("status") != "ok" or "pct_copy_bw" not in e:
            return None
        return e["pct_copy_bw"] / 100

    def fused_ms(w, m, t):
        f = results.get((w, m, t, "fused"))
        return f["median_ms"] if f and f.get("status") == "ok" else None

    ct, c3 = "conv_transpose3d_relu_group_norm", "conv3d_group_norm_mean"
    checks = [
        ("relu_group_norm fwd fused >= 80% of copy BW", bw("relu_group_norm"), 0.80, ">="),
        ("group_norm_mean fwd fused >= 80% of copy BW", bw("group_norm_mean"), 0.80, ">="),
    ]
    # The headline models' time targets, in ms (H100): the fused convolutions' goals.
    for label, w, mode, tf32, thr in (
        ("conv3d model fwd", c3, "fwd", "on", 0.16),
        ("conv3d model fwd", c3, "fwd", "off", 0.16),
        ("conv3d model fwd+bwd", c3, "fwdbwd", "on", 1.0),
        ("conv3d model fwd+bwd", c3, "fwdbwd", "off", 1.0),
        ("conv_transpose3d model fwd", ct, "fwd", "on", 1.1),
        ("conv_transpose3d model fwd", ct, "fwd", "off", 2.8),
        ("conv_transpose3d model fwd+bwd", ct, "fwdbwd", "on", 4.0),
        ("conv_transpose3d model fwd+bwd", ct, "fwdbwd", "off", 9.0),
    ):
        checks.append(
            (f"{label} fused <= {thr:g} ms (tf32 {tf32})", fused_ms(w, mode, tf32), thr, "<=")
        )
    for label, val, thr, op in checks:
        if val is None:
            status = "N/A"
        else:
            status = "PASS" if (val >= thr if op == ">=" else val <= thr) else "MISS"
        out.append(dict(target=label, value=val, threshold=thr, op=op, status=status))
    return out


def format_targets(tg):
    lines = []
    for t in tg:
        v = (
            "not measured"
            if t["value"] is None
            else f"{t['value']:.3f} (threshold {t['threshold']})"
        )
        lines.append(f"  {t['status']:4s}  {t['target']:62s} {v}")
    return "\n".join(lines)


def environment(device):
    env = dict(
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        host=platform.node(),
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        device_type=device.type,
        cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        cudnn_benchmark=torch.backends.cudnn.benchmark,
    )
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(
            device_name=p.name,
            sm_count=p.multi_processor_count,
            total_mem_GB=p.total_memory / 1e9,
            L2_cache_MB=getattr(p, "L2_cache_size", 0) / 2**20,
            capability=f"{p.major}.{p.minor}",
        )
    else:
        env.update(
            device_name=platform.processor() or platform.machine(),
            cpu_threads=torch.get_num_threads(),
            cpu_count=os.cpu_count(),
            load_average=os.getloadavg(),  # other work on the machine makes CPU timings noisy
        )
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    return env


def ceiling_line(c, label=""):
    nan = float("nan")
    return (
        f"ceilings{label}: copy {c.get('copy_GBps', nan):.0f} GB/s (read+write) | "
        f"matmul {c.get('matmul_size', '?')}^3 TF32 {c.get('matmul_tf32_TFLOPs', nan):.4g}"
        f" TFLOP/s, fp32 {c.get('matmul_fp32_TFLOPs', nan):.4g} TFLOP/s"
    )


def workloads_json(cases):
    """results.json's `workloads`: name -> spec; in the sweep name -> {kind, sizes: [...]}."""
    out = {}
    for case in cases:
        spec = spec_json(case.spec)
        if not case.sweep:
            out[case.workload] = spec
            continue
        entry = out.setdefault(case.workload, dict(kind=spec.pop("kind"), sizes=[]))
        spec.pop("kind", None)
        if spec not in entry["sizes"]:
            entry["sizes"].append(spec)
    return out


def results_from_rows(rows):
    """results.json's rows back as the Runner's (case key, mode, tf32, impl) -> row dict."""
    return {(r.get("case", r["workload"]), r["mode"], r["tf32"], r["impl"]): r for r in rows}


def render_text(doc, results):
    """The text printed at the end of a run and written to results.txt."""
    env, note = doc["env"], doc.get("note")
    by_threads = doc.get("ceilings_by_threads")
    sweep = "sweep" in doc
    if sweep:
        ceil_lines = [
            ceiling_line(by_threads[t], f" ({t} thread{'s' if int(t) > 1 else ''})")
            for t in sorted(by_threads, key=int)
        ]
        speedups = "eager/fused = eager ms / fused ms; %copyBW: of the copy at the row's threads"
    else:
        ceil_lines = [ceiling_line(doc["ceilings"])]
        speedups = "speedup = other / fused"
    head = (
        f"{env['device_name']} | torch {env['torch']} | cuda {env['cuda']} | cudnn {env['cudnn']}"
        f" | {env['date']} | wall {doc['wall_s']:.0f}s"
        + (
            f" | split-TF32 convolution: {env['split_tf32_conv_kernel']}"
            if env.get("split_tf32_conv_kernel")
            else ""
        )
        + (
            f" | one-pass products: {env['onepass_products_kernel']}"
            if env.get("onepass_products_kernel")
            else ""
        )
    )
    bar = "=" * 20
    lines = [
        "",
        f"{bar} details (errors: forward output vs float64 reference) {bar}",
        detail_table(results, sweep),
    ]
    if any("path" in r or "path_error" in r for r in results.values()):
        lines += [
            "",
            f"{bar} fused paths (fused_ops.dispatch_path under the row's flags) {bar}",
            paths_table(results, sweep),
        ]
    lines += [
        "",
        f"{bar} summary (median ms; {speedups}) {bar}",
        head,
        *ceil_lines,
        summary_table(results, sweep),
    ]
    if env["device_type"] == "cuda":  # the targets are GPU targets
        lines += ["", "targets:", format_targets(doc["targets"])]
    return "\n".join(lines + ([f"NOTE: {note}"] if note else []) + [""])


def write_report(a, env, fused_info, ceilings, cases, results, t0, note=None):
    """Writes results.json / results.png / results.txt under a.out and prints the tables.

    ceilings: threads -> ceilings dict, as the Runner takes them (one entry, key None, but in
    the CPU sweep)."""
    results = dict(results)
    doc = dict(
        env=env,
        fused_ops=fused_info,
        args=dict(vars(a)),
        ceilings=ceilings[max(ceilings, key=lambda t: t or 0)],  # all threads in the sweep
        byte_counts=BYTE_COUNTS,
        flop_counts=FLOP_COUNTS,
        workloads=workloads_json(cases),
        rows=list(results.values()),
        targets=targets(results) if env["device_type"] == "cuda" else [],
        wall_s=time.perf_counter() - t0,
        note=note,
    )
    if any(c.sweep for c in cases):
        doc["sweep"] = dict(threads=sorted(t for t in ceilings if t))
        doc["ceilings_by_threads"] = {str(t): c for t, c in ceilings.items()}
    json_path = os.path.join(a.out, "results.json")
    write_json(json_path, doc)

    png_path = os.path.join(a.out, "results.png")
    png_note = None
    if not a.no_plot:
        try:
            sys.path.insert(0, HERE)
            from plot import make_chart  # noqa: E402

            make_chart(doc, png_path)
        except ImportError as e:
            png_note = f"no PNG ({e}); later: python3 benchmarks/plot.py {json_path} out.png"
        except Exception as e:  # noqa: BLE001
            png_note = f"PNG failed: {type(e).__name__}: {e}"
    else:
        png_note = "no PNG (--no-plot)"

    text = render_text(doc, results)
    with open(os.path.join(a.out, "results.txt"), "w") as f:
        f.write(text)
    log(
        f"\nwrote {json_path}"
        + ("" if png_note else f", {png_path}")
        + f", {os.path.join(a.out, 'results.txt')}"
    )
    if png_note:
        log(png_note)
    log(text)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__ + "\nRun as a script: prints the tables of a results.json again.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("results_json", help="a results.json of benchmarks/bench.py")
    args = parser.parse_args(argv)
    with open(args.results_json) as f:
        doc = json.load(f)
    sys.stdout.write(render_text(doc, results_from_rows(doc["rows"])))


if __name__ == "__main__":
    main()
