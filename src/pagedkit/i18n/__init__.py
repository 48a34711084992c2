"""What pagedkit says to a learner, in the learner's language.

``pagedkit.set_language("zh-CN")`` (one call at the top of a notebook) makes
the package's messages — exercise checks and hints, widget titles and
legends, the simulator's report — come out in Simplified Chinese; English is
the default and the source. The route is the standard one: messages are
marked ``_("...")`` where they are made (at call time, so switching the
language takes effect at once), Babel extracts them into
``locale/pagedkit.pot``, translators fill ``locale/<lang>/LC_MESSAGES/pagedkit.po``
and Babel compiles the ``.mo`` file that Python's `gettext` reads.
"""

from __future__ import annotations

import gettext
import os
import sys
import unicodedata
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

LANGUAGES = ("en", "zh-CN")
"""The languages pagedkit speaks: English (the source) and Simplified Chinese."""

LOCALE_DIR = Path(__file__).parent / "locale"
DOMAIN = "pagedkit"

_state = {"language": "en", "translations": gettext.NullTranslations()}


def _gettext_name(language: str) -> str:
    """``zh-CN`` (the tag the labs use) as gettext names it: ``zh_CN``."""
    return language.replace("-", "_")


def language_tag(name: object) -> str | None:
    """The one of `LANGUAGES` that `name` names, as pagedkit spells it (``"zh-CN"``),
    else None. The one rule for a language's name everywhere (`set_language`,
    ``PAGEDKIT_LANGUAGE``, ``lab --lang``): case, surrounding spaces and ``-`` or
    ``_`` between its parts aside (``zh-cn``, ``ZH-CN``, ``zh_CN`` are ``zh-CN``)."""
    if not isinstance(name, str):
        return None
    return {tag.lower(): tag for tag in LANGUAGES}.get(name.strip().lower().replace("_", "-"))


def set_language(language: str) -> None:
    """Speak `language` from now on: one of `LANGUAGES` ("en" or "zh-CN"), named
    as `language_tag` reads it (``"zh-cn"`` and ``"zh_CN"`` too).

    Raises ValueError for any other value and FileNotFoundError when the
    compiled catalog of a known language is missing (an installation without
    its ``.mo`` file); in both cases the current language stays.
    """
    tag = language_tag(language)
    if tag is None:
        raise ValueError(
            f"language {language!r} is not one pagedkit speaks; choose one of "
            f"{', '.join(map(repr, LANGUAGES))} (case and - or _ aside)")
    language = tag
    if language == "en":
        translations: gettext.NullTranslations = gettext.NullTranslations()
    else:
        translations = gettext.translation(
            DOMAIN, localedir=LOCALE_DIR, languages=[_gettext_name(language)])
    _state.update(language=language, translations=translations)


@contextmanager
def speaking(language: str) -> Iterator[None]:
    """Speak `language` inside a ``with`` block (a command whose own option names
    the language: ``lab --lang zh-CN``), then the language spoken before."""
    before = get_language()
    set_language(language)
    try:
        yield
    finally:
        set_language(before)


def language_from_environment(variable: str = "PAGEDKIT_LANGUAGE") -> None:
    """Speak the language named by the environment variable `variable`, if set
    (``PAGEDKIT_LANGUAGE=zh-CN pagedkit --help``): for the command line, which
    has no notebook cell to call `set_language` from. Unset or empty: no change."""
    value = os.environ.get(variable, "")
    if not value:
        return
    try:
        set_language(value)
    except ValueError:
        raise ValueError(f"{variable}={value!r} is not a language pagedkit speaks; set it to "
                         f"one of {', '.join(map(repr, LANGUAGES))}, or unset it") from None


def command_language(prog: str) -> bool:
    """A command's first step (`pagedkit`'s, the build track's): speak
    `PAGEDKIT_LANGUAGE`'s language (`language_from_environment`). False for a
    bad value, said on stderr naming the command (the command then exits
    with status 2, no traceback)."""
    try:
        language_from_environment()
    except ValueError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return False
    return True


def get_language() -> str:
    """The language pagedkit speaks now ("en" unless `set_language` changed it), as
    `LANGUAGES` spells it."""
    return _state["language"]


def _(message: str) -> str:
    """`message` in the current language (itself in English or when untranslated)."""
    return _state["translations"].gettext(message)


def N_(message: str) -> str:
    """Mark `message` for translation without translating it (yet): for a
    message made once at import time, which `_` translates where it is shown."""
    return message


