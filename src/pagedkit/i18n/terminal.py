"""Text for a terminal in either language: its width in columns and its lines.

A terminal gives a wide (Chinese) character two columns, so a line of Chinese
measured with ``len()`` runs to twice the terminal's width. Chinese has no
spaces between words: a line may break between two Chinese characters (not
before a closing mark such as ``，`` or ``）``, not after an opening one), while
an English word, a path or a number is never cut, and a number keeps the word
after it (``25 GB/s``, ``80 个``). `HelpFormatter` wraps every pagedkit command's
``--help`` this way (tests/i18n/test_help_width.py).
"""

from __future__ import annotations

import argparse
import inspect
import re

from . import text_width

#: marks a line does not start with, and marks it does not end with (full-width and ASCII)
NO_START = "，。、；：？！）」』】》〉”’…%)]}.,;:!?"
NO_END = "（「『【《〈“‘([{"

_NUMBER = re.compile(r"[\d.,/×x%]*\d[\d.,/×x%]*")


def _wide(ch: str) -> bool:
    return text_width(ch) == 2


def _pieces(text: str) -> list[tuple[bool, str]]:
    """`text` cut where a line may break: (a space before it, the piece). Whitespace runs
    count as one space; a piece is one English word (path, number with its next word)
    or one Chinese character with the marks that cling to it."""
    pieces: list[tuple[bool, str]] = []
    space = False
    for ch in text:
        if ch.isspace():
            space = bool(pieces)
            continue
        if not pieces:
            pieces.append((False, ch))
        elif space:
            before, last = pieces[-1]
            word = last.rsplit(" ", 1)[-1]
            if _NUMBER.fullmatch(word) and not word.endswith((",", ".")):  # 25 GB/s
                pieces[-1] = (before, f"{last} {ch}")
            else:
                pieces.append((True, ch))
        else:
            before, last = pieces[-1]
            prev = last[-1]
            breaks = ((_wide(prev) or _wide(ch)) and ch not in NO_START and prev not in NO_END)
            if breaks:
                pieces.append((False, ch))
            else:
                pieces[-1] = (before, last + ch)
        space = False
    return pieces


def wrap(text: str, width: int) -> list[str]:
    """`text`'s words in lines of at most `width` columns (`text_width`), whitespace
    runs read as one space; a piece wider than `width` (a long path) gets a line of
    its own rather than being cut."""
    lines: list[str] = []
    line = ""
    for space, piece in _pieces(text):
        joined = line + (" " if space and line else "") + piece
        if line and text_width(joined) > width:
            lines.append(line)
            line = piece
        else:
            line = joined
    if line:
        lines.append(line)
    return lines


def _join(lines: list[str]) -> str:
    """Source lines of one paragraph as one text: a space between them, none between
    two Chinese characters."""
    text = ""
    for line in lines:
        if text and not (_wide(text[-1]) and _wide(line[0])):
            text += " "
        text += line
    return text


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, measured in terminal columns (`text_width`) and wrapped by
    `wrap`: every pagedkit parser's ``formatter_class``. A description or epilog keeps
    its blank lines, and an indented line of it (``  demo   the embedded model ...``)
    stays a line of its own, its continuation lines under its text; other lines of a
    paragraph run together."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        paragraph: list[str] = []

        def flush() -> None:
            if paragraph:
                out.extend(indent + line for line in wrap(_join(paragraph), width - len(indent)))
                paragraph.clear()

        for line in inspect.cleandoc(text).splitlines():
            if not line.strip():
                flush()
                out.append("")
            elif line[0].isspace():  # an item of a list: its own line, hanging indent
                flush()
                term = re.match(r"\s*\S+\s{2,}|\s*", line).group()
                body = wrap(line[len(term):], max(width - len(indent) - len(term), 11))
                out.append(indent + term + body[0])
                out.extend(indent + " " * len(term) + rest for rest in body[1:])
            else:
                paragraph.append(line.strip())
        flush()
        return "\n".join(out)

    def _format_usage(self, usage, actions, groups, prefix) -> str:  # type: ignore[no-untyped-def]
        # argparse lines up the usage's continuation lines by len(prefix): give it a
        # stand-in as wide as the real prefix ("用法：" takes 6 columns, not 3)
        if prefix is None:
            prefix = argparse._("usage: ")
        if usage is not None:  # a parser's own usage line: argparse never wraps it
            usage = usage % {"prog": self._prog}
            start = text_width(prefix) + len(self._prog) + 1
            if usage.startswith(self._prog + " ") and text_width(prefix + usage) > self._width:
                lines = wrap(usage[len(self._prog) + 1:], max(self._width - start, 11))
                usage = self._prog + " " + ("\n" + " " * start).join(lines)
            return f"{prefix}{usage}\n\n"
        stand_in = "\0" * text_width(prefix)
        text = super()._format_usage(usage, actions, groups, stand_in)
        if any(text_width(line) > self._width for line in text.splitlines()):
            text = self._usage_lines(actions, groups, stand_in)
        return text.replace(stand_in, prefix, 1)

    def _usage_lines(self, actions, groups, prefix: str) -> str:  # type: ignore[no-untyped-def]
        """The usage when argparse's lines run past the width (it lines its parts up under
        a long prog, whatever their width): its parts, ``[--model {tiny,larger}]`` each
        whole, filled under the prog where they fit there, else under the prefix."""
        width, self._width = self._width, 10**6
        one = super()._format_usage(None, actions, groups, "").strip()
        self._width = width
        parts = re.findall(r"\(.*?\)+(?=\s|$)|\[.*?\]+(?=\s|$)|\S+", one[len(self._prog):])
        start = len(prefix) + len(self._prog) + 1
        if max(map(text_width, parts), default=0) > width - start:
            start = len(prefix)  # the next lines' parts under the prefix, not the prog
        lines = [prefix + self._prog]
        for part in parts:
            if text_width(lines[-1] + " " + part) <= width:
                lines[-1] += " " + part
            else:
                lines.append(" " * start + part)
        return "\n".join(lines) + "\n\n"
