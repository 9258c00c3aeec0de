"""Label every included example with its file, offer each program whole, and say once how it runs and was verified.

A fenced Python block whose body is only ``--8<--`` includes of one snippet gets the file name as its title. After
the include that shows the last section of a program not shown before on the page (later includes only repeat a
part for comparison), the page offers the program whole: a collapsed "full program" block with the file byte for
byte (copy button, download link to the copy the site serves, the sibling files it imports or runs), then one line
with the launch command, how CI tests it (CPU/gloo, or skipped for lack of GPUs), the torch, backend, device,
ranks and date of its last recorded run, and a link to the source. The facts come from the snippet's own
declarations (guidekit/spec.py) and the committed manifest of recorded runs (guidekit/outputs.py), so the label
cannot drift from what the runner does. The home page's table of examples (``<!-- verified-examples -->``) is
built from the same manifest. Notebook pages get the same blocks at their end.
"""

import posixpath
import re
from pathlib import Path

import markdown as md
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

from guidekit import outputs
from guidekit.pages import LANGS, fences, page_files, page_includes, page_programs, served_path
from guidekit.sections import as_written, parse_target, section_names, target_text
from guidekit.spec import all_snippets, is_snippet, parse_spec, sibling_files

TABLE_PLACEHOLDER = "<!-- verified-examples -->"
FULL = "full-program"  # class of the collapsed block that holds a whole program

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
        "program": "전체 프로그램: `{path}`",
        "helper": "도우미 모듈 전체: `{path}`",
        "download": "`{name}` 내려받기",
        "exact": "테스트가 쓰는 파일과 바이트 단위까지 같습니다.",
        "exact_markers": "테스트가 쓰는 파일과 바이트 단위까지 같습니다(섹션 표시 주석 포함).",
        "needs": {"imports": "{names}를 import", "runs": "{names}를 실행"},
        "needs_join": "하고 ",
        "needs_sentence": "이 프로그램은 같은 폴더의 {parts}합니다. 모두 한 폴더에 내려받아 실행하세요.",
        "helped": "같은 폴더의 {names}가 import하는 도우미 모듈입니다. 혼자서는 실행하지 않습니다.",
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
        "program": "Full program: `{path}`",
        "helper": "Full helper module: `{path}`",
        "download": "download `{name}`",
        "exact": "Byte for byte the file the tests use.",
        "exact_markers": "Byte for byte the file the tests use (section marker comments included).",
        "needs": {"imports": "imports {names}", "runs": "runs {names}"},
        "needs_join": " and ",
        "needs_sentence": "This program {parts} from its own folder: download them into one folder.",
        "helped": "A helper module that {names} in the same folder import; it does not run on its own.",
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


def _names(paths) -> str:
    return ", ".join(f"`{posixpath.basename(p)}`" for p in paths)


def _importers(path: str, root: Path) -> list[str]:
    """The programs in a helper's folder that import it."""
    folder = (root / path).parent
    return [
        p.relative_to(root).as_posix()
        for p in sorted(folder.glob("*.py"))
        if p.name != "conftest.py" and sibling_files(p, root).get(path) == "imports"
    ]


def _block(path: str, lang: str, root: Path, link) -> str:
    """The collapsed block that offers `path` whole: the file byte for byte, download links, what it needs beside it.

    `link(path)` is the address of the site's copy of a file, relative to the page.
    """
    text = TEXT.get(lang, TEXT["en"])
    source = (root / path).read_text(encoding="utf-8")
    needs = sibling_files(root / path, root)
    ticks = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", source)), default=0))
    title = text["program" if is_snippet(root / path) else "helper"].format(path=path)
    lines = [f'??? example {FULL} "{title}"', ""]
    if needs:
        parts = [
            text["needs"][how].format(names=_names(p for p, h in needs.items() if h == how))
            for how in ("imports", "runs")
            if how in needs.values()
        ]
        lines += ["    " + text["needs_sentence"].format(parts=text["needs_join"].join(parts)), ""]
    elif not is_snippet(root / path) and (importers := _importers(path, root)):
        lines += ["    " + text["helped"].format(names=_names(importers)), ""]
    lines.append(f'    {ticks}python title="{path}"')
    lines += [f"    {line}" for line in as_written(source).splitlines()]
    lines += [f"    {ticks}", ""]
    downloads = [
        f"[{text['download'].format(name=posixpath.basename(p))}]({link(p)}){{ download }}" for p in [path, *needs]
    ]
    exact = text["exact_markers" if section_names(source) else "exact"]
    lines.append("    " + " · ".join([*downloads, exact]))
    return "\n".join(lines)


