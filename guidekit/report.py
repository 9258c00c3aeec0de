"""The performance page's tables, plot and measured sentences, from ddp_benchmark.py's result files (ko/en).

The page is a notebook (docs/{ko,en}/performance.ipynb) that the site build executes (a failing cell fails the build):
its code cells call this module, ``from guidekit import report``, which the repository's install provides (``pip
install -e .``). Labels and sentences come from the site's text catalogue (guidekit.text, ``report:``), code sections
from guidekit.sections, the results from ``snippets/benchmark/results/``. tests/site/test_results.py renders every
committed result file in both languages.
"""

import io
import json
import warnings

from guidekit import ROOT
from guidekit.sections import parse_target, target_text
from guidekit.text import text

RESULTS = ROOT / "snippets" / "benchmark" / "results"

# Per-direction link rates for the GPU prediction. nccl-tests' busbw reaches a large fraction of the link
# rate on big messages; the prediction assumes LINK_EFFICIENCY of it. Measure yours with the benchmark.
LINK_EFFICIENCY = 0.8
LINKS = [
    ("NVLink 4 (H100/H200 SXM)", 450.0, "https://www.nvidia.com/en-us/data-center/h200/"),
    ("PCIe Gen5 x16", 63.0, "https://www.nvidia.com/en-us/data-center/h200/"),
    ("PCIe Gen4 x16", 31.5, "https://www.nvidia.com/en-us/data-center/a100/"),
]


class Markdown(str):
    """A string that Jupyter shows as Markdown (and print() shows as text)."""

    def _repr_markdown_(self):
        return str(self)


class Text(str):
    """Preformatted text: Jupyter shows it in a box, as a program would print it."""

    def _repr_html_(self):
        return "<pre>" + self.replace("&", "&amp;").replace("<", "&lt;") + "</pre>"


class Svg(str):
    def _repr_svg_(self):
        return str(self)


def labels(lang: str) -> dict:
    return text(lang)["report"]


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:g} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:g} KiB"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _mode(run: dict, t: dict) -> str:
    if run["mode"] == "single":
        return f"{t['single']} ({run['threads']} {t['thr']})"
    if run["mode"] == "DataParallel":
        return f"DataParallel ({run['gpus']} GPU)"
    return f"DDP, bucket_cap_mb={run['bucket_cap_mb']:g}" if run.get("bucket_cap_mb") else "DDP"


def error(run: dict) -> float:
    """The model's relative error on a DDP row, as the benchmark stored it: predicted / measured median - 1."""
    return run["model_error"]


def ddp_rows(res: dict) -> list[dict]:
    """DDP rows at the default bucket cap: one per model size and world size."""
    return [r for r in res["runs"] if r["mode"] == "DDP" and not r.get("bucket_cap_mb")]


def sweep_rows(res: dict) -> list[dict]:
    """DDP rows of the bucket_cap_mb sweep, smallest cap first."""
    return sorted((r for r in res["runs"] if r["mode"] == "DDP" and r.get("bucket_cap_mb")), key=_cap)


def _cap(run: dict) -> float:
    return run["bucket_cap_mb"]


def _fit_ms(fit: dict, nbytes: float) -> float:
    """One all-reduce of nbytes by the fit: alpha + beta * bytes (the benchmark's allreduce_ms)."""
    return fit["alpha_us"] / 1e3 + fit["beta_s_per_byte"] * nbytes * 1e3


def fit_residuals(res: dict, world: int) -> list[float]:
    """How far the fit lies from each point of that world size's all-reduce sweep: fit / measured - 1."""
    fit = next(f for f in res["fits"] if f["world_size"] == world)
    return [_fit_ms(fit, a["bytes"]) / (a["time_us"] / 1e3) - 1 for a in res["allreduce"] if a["world_size"] == world]


def environment(name: str, lang: str) -> Markdown:
    t, env = labels(lang), load(name)["env"]
    rows = [
        (t["machine"], env["machine"] or "-"),
        (t["date"], env["date"]),
        (t["cpu"], f"{env['cpu']}, {env['cpus_usable']} {t['cores']}"),
        (t["gpus"], ", ".join(env["gpus"]) or t["none"]),
        (t["torch"], f"{env['torch']} (CUDA {env['cuda'] or '-'}, NCCL {env['nccl'] or '-'})"),
        (t["threads_rank"], str(env["threads_per_rank"])),
        (t["load"], f"{env['loadavg_start']:.2f} / {env['loadavg_end']:.2f}"),
    ]
    return Markdown(_md_table(["", ""], [list(r) for r in rows]))


