"""The site's text catalogue (theme/text/<lang>.yml, read by guidekit.text): every language says the same things."""

import string

import pytest

from guidekit.pages import LANGS
from guidekit.text import catalogue_path, text


def leaves(tree, prefix=""):
    """(dotted key, value) of every string in a catalogue; list items keyed by their index."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, dict | list):
            yield from leaves(value, f"{name}.")
        else:
            yield name, value


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.parametrize("lang", LANGS)
def test_a_catalogue_per_language(lang):
    assert catalogue_path(lang).is_file()


def test_languages_have_the_same_keys():
    keys = {lang: dict(leaves(text(lang))) for lang in LANGS}
    first, *others = LANGS
    for lang in others:
        assert keys[lang].keys() == keys[first].keys(), (
            f"only in {first}: {sorted(keys[first].keys() - keys[lang].keys())}; "
            f"only in {lang}: {sorted(keys[lang].keys() - keys[first].keys())}"
        )


@pytest.mark.parametrize("lang", LANGS)
def test_no_value_is_empty(lang):
    for key, value in leaves(text(lang)):
        assert isinstance(value, str), f"{lang}: {key} is not a string: {value!r}"
        assert value.strip(), f"{lang}: {key} is empty"


def test_languages_fill_in_the_same_names():
    """A template names the same fields in every language, so the code fills in every language alike."""
    values = {lang: dict(leaves(text(lang))) for lang in LANGS}
    first, *others = LANGS
    for key, value in values[first].items():
        for lang in others:
            assert fields(values[lang][key]) == fields(value), f"{key}: {lang} and {first} name different fields"