def _offer(path: str, lang: str, root: Path, manifest: dict, blob: str, link, indent: str, whole: bool) -> str:
    """What follows a program's last new include: its full block (unless the include showed the file whole), then
    the note, once per program and page."""
    text = TEXT.get(lang, TEXT["en"])
    parts = []
    if whole:  # the page already shows every byte: only the download link
        link_text = text["download"].format(name=posixpath.basename(path))
        parts.append(f"[{link_text}]({link(path)}){{ download }}")
    else:
        parts.append(_block(path, lang, root, link))
    if is_snippet(root / path):
        parts.append(f"{_note(parse_spec(root / path, root), lang, blob + path, manifest)}\n{{: .snippet-note }}")
    return "".join(f"\n\n{indent}" + part.replace("\n", f"\n{indent}") for part in parts)


def _shown_whole(targets, path: str, root: Path) -> bool:
    """An include of the whole file put every byte of it on the page (a file without section markers)."""
    whole = any(t.section is None and t.path == path for t in targets)
    return whole and target_text(path, root) == (root / path).read_text(encoding="utf-8")


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
    found = []  # (fence, path): includes of one snippet
    for fence in fences(markdown):
        paths = {t.path for t in fence.targets}
        if fence.lang not in ("python", "py") or not fence.is_include or len(paths) != 1 or fence.end_line > len(lines):
            continue  # not an include of one snippet
        file = root / paths.pop()
        if file.suffix != ".py" or not file.is_file():
            continue  # a missing file: check_paths reports it
        found.append((fence, file.relative_to(root).as_posix()))
    # each program is offered whole after the include that shows the last of its sections new to the page
    last_new, seen = {}, set()
    for i, (fence, path) in enumerate(found):
        if {str(t) for t in fence.targets} - seen:
            last_new[path] = i
            seen.update(str(t) for t in fence.targets)
    here = posixpath.dirname(page.file.src_uri)  # MkDocs turns links relative to the source into page URLs

    def link(path: str) -> str:
        return posixpath.relpath(served_path(path).as_posix(), here or ".")

    out, last = [], 0
    for i, (fence, path) in enumerate(found):
        start, end = offsets[fence.line - 1], offsets[fence.end_line] - 1  # the fence, closing line included
        attrs = fence.info[len(fence.info.split()[0]) :]
        if "title=" not in attrs:
            attrs = f'{attrs} title="{path}"'
        opening = f"{fence.indent}{fence.marker}{fence.lang}{attrs}"
        block = "\n".join([opening, *lines[fence.line : fence.end_line]])
        out += [markdown[last:start], block]
        last = end
        if last_new[path] == i:
            after = _annotation_list_end(markdown, end, fence.indent)
            whole = _shown_whole(fence.targets, path, root)
            out += [markdown[end:after], _offer(path, lang, root, manifest, blob, link, fence.indent, whole)]
            last = after
    out.append(markdown[last:])
    return "".join(out)


def on_page_content(html, page, config, files):
    """Keep whole programs out of the search index (their sections are indexed where the page shows them); on a
    notebook page, whose cells the hook cannot reach, offer the programs it shows at its end."""
    if page.file.src_uri.endswith(".ipynb"):
        lang = getattr(page.file, "locale", None) or page.file.src_uri.split("/")[0]
        root = Path(config.config_file_path).parent
        blob = config.get("repo_url", "").rstrip("/") + "/blob/main/"
        manifest = outputs.read_manifest(root)
        name = page.file.src_uri.removeprefix(f"{lang}/")

        def link(path: str) -> str:  # our own Markdown below: relative to the page's URL
            return posixpath.relpath(served_path(path).as_posix(), page.url.rstrip("/") or ".")

        blocks = "".join(
            _offer(p, lang, root, manifest, blob, link, "", False)
            for p in page_programs(lang, name, root / "docs")
            if (root / p).is_file()
        )
        if blocks:
            html += md.Markdown(extensions=config.markdown_extensions, extension_configs=config.mdx_configs).convert(
                blocks
            )
    return html.replace(f'<details class="example {FULL}">', f'<details class="example {FULL}" data-search-exclude>')


@event_priority(-150)  # after static-i18n (-100) has rebuilt the files
def on_files(files, config):
    """Serve every program a page includes, and the files it needs beside it, at their repository paths."""
    root = Path(config.config_file_path).parent
    served = set()
    for lang in LANGS:
        for name in page_files(lang, root / "docs"):
            for path in page_programs(lang, name, root / "docs"):
                if (root / path).is_file():  # a missing file: check_paths reports it
                    served.update([path, *sibling_files(root / path, root)])
    for path in sorted(served):
        files.append(File.generated(config, served_path(path).as_posix(), abs_src_path=str(root / path)))
    return files
