"""Label every included example with its file, how to run it, how the test suite runs it and what it last ran on.

A fenced Python block whose body is only ``--8<--`` includes of one snippet gets the file name as its
title and, under it, a line with the launch command, how CI tests it (CPU/gloo, or skipped for lack of
GPUs), the torch, backend, device, ranks and date of its last recorded run, and a link to the source. The facts
come from the snippet's own declarations (guidekit/spec.py) and the committed manifest of recorded runs
(guidekit/outputs.py), so the label cannot drift from what the runner does. The home page's table of examples
(``<!-- verified-examples -->``) is built from the same manifest.
"""

import re
from pathlib import Path

from guidekit import outputs
from guidekit.pages import fences, page_files, page_includes
from guidekit.sections import parse_target
from guidekit.spec import all_snippets, parse_spec

TABLE_PLACEHOLDER = "<!-- verified-examples -->"

TEXT = {
    "ko": {
        "cpu": "CI(GPU 없음)에서 CPU로 실행해 assert로 검증, GPU가 있으면 GPU에서 실행",
        "ranks": "CI에서 CPU·gloo로 랭크 {n}개를 띄워 assert로 검증, GPU 서버에서는 같은 코드가 NCCL로 실행",
        "gpu": "CUDA GPU {gpus}개 이상 필요: GPU가 없는 CI에서는 이유를 밝히고 건너뛰며, GPU 서버의 `pytest snippets`에서 실행",
        "source": "소스",
        "tested": "테스트",
        "verified": "검증",
        "run": "torch {torch} · {where} · {ranks} · {date}",
        "where": {"gloo": "CPU에서 gloo", "nccl": "{device}에서 NCCL"},
        "rank_count": "랭크 {n}개",
        "process": "프로세스 1개",
        "no_gpu_run": "GPU에서는 아직 실행된 적 없음",
        "never": "아직 기록된 실행 없음",
        "table": ["예제", "CPU · gloo", "GPU · NCCL"],
        "skipped": "GPU 필요",
        "not_yet": "아직 없음",
    },
    "en": {
        "cpu": "run and checked by its asserts in CI on CPU (no GPU); uses a GPU where there is one",
        "ranks": "run with {n} ranks on CPU with gloo in CI and checked by its asserts; the same code runs with NCCL on GPUs",
        "gpu": "needs {gpus} CUDA GPU(s): skipped with its reason in CI (no GPU), run by `pytest snippets` on a GPU box",
        "source": "source",
        "tested": "tested",
        "verified": "verified",
        "run": "torch {torch} · {where} · {ranks} · {date}",
        "where": {"gloo": "gloo on CPU", "nccl": "NCCL on {device}"},
        "rank_count": "{n} ranks",
        "process": "1 process",
        "no_gpu_run": "never run on a GPU yet",
        "never": "no recorded run yet",
        "table": ["Example", "CPU · gloo", "GPU · NCCL"],
        "skipped": "needs GPUs",
        "not_yet": "not yet",
    },
}


def _run(entry: dict, text: dict) -> str:
    """One recorded run, e.g. 'torch 2.14.1 · gloo on CPU · 2 ranks · 2026-12-03'."""
    ranks = text["rank_count"].format(n=entry["ranks"]) if entry["ranks"] > 1 else text["process"]
    where = text["where"][entry["backend"]].format(device=entry["device"])
    return text["run"].format(torch=entry["torch"], where=where, ranks=ranks, date=entry["date"])


def _passed(manifest: dict, platform: str, path: str) -> dict | None:
    entry = manifest[platform].get(path)
    return entry if entry and entry["outcome"] == "passed" else None


def _verified(spec, manifest: dict, text: dict) -> str:
    runs = [_run(entry, text) for p in outputs.PLATFORMS if (entry := _passed(manifest, p, spec.path))]
    if spec.gpus and not _passed(manifest, "cuda", spec.path):
        runs.append(text["no_gpu_run"])
    return "; ".join(runs) or text["never"]


