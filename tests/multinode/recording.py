"""What the multi-node tests' programs printed, as the pages show it: recordings/multinode/<name>.txt.

A page includes a recording (`--8<-- "recordings/multinode/<name>.txt"`); the test that made it compares every later
run with it, the same way the snippet runner compares a snippet's output (guidekit.outputs), so a page never shows
output its command no longer prints. `--record-output` (the runner's switch, `make multinode ARGS=--record-output`)
writes the recordings anew; the `recording` fixture (conftest.py) passes it on.
"""

import re

from guidekit import ROOT, outputs

RECORDED = ROOT / outputs.MULTINODE
TRAIN_LINES = r"^(?:epoch \d: .*|\d+ ranks on .*)$"  # what train_torchrun.py's rank 0 prints


def matches_recording(name: str, lines: list[str], varies: str | None = None, record: bool = False) -> None:
    """`lines` equal recordings/multinode/<name>.txt, where the regex `varies` (its groups, or the whole match) may
    differ; `record` writes the file instead."""
    text, path = "".join(line + "\n" for line in lines), RECORDED / f"{name}.txt"
    if record:
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: --record-output records it"
    rules = outputs.OutputRules(varies=(re.compile(varies),) if varies else ())
    diff = outputs.difference(path.read_text(encoding="utf-8"), text, rules)
    assert not diff, f"the output is not {path} any more:\n{diff}"