def table(name: str, lang: str) -> Markdown:
    """The comparison table: every mode, world size and model size."""
    t, res = labels(lang), load(name)
    header = [t["model"], t["mode"], t["world"], t["batch"], t["step"], t["sps"], t["speedup"], t["eff"], t["mem"]]
    rows = []
    for r in res["runs"]:
        s = r["step_ms"]
        mode = _mode(r, t) + (f" ({r['backend']})" if r["mode"] == "DDP" else "")
        rows.append(
            [
                r["model"],
                mode,
                str(r["world_size"]),
                f"{r['batch_per_rank']}/{r['global_batch']}",
                f"{s['median']:.2f} [{s['p10']:.2f}–{s['p90']:.2f}]",
                f"{r['samples_per_s']:,.0f}",
                f"{r['speedup']:.2f}×",
                f"{r['efficiency']:.0%}",
                f"{r['peak_mem_mib']:.0f}",
            ]
        )
    return Markdown(_md_table(header, rows))


def _buckets(run: dict) -> str:
    """A DDP row's buckets, in all-reduce order: 3 (16.0, 32.0, 16.0 MiB)."""
    return f"{len(run['buckets'])} ({', '.join(f'{b / 2**20:.1f}' for b in run['buckets'])} MiB)"


def _model_row(r: dict) -> list[str]:
    p, c = r["predicted"], r["compute_phases_ms"]
    return [
        f"{c['forward']:.2f} + {c['backward']:.2f} + {c['optimizer']:.2f}",
        f"{p['comm_ms']:.2f}",
        f"**{p['model_ms']:.2f}**",
        f"{p['no_overlap_ms']:.2f} / {p['overlap_ms']:.2f}",
        f"{r['step_ms']['median']:.2f} [{r['step_ms']['p10']:.2f}–{r['step_ms']['p90']:.2f}]",
        f"{error(r):+.0%}",
    ]


def _model_header(t: dict) -> list[str]:
    return [t["compute_phases"], t["comm"], t["pred"], t["pred_both"], t["step"], t["err"]]


def model_table(name: str, lang: str) -> Markdown:
    """The performance model beside each DDP row at the default bucket cap: its inputs, its prediction, the
    measurement and the error."""
    t, res = labels(lang), load(name)
    header = [t["model"], t["world"], t["buckets"], *_model_header(t)]
    rows = [[r["model"], str(r["world_size"]), _buckets(r), *_model_row(r)] for r in ddp_rows(res)]
    return Markdown(_md_table(header, rows))


def sweep_table(name: str, lang: str) -> Markdown:
    """The bucket_cap_mb sweep: the same model and world size, measured and predicted at each cap."""
    t, res = labels(lang), load(name)
    header = ["bucket_cap_mb", t["buckets"], *_model_header(t)]
    rows = [[f"{r['bucket_cap_mb']:g}", _buckets(r), *_model_row(r)] for r in sweep_rows(res)]
    return Markdown(_md_table(header, rows))


def fit_table(name: str, lang: str) -> Markdown:
    """The alpha-beta fit per world size, with its units, the link rate it implies and how well it fits its sweep."""
    t, res = labels(lang), load(name)
    header = [t["world"], t["points"], t["alpha"], t["beta"], t["busbw"], t["fit_worst"], t["form"]]
    rows = []
    for f in res["fits"]:
        n = f["world_size"]
        worst = max(fit_residuals(res, n), key=abs)
        rows.append(
            [
                str(n),
                str(sum(a["world_size"] == n for a in res["allreduce"])),
                f"{f['alpha_us']:,.1f}",
                f"{f['beta_s_per_byte'] * 1e9:.4f} ({f['beta_s_per_byte']:.3g} s/B)",
                f"{f['busbw_gbs']:.3f}" if n > 1 else "–",
                f"{worst:+.0%}",
                t["form_overlap" if f["overlap"] else "form_serial"],
            ]
        )
    return Markdown(_md_table(header, rows))


