"""The guide's machinery: what the pages, the programs, the site hooks and the tests share.

Formats (one owner each; no other module parses them):

- `guidekit.spec`: what a program declares about itself (launch, requirements, ranks, timeout, output rules);
- `guidekit.sections`: section markers in programs (``# --8<-- [start:name]``) and what an include shows;
- `guidekit.outputs`: recordings of what programs printed, and the manifest of what they used;
- `guidekit.pages`: where pages live (``docs/<lang>/``), their includes, where they land on the built site, and the
  repository's address (``repo:`` links, from mkdocs.yml's repo_url);
- `guidekit.glossary`: the glossary's table (the terminology test and the search synonyms read it).

The test machinery, registered for every pytest run by the root ``conftest.py``:

- `guidekit.runner`: every program in ``snippets/`` as a test, run as a reader runs it;
- `guidekit.schedule`: how ``pytest -n`` spreads the suite over workers;
- `guidekit.changed`: the per-change lane (``pytest --changed=BASE``, ``make changed``): what a diff can break;
- `guidekit.processes`, `guidekit.machine`, ``guidekit/probe/``: process control, the GPUs, what a run used.

Generators and checks: `guidekit.notebooks` (chapter notebooks), `guidekit.copies` (declared copies of shared code),
`guidekit.errors` (the error index's marks), `guidekit.report` (the performance page's tables and plot),
`guidekit.text` (the site's words per language, from theme/text/), `guidekit.gpu_check` (`make gpu-check`),
`guidekit.gpu_safety` (the programs' GPU-safety checks), `guidekit.terminology` (the glossary's rules in Korean
prose), `guidekit.accessibility` and `guidekit.code_layout` (what the browser measures), `guidekit.markdown` (the
site's Markdown extensions), `guidekit.soak` (`make soak`).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
