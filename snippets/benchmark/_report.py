"""Turn ddp_benchmark.py's result files into the tables and plots of the performance page (ko/en).

A helper, not a snippet: the page's notebooks (docs/{ko,en}/performance.ipynb) call it, and the site build executes
them (a failing cell fails the build). `python snippets/benchmark/_report.py` checks every committed result file.
"""

import io
import json
import re
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

# Per-direction link rates for the GPU prediction. nccl-tests' busbw reaches a large fraction of the link
# rate on big messages; the prediction assumes LINK_EFFICIENCY of it. Measure yours with the benchmark.
LINK_EFFICIENCY = 0.8
LINKS = [
    ("NVLink 4 (H100/H200 SXM)", 450.0, "https://www.nvidia.com/en-us/data-center/h200/"),
    ("PCIe Gen5 x16", 63.0, "https://www.nvidia.com/en-us/data-center/h200/"),
    ("PCIe Gen4 x16", 31.5, "https://www.nvidia.com/en-us/data-center/a100/"),
]

TEXT = {
    "ko": dict(
        model="모델",
        params="파라미터",
        mode="방식",
        backend="백엔드",
        world="월드 크기",
        batch="배치 (랭크당/전체)",
        step="스텝 ms 중앙값 [p10–p90]",
        sps="샘플/s",
        speedup="속도 향상",
        eff="확장 효율",
        grad="기울기 MiB",
        compute="계산 ms",
        pred="예측 ms (겹침 없음 / 겹침)",
        err="예측 오차",
        mem="최대 메모리 MiB",
        thr="스레드",
        single="단일 장치",
        machine="머신",
        date="측정일",
        cpu="CPU",
        cores="코어",
        torch="PyTorch",
        gpus="GPU",
        load="부하(1분 loadavg) 시작/끝",
        none="없음",
        threads_rank="랭크당 스레드",
        bytes="메시지 크기",
        time="시간 µs",
        algbw="algbw GB/s",
        busbw="busbw GB/s",
        plot_scaling="월드 크기별 속도 향상",
        plot_time="모델 크기별 스텝 시간",
        ideal="선형(이상)",
        x_world="월드 크기 (랭크 수)",
        y_speedup="단일 장치 대비 속도 향상",
        x_grad="기울기 크기 (MiB)",
        y_ms="스텝 시간 (ms)",
        measured="DDP 측정",
        pred_no="예측: 겹침 없음",
        pred_ov="예측: 완전 겹침",
        single_line="단일 장치 1스레드",
        buckets="버킷 수",
        comm="올리듀스 ms",
        measured_ms="측정 ms",
        link="연결 (방향당 GB/s)",
        link_busbw="가정한 busbw GB/s",
    ),
    "en": dict(
        model="model",
        params="parameters",
        mode="mode",
        backend="backend",
        world="world size",
        batch="batch (per rank/global)",
        step="step ms median [p10–p90]",
        sps="samples/s",
        speedup="speedup",
        eff="scaling efficiency",
        grad="gradient MiB",
        compute="compute ms",
        pred="predicted ms (no overlap / overlap)",
        err="prediction error",
        mem="peak memory MiB",
        thr="threads",
        single="one device",
        machine="machine",
        date="measured",
        cpu="CPU",
        cores="cores",
        torch="PyTorch",
        gpus="GPUs",
        load="load (1-min loadavg) start/end",
        none="none",
        threads_rank="threads per rank",
        bytes="message size",
        time="time µs",
        algbw="algbw GB/s",
        busbw="busbw GB/s",
        plot_scaling="Speedup vs world size",
        plot_time="Step time vs model size",
        ideal="linear (ideal)",
        x_world="world size (ranks)",
        y_speedup="speedup over one device",
        x_grad="gradient size (MiB)",
        y_ms="step time (ms)",
        measured="DDP measured",
        pred_no="predicted: no overlap",
        pred_ov="predicted: full overlap",
        single_line="one device, 1 thread",
        buckets="buckets",
        comm="all-reduce ms",
        measured_ms="measured ms",
        link="link (GB/s per direction)",
        link_busbw="assumed busbw GB/s",
    ),
}


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
    return "DDP"


def error(run: dict) -> float:
    """Relative error of the no-overlap prediction against the measured median."""
    return run["predicted"]["no_overlap_ms"] / run["step_ms"]["median"] - 1


def environment(name: str, lang: str) -> Markdown:
    t, env = TEXT[lang], load(name)["env"]
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
    t, res = TEXT[lang], load(name)
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