def allreduce_table(name: str, lang: str) -> Markdown:
    t, res = labels(lang), load(name)
    fits = {f["world_size"]: f for f in res["fits"]}
    rows = [
        [
            str(a["world_size"]),
            _mib(a["bytes"]),
            f"{a['time_us']:,.0f}",
            f"{_fit_ms(fits[a['world_size']], a['bytes']) * 1e3:,.0f}",
            f"{a['algbw_gbs']:.3f}",
            f"{a['busbw_gbs']:.3f}",
        ]
        for a in res["allreduce"]
    ]
    return Markdown(_md_table([t["world"], t["bytes"], t["time"], t["time_fit"], t["algbw"], t["busbw"]], rows))


def printed(name: str) -> Text:
    """The table exactly as the benchmark printed it (results/<name>.txt)."""
    return Text((RESULTS / name).with_suffix(".txt").read_text())


def facts(name: str) -> dict:
    """The numbers the page's prose quotes, computed from the result file."""
    res = load(name)
    runs, top = res["runs"], max(r["width"] for r in res["runs"])
    wmax = max(r["world_size"] for r in runs)
    ddp = {(r["width"], r["world_size"]): r for r in ddp_rows(res)}
    big, big1 = ddp[(top, wmax)], ddp[(top, 1)]
    single1 = next(r for r in runs if r["width"] == top and r["mode"] == "single" and r["threads"] == 1)
    multi = [r for r in runs if r["width"] == top and r["mode"] == "single" and r["threads"] > 1]
    every = [error(r) for r in runs if r["mode"] == "DDP"]
    overlap = next(f["overlap"] for f in res["fits"] if f["world_size"] == wmax)
    other = [  # the form the model does not use, on the rows where the two differ (more than one rank)
        r["predicted"]["no_overlap_ms" if overlap else "overlap_ms"] / r["step_ms"]["median"] - 1
        for r in runs
        if r["mode"] == "DDP" and r["world_size"] > 1
    ]
    phases = big["compute_phases_ms"]
    return dict(
        model=big["model"],
        world=wmax,
        measured_ms=big["step_ms"]["median"],
        predicted_ms=big["predicted"]["model_ms"],
        no_overlap_ms=big["predicted"]["no_overlap_ms"],
        overlap_ms=big["predicted"]["overlap_ms"],
        error=error(big),
        forward_ms=phases["forward"],
        backward_ms=phases["backward"],
        optimizer_ms=phases["optimizer"],
        compute_ms=big["compute_ms"],
        comm_ms=big["predicted"]["comm_ms"],
        buckets=len(big["buckets"]),
        compute1_ms=big1["compute_ms"],
        contention=big["compute_ms"] / (big1["compute_ms"] / wmax),
        speedup=big["speedup"],
        single_ms=single1["step_ms"]["median"],
        threads_speedup=multi[0]["speedup"] if multi else None,
        rows=len(every),
        error_min=min(every),
        error_max=max(every),
        error_worst=max(every, key=abs),
        overlap=overlap,
        other_min=min(other),
        other_max=max(other),
    )


BAR = 0.15  # the bar every DDP row of a committed result meets (tests/site/test_results.py)


def model_check(name: str, lang: str) -> Markdown:
    """Every DDP row against the bar in a sentence, then the largest model at the largest world size in detail."""
    t, f = labels(lang), facts(name)
    verdict = t["within" if abs(f["error_worst"]) <= BAR else "outside"].format(bar=BAR)
    form, other = (t[k] for k in (("form_overlap", "form_serial") if f["overlap"] else ("form_serial", "form_overlap")))
    return Markdown(t["model_check"].format(**f, verdict=verdict, form=form, other=other))


def caveats(name: str, lang: str) -> Markdown:
    """What this run's conditions mean for reading it: machine load, and threads vs ranks on the same cores."""
    t, res, f = labels(lang), load(name), facts(name)
    env, cores = res["env"], res["env"]["cpus_usable"]
    if env["gpus"]:
        return Markdown("")
    load_max = max(env["loadavg_start"], env["loadavg_end"])
    items = [
        t["load_high" if load_max > cores else "load_ok"].format(load=load_max, ratio=load_max / cores, cores=cores)
    ]
    if f["threads_speedup"] is not None:
        items.append(t["threads"].format(**f))
    return Markdown("\n".join(f"- {item}" for item in items))


