"""Every word a widget shows comes out in Chinese after ``set_language("zh-CN")``
(docs/i18n.md: a widget's title, legend, hover texts and controls), newcomer 8
finding 10: the page table's axis labels "logical blocks" / "physical blocks",
its dropdown's "oldest" and the timeline's legend entry "now" stayed English.

The test walks every step of real recordings (an engine that shares, copies
on write, caches, swaps and preempts; a sliding window; a contiguous-vs-paged
replay per policy), with every sequence chosen in the page table, and reads
back what a learner can see: titles, axis titles and tick labels, subplot
titles, legend entries, hover texts and templates, trace texts, and the
controls' descriptions, tooltips and option labels. A trace's name counts
where plotly shows it: in the legend, or in a hover that does not hide it."""

from __future__ import annotations

import re

import pytest
from viz_helpers import admit, step, tiny_llama

import pagedkit
from pagedkit.memory import KVCacheManager
from pagedkit.sim import TraceRequest
from pagedkit.viz import ContiguousVsPaged, Dashboard, PageTable, Recorder, replay
from pagedkit.viz.page_table_view import _OLDEST

#: Latin words the Chinese edition keeps (its glossary: "token", "prompt", GPU/CPU, KV, KV Cache),
#: the names of the contiguous policies, which are data, and of the two systems
KEPT = {"token", "prompt", "GPU", "CPU", "cpu", "KV", "Cache", "max", "oracle", "vLLM", "pagedkit"}
#: a word of two or more letters, not part of an identifier with digits (r1, L0, pow2)
WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z-]+(?![A-Za-z0-9_])")


def english_words(text: str) -> list[str]:
    plain = re.sub(r"<[^>]+>|%\{[^}]*\}", " ", text)  # markup and plotly's placeholders
    return [w for w in WORD.findall(plain) if w not in KEPT]


def _texts(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in (value or ()) if isinstance(v, str)]


def figure_strings(fig) -> list[tuple[str, str]]:
    """What a learner can read in a plotly figure."""
    d = fig.to_plotly_json()
    layout = d["layout"]
    found = [("title", (layout.get("title") or {}).get("text") or "")]
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")):
            found.append((f"{key} title", (axis.get("title") or {}).get("text") or ""))
            found += [(f"{key} tick", t) for t in _texts(axis.get("ticktext"))]
    found += [("annotation", a.get("text") or "") for a in layout.get("annotations") or ()]
    legend = layout.get("showlegend") is not False
    for t in d["data"]:
        hover = t.get("hoverinfo") not in ("skip", "none")
        template = t.get("hovertemplate") or ""
        in_legend = legend and t.get("showlegend") is not False
        if in_legend or (hover and "<extra></extra>" not in template):
            found.append(("trace name", t.get("name") or ""))
        if hover:
            found += [("hover template", s) for s in _texts(template)]
            found += [("hover text", s) for s in _texts(t.get("hovertext"))]
        if "text" in (t.get("mode") or "") or t.get("type") == "bar":
            found += [("trace text", s) for s in _texts(t.get("text"))]
    return found


def control_strings(widget) -> list[tuple[str, str]]:
    """What a learner can read on the controls: descriptions, tooltips, option labels."""
    import ipywidgets as w

    found = []
    for attr in ("description", "tooltip", "placeholder"):
        found.append((attr, getattr(widget, attr, None) or ""))
    if isinstance(widget, (w.Dropdown, w.Select, w.ToggleButtons, w.RadioButtons)):
        found += [("option", label) for label in widget._options_labels]
    if isinstance(widget, (w.Label, w.HTML)):
        found.append(("label", widget.value))
    for child in getattr(widget, "children", ()):
        found += control_strings(child)
    return found


def every_view_shown():
    """Yield (what, strings) for every step of every view of every recording."""
    from pagedkit import LLM, SamplingParams

    llm = LLM(tiny_llama(), num_blocks=12, block_size=4, preemption_mode="swap",
              enable_prefix_caching=True)
    dash = Dashboard(llm)
    llm.generate([[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12], [1, 2, 3, 4, 5, 6, 7, 8, 9]],
                 SamplingParams(max_tokens=10, n=2, temperature=0.8, seed=7), use_tqdm=False)
    recorder = dash.recorder
    assert any(f.memory.swapped for f in recorder) and any(f.copies for f in recorder)
    assert any(f.memory.cached for f in recorder) and sum(f.preemptions for f in recorder)
    seqs = list(dict.fromkeys(s for f in recorder for s in f.sequences))
    for seq in [None, *seqs]:  # every sequence chosen, and one after it holds no blocks
        dash.page_table.seq = seq
        for i in range(len(recorder)):
            dash.index = i
            yield f"dashboard step {i} seq {seq}", [
                *control_strings(dash.widget),
                *(s for v in dash.views for s in figure_strings(v._figure_widget))]

    kv = KVCacheManager(16, 4)  # a sliding window gives blocks back
    window = Recorder.attach(kv)
    admit(kv, "A", "r1", list(range(14)))
    kv.release_outside_window("A", 14, 5)
    step(kv, 0)
    view = PageTable(window, seq="A")
    yield "sliding window", [*control_strings(view.widget),
                             *figure_strings(view._figure_widget)]

    yield from prefix_cache_maps_shown()

    trace = [TraceRequest("a", 0, 5, 3), TraceRequest("b", 0, 9, 3),
             TraceRequest("c", 1, 20, 5), TraceRequest("d", 1, 30, 2)]
    for policy in ("max", "pow2", "oracle"):
        view = ContiguousVsPaged(replay(trace, num_blocks=14, block_size=4, policy=policy))
        for i in range(len(view.player)):
            view.index = i
            yield f"{policy} step {i}", [*control_strings(view.widget),
                                         *figure_strings(view._figure_widget)]