def model_table(name: str, lang: str) -> Markdown:
    """The performance model beside each DDP row: measured vs predicted."""
    t, res = TEXT[lang], load(name)
    header = [
        t["model"],
        t["world"],
        t["grad"],
        t["buckets"],
        t["compute"],
        t["comm"],
        t["pred"],
        t["measured_ms"],
        t["err"],
    ]
    rows = []
    for r in res["runs"]:
        if r["mode"] != "DDP":
            continue
        p = r["predicted"]
        rows.append(
            [
                r["model"],
                str(r["world_size"]),
                f"{r['grad_mib']:.2f}",
                str(len(r["buckets"])),
                f"{r['compute_ms']:.2f}",
                f"{p['comm_ms']:.2f}",
                f"{p['no_overlap_ms']:.2f} / {p['overlap_ms']:.2f}",
                f"{r['step_ms']['median']:.2f}",
                f"{error(r):+.0%}" if r["world_size"] > 1 else "–",
            ]
        )
    return Markdown(_md_table(header, rows))


def allreduce_table(name: str, lang: str) -> Markdown:
    t, res = TEXT[lang], load(name)
    rows = [
        [
            str(a["world_size"]),
            _mib(a["bytes"]),
            f"{a['time_us']:,.0f}",
            f"{a['algbw_gbs']:.3f}",
            f"{a['busbw_gbs']:.3f}",
        ]
        for a in res["allreduce"]
    ]
    return Markdown(_md_table([t["world"], t["bytes"], t["time"], t["algbw"], t["busbw"]], rows))


def printed(name: str) -> Text:
    """The table exactly as the benchmark printed it (results/<name>.txt)."""
    return Text((RESULTS / name).with_suffix(".txt").read_text())


def facts(name: str) -> dict:
    """The numbers the page's prose quotes, computed from the result file."""
    res = load(name)
    runs, top = res["runs"], max(r["width"] for r in res["runs"])
    wmax = max(r["world_size"] for r in runs)
    ddp = {(r["width"], r["world_size"]): r for r in runs if r["mode"] == "DDP"}
    big, big1 = ddp[(top, wmax)], ddp[(top, 1)]
    single1 = next(r for r in runs if r["width"] == top and r["mode"] == "single" and r["threads"] == 1)
    multi = [r for r in runs if r["width"] == top and r["mode"] == "single" and r["threads"] > 1]
    return dict(
        model=big["model"],
        world=wmax,
        measured_ms=big["step_ms"]["median"],
        predicted_ms=big["predicted"]["no_overlap_ms"],
        overlap_ms=big["predicted"]["overlap_ms"],
        error=error(big),
        compute_ms=big["compute_ms"],
        comm_ms=big["predicted"]["comm_ms"],
        compute1_ms=big1["compute_ms"],
        contention=big["compute_ms"] / (big1["compute_ms"] / wmax),
        speedup=big["speedup"],
        single_ms=single1["step_ms"]["median"],
        threads_speedup=multi[0]["speedup"] if multi else None,
        errors={r["model"]: error(r) for (w, n), r in ddp.items() if n == wmax},
    )


def model_check(name: str, lang: str) -> Markdown:
    f = facts(name)
    ok = abs(f["error"]) <= 0.25
    if lang == "ko":
        verdict = "25% 이내로 맞았습니다" if ok else "25%를 벗어났습니다"
        text = (
            f"가장 큰 모델({f['model']}), 월드 크기 {f['world']}: 측정 {f['measured_ms']:.1f} ms, "
            f"예측(겹침 없음) {f['predicted_ms']:.1f} ms = 계산 {f['compute_ms']:.1f} ms + 올리듀스 "
            f"{f['comm_ms']:.1f} ms. 오차 {f['error']:+.0%}로 {verdict}. 완전 겹침을 가정하면 "
            f"{f['overlap_ms']:.1f} ms로 예측합니다. 랭크 하나만 돌 때의 계산 시간은 {f['compute1_ms']:.1f} ms이고, "
            f"이를 {f['world']}로 나눈 이상값보다 실제 랭크당 계산이 {f['contention']:.2f}배 느렸습니다(코어 경합)."
        )
    else:
        verdict = "within 25%" if ok else "outside 25%"
        text = (
            f"Largest model ({f['model']}), world size {f['world']}: measured {f['measured_ms']:.1f} ms, "
            f"predicted (no overlap) {f['predicted_ms']:.1f} ms = compute {f['compute_ms']:.1f} ms + all-reduce "
            f"{f['comm_ms']:.1f} ms. Error {f['error']:+.0%}: {verdict}. Assuming full overlap the model says "
            f"{f['overlap_ms']:.1f} ms. One rank alone computes in {f['compute1_ms']:.1f} ms; per-rank compute "
            f"with {f['world']} ranks ran {f['contention']:.2f}× slower than that divided by {f['world']} "
            f"(core contention)."
        )
    return Markdown(text)


