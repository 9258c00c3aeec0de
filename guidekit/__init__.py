"""The contract between the pages and the programs they show.

One owner for every format that pages, snippets, the site hooks and the tests share:

- `guidekit.spec`: what a snippet declares about itself (launch, requirements, ranks, timeout);
- `guidekit.includes`: the include syntax pages use (``--8<-- "path:section"``), section markers in snippets
  (``# --8<-- [start:name]``) and Markdown fences;
- `guidekit.layout`: where pages live (``docs/<lang>/``) and where they land on the built site.

No other module parses an include, a section marker or a declaration.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
