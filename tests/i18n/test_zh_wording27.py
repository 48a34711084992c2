"""Two zh messages that said less or other than their English (newcomer 27, N6).

The widget title's "step 33, the end, holds none" was ``最后一步 33 一个也没有``: one of
what? Now it names the noun, ``一个页块也没有占用``, and the step as a step
(``第 33 步``). Lab 07 exercise 3's hint said the prompt's last block was
``只填了一半`` (exactly half full), which is true only when it happens to be; the
English "half full" means partly full: ``没有填满``. (Failed before: 2 of 2.)"""

from __future__ import annotations

from pagedkit import i18n

TITLE = ("opened on the busiest step ({used} blocks in use); step {last}, the end, holds "
         "none: ◀ ▶ play or drag")
HINT = ("the prompt's last block is half full: each sample writing into it needs its own "
        "copy (copy-on-write)")


def test_the_widget_title_names_what_the_last_step_holds_none_of():
    with i18n.speaking("zh-CN"):
        said = i18n._(TITLE).format(used=12, last=33)
    assert "最后一步（第 33 步）一个页块也没有占用" in said, said
    assert "12 个页块在用" in said


def test_lab07_hint_says_partly_full_not_half():
    with i18n.speaking("zh-CN"):
        said = i18n._(HINT)
    assert "没有填满" in said and "一半" not in said, said
