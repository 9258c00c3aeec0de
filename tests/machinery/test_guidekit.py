"""Unit tests of guidekit, the one owner of the include syntax, section markers, declarations and page layout."""

import sys
import textwrap
from pathlib import Path, PurePosixPath

import markdown
import pytest

from guidekit import ROOT, copies, outputs
from guidekit.pages import built_path, fences, headings, includes, title_line, url_path
from guidekit.sections import (
    Target,
    as_written,
    include_line,
    include_target,
    parse_target,
    section_names,
    shown_text,
)
from guidekit.spec import free_port, launch_command, launch_env, parse_spec, sibling_files

PROGRAM = textwrap.dedent(
    """\
    import os

    # --8<-- [start:outer]
    def outer():
        # --8<-- [start:inner]
        x = 1
        # --8<-- [end:inner]
        return x


    # --8<-- [end:outer]
    """
)


def test_targets_round_trip():
    assert parse_target("snippets/a.py:train") == Target("snippets/a.py", "train")
    assert parse_target("snippets/a.py") == Target("snippets/a.py", None)
    line = include_line(Target("snippets/a.py", "train"))
    assert line == '--8<-- "snippets/a.py:train"'
    assert include_target("    " + line) == Target("snippets/a.py", "train")
    assert include_target("x = 1  # --8<-- not an include") is None


def test_sections_are_named_in_order():
    assert section_names(PROGRAM) == ["outer", "inner"]


def test_shown_text_drops_markers_and_dedents():
    assert shown_text(PROGRAM, "inner") == "x = 1\n"
    assert shown_text(PROGRAM, "outer") == "def outer():\n    x = 1\n    return x\n"
    assert "--8<--" not in shown_text(PROGRAM)


@pytest.mark.parametrize(
    "source,error",
    [(PROGRAM, "no '# --8<-- [start:missing]'"), ("# --8<-- [start:open]\nx = 1\n", "no '# --8<-- [end:open]'")],
)
def test_a_broken_section_is_an_error(source, error):
    name = "missing" if "missing" in error else "open"
    with pytest.raises(ValueError, match=error.replace("[", r"\[").replace("]", r"\]")):
        shown_text(source, name)