#: argparse's own words (its usage line, section titles, usage errors), marked here
#: for the catalog: argparse translates them with its module's ``_``, which
#: `argparse_speaking` points at pagedkit's catalog while a command runs. Every
#: ``_("...")`` of argparse's source (tests/i18n/test_cli_words.py holds this to it);
#: its two plurals are in `argparse_plurals`.
ARGPARSE_MESSAGES = (
    N_("usage: "), N_("options"), N_("positional arguments"),
    N_("show this help message and exit"), N_("%(prog)s: error: %(message)s\n"),
    N_("the following arguments are required: %s"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("argument %(argument_name)s: %(message)s"), N_("invalid %(type)s value: %(value)r"),
    N_("expected one argument"), N_("expected at least one argument"),
    N_("expected at most one argument"), N_("unrecognized arguments: %s"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("not allowed with argument %s"), N_("one of the arguments %s is required"),
    N_("ignored explicit argument %r"), N_("can't open '%(filename)s': %(error)s"),
    N_('argument "-" with mode %r'), N_("unexpected option string: %s"),
    N_("unknown parser %(parser_name)r (choices: %(choices)s)"),
    N_("%r is not callable"), N_("'required' is an invalid argument for positionals"),
    N_(".__call__() not defined"), N_("cannot have multiple subparser arguments"),
    N_("cannot merge actions - two groups are named %r"),
    N_("conflicting subparser alias: %s"), N_("conflicting subparser: %s"),
    N_("dest= is required for options like %r"), N_("invalid conflict_resolution value: %r"),
    N_("invalid option string %(option)r: must start with a character %(prefix_chars)r"),
    N_("mutually exclusive arguments must be optional"),
)


def argparse_plurals(n: int) -> list[str]:
    """argparse's two messages with a plural, for `n` (marked for the catalog by
    these calls; see `ARGPARSE_MESSAGES`)."""
    return [ngettext("expected %s argument", "expected %s arguments", n),
            ngettext("conflicting option string: %s", "conflicting option strings: %s", n)]


@contextmanager
def argparse_speaking() -> Iterator[None]:
    """argparse's own words (``usage:``, ``options``, ``error:``, ``the following
    arguments are required``) in the language of the moment inside the block (the
    command line's run), then gettext's again. argparse looks up its module's ``_``
    and ``ngettext`` each time it says something; this points them at pagedkit's."""
    import argparse

    before = argparse._, argparse.ngettext
    argparse._, argparse.ngettext = _, ngettext
    try:
        yield
    finally:
        argparse._, argparse.ngettext = before


def english_error(parser, message: str) -> NoReturn:  # type: ignore[no-untyped-def]
    """``parser.error(message)`` for an English `message` (a command whose messages are
    English, docs/i18n.md: demo, bench, vllm; the package's own English errors): all of
    it in English, its usage line and ``error:`` too, so that no line runs from a Chinese
    ``错误：`` into an English sentence. Exits (status 2), as `parser.error` does."""
    with speaking("en"):
        parser.error(message)


def join_clauses(clauses: Iterable[str]) -> str:
    """Clauses of one sentence joined as the current language joins them: ``"; "``
    in English, a full-width ``"；"`` in Chinese (docs/i18n.md's punctuation)."""
    return _("; ").join(clauses)


def join_names(names: Iterable[object]) -> str:
    """Names listed as the current language lists them: ``"0, 2"`` in English,
    ``"0、2"`` in Chinese (an enumeration comma, docs/i18n.md's punctuation)."""
    return _(", ").join(map(str, names))


def text_width(text: str) -> int:
    """Columns `text` takes in a terminal or a notebook's output: a wide (Chinese)
    character takes two, so a table's columns line up in both languages."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def aligned(rows: Iterable[Sequence[str]], right: Collection[int] = (), *,
            rule: bool = False) -> str:
    """`rows` of cells as the lines of a table whose columns line up in both
    languages: each column as wide as its widest cell by `text_width`, two spaces
    apart, its cells flush left, or flush right where its index is in `right`
    (numbers). A header is a row like the others (or two rows: two lines);
    `rule`: a line of dashes under the first row, as wide as each column."""
    rows = [list(row) for row in rows]
    if any(len(row) != len(rows[0]) for row in rows):
        raise ValueError(f"aligned: rows of {sorted({len(row) for row in rows})} cells; "
                         "give every row the same number of cells")
    widths = [max(text_width(row[i]) for row in rows) for i in range(len(rows[0]))]
    if rule:
        rows.insert(1, ["-" * w for w in widths])

    def padded(i: int, cell: str) -> str:
        gap = " " * (widths[i] - text_width(cell))
        return gap + cell if i in right else cell + gap

    return "\n".join("  ".join(padded(i, cell) for i, cell in enumerate(row)).rstrip()
                     for row in rows)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form for `n`, in the current language."""
    return _state["translations"].ngettext(singular, plural, n)


def counted(count: int, noun: str) -> str:
    """``"1 token"``, ``"3 blocks"``: a count of one of the things pagedkit counts
    ("token", "slot", "block"), in the current language (as `plural` in English)."""
    forms = {"token": ngettext("{n} token", "{n} tokens", count),
             "slot": ngettext("{n} slot", "{n} slots", count),
             "block": ngettext("{n} block", "{n} blocks", count)}
    if noun not in forms:
        raise ValueError(f"counted: no message for {noun!r}; one of {', '.join(forms)}")
    return forms[noun].format(n=count)