def gpu_prediction(name: str, lang: str, world: int = 8) -> Markdown:
    """All-reduce time per step for this page's model sizes on GPU links, from the same formula."""
    t, res = labels(lang), load(name)
    grads = sorted({r["grad_mib"] for r in res["runs"]})
    header = [t["link"], t["link_busbw"]] + [f"{g:.2f} MiB" for g in grads]
    rows = []
    for link, rate, src in LINKS:
        busbw = rate * LINK_EFFICIENCY
        ms = [2 * (world - 1) / world * g * 2**20 / (busbw * 1e9) * 1e3 for g in grads]
        rows.append([f"[{link}]({src}) ({rate:g})", f"{busbw:.0f}"] + [f"{m:.3f} ms" for m in ms])
    return Markdown(_md_table(header, rows))


def plot(name: str, lang: str) -> Svg:
    """Left: speedup vs world size per model. Right: step time vs gradient size, measured vs predicted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    t, res = labels(lang), load(name)
    runs = res["runs"]
    worlds = sorted({r["world_size"] for r in runs if r["mode"] == "DDP"})
    wmax = worlds[-1]
    plt.rcParams.update({"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 10, "svg.hashsalt": "plot"})
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), facecolor="white")
    for width in sorted({r["width"] for r in runs}):
        ddp = sorted((r for r in ddp_rows(res) if r["width"] == width), key=lambda r: r["world_size"])
        left.plot(
            [r["world_size"] for r in ddp],
            [r["speedup"] for r in ddp],
            "o-",
            label=f"{ddp[0]['model']} ({ddp[0]['grad_mib']:.2f} MiB)",
        )
    left.plot(worlds, worlds, "k--", lw=1, label=t["ideal"])
    left.set(title=t["plot_scaling"], xlabel=t["x_world"], ylabel=t["y_speedup"], xticks=worlds)
    left.set_ylim(bottom=0)
    left.legend(fontsize=8)

    ddp = sorted((r for r in ddp_rows(res) if r["world_size"] == wmax), key=lambda r: r["grad_mib"])
    single = sorted((r for r in runs if r["mode"] == "single" and r["threads"] == 1), key=lambda r: r["grad_mib"])
    g = [r["grad_mib"] for r in ddp]
    right.errorbar(
        g,
        [r["step_ms"]["median"] for r in ddp],
        fmt="o-",
        yerr=[
            [r["step_ms"]["median"] - r["step_ms"]["p10"] for r in ddp],
            [r["step_ms"]["p90"] - r["step_ms"]["median"] for r in ddp],
        ],
        label=f"{t['measured']} ({t['world']} {wmax})",
        capsize=3,
    )
    right.plot(g, [r["predicted"]["no_overlap_ms"] for r in ddp], "s--", label=t["pred_no"])
    right.plot(g, [r["predicted"]["overlap_ms"] for r in ddp], "^:", label=t["pred_ov"])
    right.plot(g, [r["compute_ms"] for r in ddp], ".-", color="silver", label=t["compute_line"])
    right.plot(
        [r["grad_mib"] for r in single],
        [r["step_ms"]["median"] for r in single],
        "x-",
        color="gray",
        label=t["single_line"],
    )
    right.set(title=t["plot_time"], xlabel=t["x_grad"], ylabel=t["y_ms"], xscale="log", yscale="log")
    for axis in (right.xaxis, right.yaxis):
        axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    right.legend(fontsize=8)
    buf = io.StringIO()
    with warnings.catch_warnings():  # no Hangul in matplotlib's fonts: labels stay text, the browser draws them
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.tight_layout()
        fig.savefig(buf, format="svg", metadata={"Date": None})  # reproducible output
    plt.close(fig)
    svg = buf.getvalue()
    return Svg(svg[svg.index("<svg") :])  # drop the XML prolog: the SVG goes inline into the page


def source(target: str) -> Markdown:
    """A snippet's section as a page include shows it ("snippets/x/y.py:section"), and the file it comes from."""
    return Markdown(f"```python\n{target_text(target, ROOT)}```\n\n`{parse_target(target).path}`")
