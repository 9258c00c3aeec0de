"""The site serves, at their repository paths, every file a page offers for download: each program a page includes
and the files it needs beside it (``snippets/x/y.py``), and each chapter notebook (``notebooks/<lang>/<chapter>.ipynb``).
One copy for both languages, linked from the pages of each."""

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

from guidekit import notebooks
from guidekit.pages import LANGS, page_files, page_programs, served_path
from guidekit.spec import sibling_files


def programs(root: Path) -> list[str]:
    served = set()
    for lang in LANGS:
        for name in page_files(lang, root / "docs"):
            for path in page_programs(lang, name, root / "docs"):
                if (root / path).is_file():  # a missing file: check_paths reports it
                    served.update([path, *sibling_files(root / path, root)])
    return sorted(served)


# after static-i18n (-100) has rebuilt the files, and after i18n_notebooks (-150) wrapped the pages' notebooks: the
# chapter notebooks stay static files
@event_priority(-200)
def on_files(files, config):
    root = Path(config.config_file_path).parent
    for path in [*programs(root), *sorted(set(notebooks.chapters(root).values()))]:
        files.append(File.generated(config, served_path(path).as_posix(), abs_src_path=str(root / path)))
    return files