def test_shown_text_is_what_pymdownx_puts_on_the_page(tmp_path):
    """The parser agrees with pymdownx.snippets itself (the site's include engine), section by section."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    md = markdown.Markdown(
        extensions=["pymdownx.snippets"],
        extension_configs={"pymdownx.snippets": {"base_path": [str(tmp_path)], "dedent_subsections": True}},
    )
    for section in ("outer", "inner"):
        lines = md.preprocessors["snippet"].run([f'--8<-- "prog.py:{section}"'])
        assert "\n".join(lines).strip("\n") == shown_text(PROGRAM, section).strip("\n")


PAGE = textwrap.dedent(
    """\
    # Title

    ## Setup { #setup }

    ```python title="x"
    --8<-- "snippets/a.py:setup"
    ```

    !!! note
        ````markdown
        ```python
        --8<-- "snippets/b.py"
        ```
        ````

    ~~~bash
    # not a heading
    torchrun x.py
    ~~~

    ```python
    print("typed code")
    ```
    """
)


def test_fences_and_includes():
    found = fences(PAGE)
    assert [f.lang for f in found] == ["python", "markdown", "bash", "python"]
    assert [f.is_include for f in found] == [True, False, False, False]
    assert found[0].info == 'python title="x"' and found[1].indent == "    "
    # pymdownx.snippets runs before fences are parsed: an include inside any fence is expanded
    assert includes(PAGE) == ["snippets/a.py:setup", "snippets/b.py"]


def test_headings_skip_code_and_read_ids():
    assert headings(PAGE) == [(1, "Title", None), (2, "Setup { #setup }", "setup")]


def test_title_line_is_the_first_h1_outside_code():
    assert title_line(PAGE) == 0
    assert title_line("intro\n\n```bash\n# not a title\n```\n\n# Title\n") == 6
    assert title_line("## only a section\n") is None


@pytest.mark.parametrize(
    "lang,name,path,url",
    [
        ("ko", "index.md", "index.html", ""),
        ("en", "index.md", "en/index.html", "en/"),
        ("ko", "ddp.md", "ddp/index.html", "ddp/"),
        ("en", "practices/index.md", "en/practices/index.html", "en/practices/"),
        ("en", "performance.ipynb", "en/performance/index.html", "en/performance/"),
    ],
)
def test_page_layout(lang, name, path, url):
    assert built_path(lang, name) == PurePosixPath(path)
    assert url_path(lang, name) == url


def declared(tmp_path: Path, header: str):
    path = tmp_path / "snippets" / "x" / "prog.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "\nassert True\n")
    return parse_spec(path, tmp_path)


@pytest.mark.parametrize(
    "header,launch,gpus,world",
    [
        ("", "python snippets/x/prog.py", 0, 1),
        ("# launch: torchrun --standalone --nproc-per-node=4 snippets/x/prog.py", None, 0, 4),
        ("# launch: torchrun --nnodes=2 --nproc_per_node 2 snippets/x/prog.py", None, 0, 4),
        ("# launch: python snippets/x/prog.py\n# ranks: 2\n# requires: gpus=2", None, 2, 2),
        ("# requires: cuda", "python snippets/x/prog.py", 1, 1),
    ],
)
def test_declarations(tmp_path, header, launch, gpus, world):
    spec = declared(tmp_path, header)
    assert spec.command == (launch or header.splitlines()[0].removeprefix("# launch: "))
    assert (spec.gpus, spec.world_size, spec.timeout_s) == (gpus, world, 120)


@pytest.mark.parametrize(
    "header,argv",
    [
        ("", ["snippets/x/prog.py"]),
        ("# launch: torchrun --standalone --nproc-per-node=2 snippets/x/prog.py", None),  # picks its own port
        ("# launch: torchrun --rdzv-endpoint=h:1 --nnodes=2 snippets/x/prog.py", None),  # so does a rendezvous
        ("# launch: torchrun --nnodes=1 --nproc-per-node=2 snippets/x/prog.py", ["--master-port=29999"]),
    ],
)
def test_launch_command_uses_this_interpreter_and_the_given_port(tmp_path, header, argv):
    spec = declared(tmp_path, header)
    command = launch_command(spec, 29999)
    if spec.launch[0] == "python":
        assert command == [sys.executable, *argv]
    else:
        extra = argv or []
        assert command == [sys.executable, "-m", "torch.distributed.run", *extra, *spec.launch[1:]]
    env = launch_env(29999)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["OMP_NUM_THREADS"]) == ("127.0.0.1", "29999", "1")


@pytest.mark.parametrize(
    "header,error",
    [
        ("# launch: python other.py", "must be"),
        ("# requires: tpu", "unknown"),
        ("# launch: torchrun --nproc-per-node=2 snippets/x/prog.py\n# ranks: 2", "for python launches"),
    ],
)
def test_bad_declarations_are_errors(tmp_path, header, error):
    with pytest.raises(ValueError, match=error):
        declared(tmp_path, header)


SETUP = 'def setup() -> torch.device:\n    """Join."""\n    return torch.device("cpu")\n'


def program(root, rel: str, text: str):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_declared_copies_are_checked_and_rewritten(tmp_path):
    join = SETUP.replace("setup", "join")  # no implicit original
    program(tmp_path, "snippets/a/orig.py", "import torch\n\n\n" + join + "\n\n@decorated\ndef main():\n    pass\n")
    body = "# same as snippets/a/orig.py:join\n" + join.replace("Join.", "Joins.")
    body += "\n\n# same as snippets/a/orig.py:main\n@decorated\ndef main():\n    return 1\n\n\nassert True\n"
    copy = program(tmp_path, "snippets/x/copy.py", "import torch\n\n\n" + body)
    assert copies.problems(tmp_path) == [
        "snippets/x/copy.py:5: differs from snippets/a/orig.py:join",
        "snippets/x/copy.py:11: differs from snippets/a/orig.py:main",
    ]
    assert copies.rewrite(tmp_path) == ["snippets/x/copy.py"]
    assert copies.problems(tmp_path) == []
    text = copy.read_text()
    assert join in text and text.endswith("orig.py:main\n@decorated\ndef main():\n    pass\n\n\nassert True\n")


def test_a_declaration_needs_an_original_that_is_no_copy(tmp_path):
    program(tmp_path, "snippets/a/orig.py", "def f():\n    pass\n")
    program(tmp_path, "snippets/a/second.py", "# same as snippets/a/orig.py:f\ndef f():\n    pass\n")
    program(tmp_path, "snippets/x/gone.py", "# same as snippets/a/orig.py:g\ndef g():\n    pass\n")
    program(tmp_path, "snippets/x/chain.py", "# same as snippets/a/second.py:f\ndef f():\n    pass\n")
    program(tmp_path, "snippets/x/loose.py", "# same as snippets/a/orig.py:f\n\ndef f():\n    pass\n")
    assert copies.problems(tmp_path) == [
        "snippets/x/loose.py:1: a '# same as' line must stand right above a top-level def or class",
        "snippets/x/chain.py:2: copies snippets/a/second.py:f, itself a copy: name its original",
        "snippets/x/gone.py:2: copies snippets/a/orig.py:g, which does not exist",
    ]
    assert copies.rewrite(tmp_path) == []  # nothing it can mend


def test_an_undeclared_setup_is_compared_and_declared(tmp_path):
    program(tmp_path, copies.IMPLICIT[SETUP.splitlines()[0]].partition(":")[0], "import torch\n\n\n" + SETUP)
    same = program(tmp_path, "snippets/x/same.py", "import torch\n\n\n" + SETUP)
    program(tmp_path, "snippets/x/drift.py", "import torch\n\n\n" + SETUP.replace("cpu", "cuda"))
    assert copies.problems(tmp_path) == [
        "snippets/x/drift.py:4: differs from snippets/ddp/train_torchrun.py:setup",
        "snippets/x/drift.py:4: a copy of snippets/ddp/train_torchrun.py:setup without "
        "'# same as snippets/ddp/train_torchrun.py:setup' above it",
        "snippets/x/same.py:4: a copy of snippets/ddp/train_torchrun.py:setup without "
        "'# same as snippets/ddp/train_torchrun.py:setup' above it",
    ]
    assert copies.rewrite(tmp_path) == ["snippets/x/drift.py", "snippets/x/same.py"]
    assert copies.problems(tmp_path) == []
    assert same.read_text() == "import torch\n\n\n# same as snippets/ddp/train_torchrun.py:setup\n" + SETUP


# Recorded outputs: ordering, masking, excerpts, comparison.
RANKS_PRINT = "table head\nrank 1: done in 3.2 s\nrank 0: done in 2.9 s\nport 41233 closed\n"


def rules_of(tmp_path, header: str):
    return declared(tmp_path, header).output


def test_output_rules_default_to_an_exact_match(tmp_path):
    rules = rules_of(tmp_path, "# launch: python snippets/x/prog.py")
    assert outputs.difference(outputs.recording_text(RANKS_PRINT, rules), RANKS_PRINT, rules) == ""
    swapped = RANKS_PRINT.replace("rank 1", "rank 9")
    assert "-rank 1: done in 3.2 s" in outputs.difference(RANKS_PRINT, swapped, rules)


def test_varying_parts_are_masked_and_nothing_else(tmp_path):
    rules = rules_of(tmp_path, "# output-varies: in (\\S+) s\n# output-varies: ^port \\d+")
    recorded = outputs.recording_text(RANKS_PRINT, rules)
    assert recorded == RANKS_PRINT
    other_run = "table head\nrank 1: done in 0.1 s\nrank 0: done in 7.0 s\nport 5 closed\n"
    assert outputs.difference(recorded, other_run, rules) == ""
    assert outputs.normalised(["rank 0: done in 7.0 s"], rules) == [f"rank 0: done in {outputs.VARIES} s"]
    assert outputs.difference(recorded, other_run.replace("done", "ended"), rules)  # unmasked words still count
    reordered = "table head\nrank 0: done in 0.1 s\nrank 1: done in 7.0 s\nport 5 closed\n"
    assert outputs.difference(recorded, reordered, rules)  # the order printed is part of the output


def test_excerpts_become_sections_a_page_can_include(tmp_path):
    rules = rules_of(tmp_path, "# output-excerpt: ranks ^rank")
    recorded = outputs.recording_text(RANKS_PRINT, rules)
    assert shown_text(recorded, "ranks") == "rank 1: done in 3.2 s\nrank 0: done in 2.9 s\n"
    assert shown_text(recorded) == RANKS_PRINT  # the whole recording shows no marker
    assert outputs.difference(recorded, RANKS_PRINT, rules) == ""
    with pytest.raises(ValueError, match="no printed line matches"):
        outputs.recording_text("nothing here\n", rules)


@pytest.mark.parametrize(
    "header,error",
    [("# output-excerpt: ^rank", "must be '<name> <regex>'"), ("# output-excerpt: ranks", "must be '<name> <regex>'")],
)
def test_bad_output_declarations_are_errors(tmp_path, header, error):
    with pytest.raises(ValueError, match=error):
        declared(tmp_path, header)


def test_recordings_live_under_their_platform(tmp_path):
    path = outputs.recording_path("snippets/ddp/train.py", "cpu", tmp_path)
    assert path == tmp_path / "recordings/cpu/ddp/train.txt"
    assert outputs.snippet_of(path, tmp_path) == "snippets/ddp/train.py"


def test_the_manifest_merges_one_line_per_snippet(tmp_path):
    entry = {"outcome": "passed", "torch": "2.14.1", "backend": "gloo", "device": "CPU", "ranks": 2, "date": "x"}
    outputs.write_manifest({"cpu": {"snippets/b.py": entry}}, tmp_path)
    outputs.write_manifest({"cpu": {"snippets/a.py": {**entry, "ranks": 1}}}, tmp_path)
    manifest = outputs.read_manifest(tmp_path)
    assert list(manifest["cpu"]) == ["snippets/a.py", "snippets/b.py"] and manifest["cuda"] == {}
    text = (tmp_path / "recordings/manifest.json").read_text()
    assert sum('"snippets/' in line for line in text.splitlines()) == 2


def test_as_written_survives_the_include_engine():
    """pymdownx.snippets reads every page line: escaped, markers and include lines come out as written."""
    source = (
        '"""x"""\n# --8<-- [start:a]\nx = 1  # --8<-- [end:a] trailing\n    # ;--8<-- [start:b]\n'
        '--8<-- "snippets/none.py"\n--8<--\n'
    )
    md = markdown.Markdown(extensions=["pymdownx.snippets"], extension_configs={"pymdownx.snippets": {}})
    assert "\n".join(md.preprocessors["snippet"].run(as_written(source).splitlines())) + "\n" == source


def test_sibling_files_are_found():
    assert sibling_files(ROOT / "snippets/ddp/train_spawn.py") == {"snippets/ddp/train_torchrun.py": "imports"}
    assert sibling_files(ROOT / "snippets/launch/two_nodes.py") == {
        "snippets/launch/_procs.py": "imports",
        "snippets/launch/env_vars.py": "runs",  # started by path, not imported
    }
    assert sibling_files(ROOT / "snippets/ddp/train_torchrun.py") == {}


@pytest.mark.parametrize("worker", ["gw0", "gw5"])
def test_free_ports_lie_in_the_workers_block_below_the_ephemeral_range(monkeypatch, worker):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    first = 20000 + int(worker.removeprefix("gw")) * 1000
    assert first <= free_port() < first + 1000 < 32768