def _note(spec, lang: str, source_url: str, manifest: dict) -> str:
    text = TEXT.get(lang, TEXT["en"])
    if spec.gpus:
        how = text["gpu"].format(gpus=spec.gpus)
    elif spec.world_size > 1:
        how = text["ranks"].format(n=spec.world_size)
    else:
        how = text["cpu"]
    verified = _verified(spec, manifest, text)
    return f"`{spec.command}` · {text['tested']}: {how} · {text['verified']}: {verified} · [{text['source']}]({source_url})"


def _table(lang: str, root: Path, manifest: dict) -> str:
    """Every example x (CPU/gloo, GPU/NCCL): the torch and date of its last recorded run, linked to its page."""
    text = TEXT.get(lang, TEXT["en"])
    shown: dict[str, str] = {}
    for name in sorted(page_files(lang, root / "docs")):
        for target in page_includes(lang, name, root / "docs"):
            shown.setdefault(parse_target(target).path, name)

    def cell(platform: str, path: str) -> str:
        if entry := _passed(manifest, platform, path):
            return f"{entry['torch']} · {entry['date']}"
        return text["skipped"] if path in manifest[platform] else text["not_yet"]

    rows = [f"| {' | '.join(text['table'])} |", "|---|---|---|"]
    for snippet in all_snippets(root):
        path = snippet.relative_to(root).as_posix()
        label = f"[`{path.removeprefix('snippets/')}`]({shown[path]})" if path in shown else f"`{path}`"
        rows.append(f"| {label} | {cell('cpu', path)} | {cell('cuda', path)} |")
    return "\n".join(rows)


ANNOTATION_ITEM = re.compile(r"(?P<indent>[ \t]*)\d+\.\s")


def _annotation_list_end(markdown: str, pos: int, indent: str) -> int:
    """Where a code block's annotation list (a numbered list right after it) ends; pos if there is none.

    Material binds a list to the code block only when the list follows it directly, so the note goes after.
    """
    lines = markdown[pos:].split("\n")
    i = 1 if lines and lines[0] == "" else 0  # rest of the closing fence's line
    while i < len(lines) and not lines[i].strip():
        i += 1
    item = ANNOTATION_ITEM.match(lines[i]) if i < len(lines) else None
    if not item or item["indent"] != indent:
        return pos
    end = i
    for j in range(i, len(lines)):
        line = lines[j]
        if not line.strip():
            continue
        inside = (ANNOTATION_ITEM.match(line) and ANNOTATION_ITEM.match(line)["indent"] == indent) or (
            line.startswith(indent + "    ")
        )
        if not inside:
            break
        end = j
    return pos + len("\n".join(lines[: end + 1]))


def on_page_markdown(markdown, page, config, files):
    lang = getattr(page.file, "locale", None) or config["theme"]["language"]
    root = Path(config.config_file_path).parent  # snippets are read from the repository being built
    blob = config.get("repo_url", "").rstrip("/") + "/blob/main/"
    manifest = outputs.read_manifest(root)
    if TABLE_PLACEHOLDER in markdown:
        markdown = markdown.replace(TABLE_PLACEHOLDER, _table(lang, root, manifest))
    lines = markdown.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    out, last = [], 0
    for fence in fences(markdown):
        paths = {t.path for t in fence.targets}
        if fence.lang not in ("python", "py") or not fence.is_include or len(paths) != 1 or fence.end_line > len(lines):
            continue  # not an include of one snippet
        file = root / paths.pop()
        if file.suffix != ".py" or not file.is_file():
            continue  # a missing file: check_paths reports it
        path = file.relative_to(root).as_posix()
        spec = parse_spec(file, root)
        start, end = offsets[fence.line - 1], offsets[fence.end_line] - 1  # the fence, closing line included
        attrs = fence.info[len(fence.info.split()[0]) :]
        if "title=" not in attrs:
            attrs = f'{attrs} title="{path}"'
        opening = f"{fence.indent}{fence.marker}{fence.lang}{attrs}"
        block = "\n".join([opening, *lines[fence.line : fence.end_line]])
        after = _annotation_list_end(markdown, end, fence.indent)
        note = f"\n\n{fence.indent}{_note(spec, lang, blob + path, manifest)}\n{fence.indent}{{: .snippet-note }}"
        out += [markdown[last:start], block, markdown[end:after], note]
        last = after
    out.append(markdown[last:])
    return "".join(out)