def prefix_cache_maps_shown():
    """Lab 10's `PrefixCacheMap` (newcomer 15, finding 10: all English in zh lab 10)
    over a recording whose batches store chains and a branch, a second copy of a
    content, a block whose parent came before the stream, a removal and a clear;
    with each title it is given in lab 10 and by default; its summary too."""
    from pagedkit.vllm import cache_view
    from pagedkit.vllm.wire import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch

    batches = [EventBatch(0.0, [BlockStored([1, 2], None, list(range(8)), 4)]),
               EventBatch(1.0, [BlockStored([3], 1, [9, 9, 9, 9], 4),
                                BlockStored([2], 1, list(range(4, 8)), 4)]),
               EventBatch(2.0, [BlockStored([7], 99, [5, 5, 5, 5], 4), BlockRemoved([3])]),
               EventBatch(3.0, [AllBlocksCleared()])]
    for title in (cache_view.DEFAULT_TITLE, cache_view.PAGEDKIT_TITLE, cache_view.VLLM_TITLE):
        recording = cache_view.CacheRecording()
        for seq, batch in enumerate(batches):
            recording.feed(batch, seq)
        view = cache_view.PrefixCacheMap(recording, title=title)
        for i in range(len(recording)):
            view.index = i
            yield f"prefix cache map step {i}", [
                ("summary (its repr and text form, after the class name)", view.summary(i)),
                *control_strings(view.widget), *figure_strings(view._figure_widget)]


def untranslated(language: str) -> tuple[int, dict[str, str]]:
    """How many strings the views show in `language`, and the ones with English
    words (each with where it was first seen)."""
    pagedkit.set_language(language)
    try:
        shown, english = set(), {}
        for what, strings in every_view_shown():
            for where, text in strings:
                if text:
                    shown.add(text)
                    if english_words(text):
                        english.setdefault(text, f"{what}, {where}")
    finally:
        pagedkit.set_language("en")
    return len(shown), english


def test_every_string_a_widget_shows_is_chinese():
    shown, english = untranslated("zh-CN")
    assert shown > 300  # titles, hovers and controls of every step were read
    assert not english, "\n".join(f"{text!r} ({where})" for text, where in english.items())


def test_the_same_reading_finds_the_english_words():
    """The reader is not blind: in English, the labels the Chinese test checks
    are all found to be English."""
    _, english = untranslated("en")
    for text in ("logical<br>blocks", "physical<br>blocks", "oldest", "now", "free", "play",
                 "chain", "stored by this batch", "×n: held by n physical blocks"):
        assert text in english, text
    seen = " ".join(english)
    for words in ("cached blocks (2 copies), this batch +2 stored", "all cleared",
                  "physical copies: 2", "(parent stored before the stream began)",
                  "publisher seq 2", "pagedkit's prefix cache", "vLLM's prefix cache, live"):
        assert words in seen, words


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_the_sequence_choice_keeps_its_values_in_both_languages(language):
    """Only the dropdown's labels are translated: its values (the sequence, or
    the oldest one's marker) are the same, and choosing them works alike."""
    kv = KVCacheManager(16, 4)
    rec = Recorder.attach(kv)
    admit(kv, "A", "r1", list(range(6)))
    admit(kv, "B", "r2", list(range(9)))
    step(kv, 0)
    pagedkit.set_language(language)
    try:
        view = PageTable(rec)
        chooser = view.widget.children[1]
        labels = {"en": "oldest", "zh-CN": "最早的"}[language]
        assert chooser.options == ((labels, _OLDEST), ("A", "A"), ("B", "B"))
        chooser.value = "B"
        assert view.seq == "B"
        chooser.value = _OLDEST
        assert view.seq is None and view.shown_seq() == "A"
    finally:
        pagedkit.set_language("en")