def caveats(name: str, lang: str) -> Markdown:
    """What this run's conditions mean for reading it: machine load, and threads vs ranks on the same cores."""
    res, f = load(name), facts(name)
    env, cores = res["env"], res["env"]["cpus_usable"]
    load_max = max(env["loadavg_start"], env["loadavg_end"])
    out = []
    if env["gpus"]:
        return Markdown("")
    if lang == "ko":
        if load_max > cores:
            out.append(
                f"- 이 실행의 부하(1분 load average)는 최대 {load_max:.1f}, 코어 수({cores})의 {load_max / cores:.1f}배"
                "였습니다. 다른 프로세스가 CPU 시간을 가져가므로 각 행은 서로 다른 순간의 잡음을 품고 있습니다. "
                "p10–p90 폭을 함께 보고, 효율이 100%를 넘는 행처럼 물리적으로 불가능한 값은 잡음으로 읽으세요."
            )
        else:
            out.append(f"- 이 실행의 부하(1분 load average)는 최대 {load_max:.1f}, 코어 수({cores}) 이하였습니다.")
        if f["threads_speedup"] is not None:
            out.append(
                f"- 가장 큰 모델에서 한 프로세스가 스레드 {f['world']}개를 쓰면 스레드 1개일 때의 "
                f"{f['threads_speedup']:.2f}배 속도였고, 같은 코어에서 DDP {f['world']}랭크는 {f['speedup']:.2f}배였습니다."
            )
    else:
        if load_max > cores:
            out.append(
                f"- The load during this run reached {load_max:.1f}, {load_max / cores:.1f}× the core count "
                f"({cores}). Other processes took CPU time, so each row carries noise from a different moment: "
                "read the p10–p90 spread, and take physically impossible values, such as an efficiency above "
                "100%, as noise."
            )
        else:
            out.append(f"- The load during this run stayed at {load_max:.1f}, not above the core count ({cores}).")
        if f["threads_speedup"] is not None:
            out.append(
                f"- On the largest model, one process with {f['world']} threads ran at {f['threads_speedup']:.2f}× "
                f"the 1-thread speed; DDP with {f['world']} ranks on the same cores at {f['speedup']:.2f}×."
            )
    return Markdown("\n".join(out))


def gpu_prediction(name: str, lang: str, world: int = 8) -> Markdown:
    """All-reduce time per step for this page's model sizes on GPU links, from the same formula."""
    t, res = TEXT[lang], load(name)
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

    t, res = TEXT[lang], load(name)
    runs = res["runs"]
    worlds = sorted({r["world_size"] for r in runs if r["mode"] == "DDP"})
    wmax = worlds[-1]
    plt.rcParams.update({"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 10, "svg.hashsalt": "plot"})
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), facecolor="white")
    for width in sorted({r["width"] for r in runs}):
        ddp = sorted((r for r in runs if r["mode"] == "DDP" and r["width"] == width), key=lambda r: r["world_size"])
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

    ddp = sorted((r for r in runs if r["mode"] == "DDP" and r["world_size"] == wmax), key=lambda r: r["grad_mib"])
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
    """A named section of a snippet, addressed like a page include: "snippets/x/y.py:section"."""
    path, _, section = target.partition(":")
    text = (HERE.parents[1] / path).read_text()
    match = re.search(rf"# --8<-- \[start:{section}\]\n(.*?)# --8<-- \[end:{section}\]", text, re.S)
    assert match, f"no section {section!r} in {path}"
    return Markdown(f"```python\n{match.group(1)}```\n\n`{path}`")


if __name__ == "__main__":
    files = sorted(RESULTS.glob("*.json"))
    assert files, "no result files in snippets/benchmark/results/"
    for path in files:
        res = load(path.name)
        for lang in TEXT:
            rows = table(path.name, lang).splitlines()
            assert len(rows) == 2 + len(res["runs"]), "one table row per run"
            assert all(row.count("|") == rows[0].count("|") for row in rows), "ragged table"
            ddp = [r for r in res["runs"] if r["mode"] == "DDP"]
            assert len(model_table(path.name, lang).splitlines()) == 2 + len(ddp)
            assert len(allreduce_table(path.name, lang).splitlines()) == 2 + len(res["allreduce"])
            svg = plot(path.name, lang)
            assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
            assert TEXT[lang]["plot_scaling"] in svg, "labels stay text (the browser renders Hangul)"
            assert "def predict" in source("snippets/benchmark/ddp_benchmark.py:model")
        f = facts(path.name)
        assert caveats(path.name, "ko").count("\n") == caveats(path.name, "en").count("\n")
        assert f["measured_ms"] > 0 and f["predicted_ms"] >= f["compute_ms"] > 0
        assert printed(path.name).strip(), "the printed table is missing"
        print(
            f"{path.name}: {len(res['runs'])} runs, {f['model']} at world {f['world']}: measured "
            f"{f['measured_ms']:.1f} ms, predicted {f['predicted_ms']:.1f} ms ({f['error']:+.0%})"
        )
    print(f"OK: {len(files)} result file(s) render in {', '.join(TEXT)}")
