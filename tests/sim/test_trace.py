import itertools
import json

import numpy as np
import pytest

from pagedkit.sim import (
    ALPACA,
    SHAREGPT,
    load_trace,
    poisson_arrivals,
    sample_lengths,
    synthetic_trace,
)
from pagedkit.sim.paper import FIG11_MEANS


@pytest.mark.parametrize("shape", [SHAREGPT, ALPACA], ids=lambda s: s.name)
def test_synthetic_means_match_the_paper(shape):
    prompts, outputs = sample_lengths(shape, 40_000, seed=7)
    want_prompt, want_output = FIG11_MEANS[shape.name]
    assert prompts.mean() == pytest.approx(want_prompt, rel=0.03)
    assert outputs.mean() == pytest.approx(want_output, rel=0.03)
    assert prompts.min() >= 1 and outputs.min() >= 1
    assert (prompts + outputs).max() <= shape.max_len


def test_sharegpt_is_long_tailed_and_alpaca_short():
    p, o = sample_lengths(SHAREGPT, 20_000, seed=1)
    assert np.median(p) < p.mean()  # long tail: the mean sits above the median
    assert np.percentile(p + o, 99) > 4 * np.median(p + o) / 2
    ap, ao = sample_lengths(ALPACA, 20_000, seed=1)
    assert np.median(ap + ao) < np.median(p + o) / 4


def test_traces_are_seeded():
    a = synthetic_trace("sharegpt", rate=2, num_requests=50, seed=3)
    b = synthetic_trace("sharegpt", rate=2, num_requests=50, seed=3)
    c = synthetic_trace("sharegpt", rate=2, num_requests=50, seed=4)
    assert a == b and a != c
    # the rate only stretches time: the same requests arrive faster
    fast = synthetic_trace("sharegpt", rate=4, num_requests=50, seed=3)
    assert [r.prompt_len for r in fast] == [r.prompt_len for r in a]
    assert fast.duration < a.duration
    assert "synthetic" in a.source


def test_poisson_arrivals_have_the_rate():
    t = poisson_arrivals(20_000, rate=5.0, seed=0)
    assert np.all(np.diff(t) >= 0)
    assert np.diff(t).mean() == pytest.approx(0.2, rel=0.03)


def test_duration_sets_the_number_of_requests():
    assert len(synthetic_trace("alpaca", rate=30, duration=10)) == 300
    with pytest.raises(ValueError, match="exactly one of num_requests and duration"):
        synthetic_trace("alpaca", rate=30)
    with pytest.raises(ValueError, match="unknown dataset 'lmsys'"):
        synthetic_trace("lmsys", rate=1, num_requests=1)
    with pytest.raises(ValueError, match="rate must be > 0"):
        synthetic_trace("alpaca", rate=0, num_requests=1)


def test_load_json_pairs_and_objects(tmp_path):
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([[10, 20], [5, 7]]))
    trace = load_trace(pairs, rate=1.0)
    assert [(r.prompt_len, r.output_len) for r in trace] == [(10, 20), (5, 7)]
    objects = tmp_path / "objs.json"
    objects.write_text(json.dumps([{"input_len": 3, "output_tokens": 4, "arrival": 0.5},
                                   {"prompt_len": 6, "output_len": 1, "arrival": 1.5}]))
    trace = load_trace(objects)
    assert [(r.arrival, r.prompt_len, r.output_len) for r in trace] == [(0.5, 3, 4),
                                                                         (1.5, 6, 1)]
    assert trace.name == "objs" and trace.source == "file objs.json"


def test_load_csv(tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("prompt_len,output_len\n12,30\n8,2\n")
    trace = load_trace(path, rate=2.0, seed=1)
    assert trace.mean_prompt_len() == 10 and trace.mean_output_len() == 16


def test_load_errors_name_the_problem(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([[10, 20]]))
    with pytest.raises(ValueError, match=r"no arrival times \(a column arrival, arrival_time, "
                                         r"timestamp, or a third value after each "
                                         r"\[prompt, output\] pair\); pass rate="):
        load_trace(path)
    path.write_text(json.dumps([[10, 0]]))
    with pytest.raises(ValueError, match="output_len of request 0 must be >= 1, got 0"):
        load_trace(path, rate=1)
    path.write_text(json.dumps([{"prompt": 3}]))
    with pytest.raises(ValueError, match="request 0 has none of the columns output_len"):
        load_trace(path, rate=1)
    other = tmp_path / "t.parquet"
    other.write_text("")
    with pytest.raises(ValueError, match=r"unsupported trace format '\.parquet'"):
        load_trace(other, rate=1)


@pytest.mark.parametrize("rows, message", [
    ([[10, 20, 0.5], [5, 7]], "request 1 has no arrival time but request 0 has one "
                              r"\(1 of 2 lack one\)"),
    ([{"prompt_len": 3, "output_len": 4}, {"prompt_len": 3, "output_len": 4, "arrival": 2}],
     "request 0 has no arrival time but request 1 has one"),
    ([[12.7, 20]], r"prompt_len of request 0 must be a whole number of tokens, got 12\.7"),
    ([[12, "3.5"]], "output_len of request 0 must be a whole number of tokens, got '3.5'"),
    ([[12, 3], [12, True]], "output_len of request 1 must be a whole number of tokens"),
    ([[12, "many"]], "output_len of request 0 must be a whole number of tokens, got 'many'"),
    ([[12, 3, 1.0], [12, 3, 0.5]], "request 1 arrives at 0.5 s, before request 0"),
    ([[12, 3, -1]], "the arrival of request 0 must be a time >= 0"),
])
def test_load_refuses_what_it_would_otherwise_half_read(tmp_path, rows, message):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(ValueError, match=message):
        load_trace(path, rate=None if any(len(r) == 3 or "arrival" in r for r in rows
                                          if isinstance(r, (list, dict))) else 1.0)


#: lengths a trace file may hold that are refused: below 1, not whole, not a number
BAD_LENGTHS = [-5, -1, 0, 12.7, "many", True]


@pytest.mark.parametrize("form", ["pairs.json", "objects.json", "columns.csv"])
@pytest.mark.parametrize("what", ["prompt_len", "output_len"])
@pytest.mark.parametrize("value", BAD_LENGTHS, ids=repr)
def test_a_bad_length_names_the_file(tmp_path, form, what, value):
    """Issue #26 (newcomer 7, finding 5): a negative or zero length was
    refused without the file's name ('prompt_len of request 0 must be >= 1,
    got -5'), where every other trace error names it."""
    row = {"prompt_len": 12, "output_len": 3, what: value}
    path = tmp_path / form
    if form == "columns.csv":
        path.write_text(f"prompt_len,output_len\n{row['prompt_len']},{row['output_len']}\n")
    else:
        path.write_text(json.dumps([list(row.values()) if form == "pairs.json" else row]))
    with pytest.raises(ValueError) as refused:
        load_trace(path, rate=1.0)
    assert str(refused.value).startswith(f"{path}: {what} of request 0 must be "), refused.value


def test_load_accepts_whole_numbers_written_as_floats_and_refuses_a_rate_beside_arrivals(
        tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("prompt_len,output_len,arrival\n12.0,30,0\n8, 2 ,1.5\n")
    trace = load_trace(path)
    assert [(r.arrival, r.prompt_len, r.output_len) for r in trace] == [(0.0, 12, 30),
                                                                         (1.5, 8, 2)]
    with pytest.raises(ValueError, match="every request an arrival time; leave out rate=2"):
        load_trace(path, rate=2)


#: a trace file that cannot be read (issue #26, N3): (name, bytes, what the error says)
UNREADABLE = [
    ("empty.json", b"", r"the file is empty; expected a JSON list of \[prompt_len, output_len\]"),
    ("blank.json", b"\n  \n", "the file is empty; expected a JSON list"),
    ("words.json", b"hello world\n", r"not JSON \(line 1, column 1: Expecting value\); expected "
                                     "a JSON list"),
    ("cut.json", b"[[1, 2],\n [3",
     r"not JSON \(line 2, column 4: Expecting .,. delimiter\); expected a JSON list"),
    ("junk.json", b"\x89PNG\r\n\x1a\n\xff\xfe", r"not a text file \(byte 0 is not UTF-8\); "
                                               "expected a JSON list"),
    ("junk.csv", b"prompt_len\xff,output_len\n", r"not a text file \(byte 10 is not UTF-8\); "
                                                 "expected a CSV file whose header row"),
    ("object.json", b'{"prompt_len": 3, "output_len": 4}', "expected a JSON list of "
                                                           r"\[prompt_len, output_len\] pairs "
                                                           r".*, got a JSON dict"),
    ("number.json", b"3", "expected a JSON list .*, got a JSON int"),
    ("numbers.json", b"[1, 2, 3]", "request 0 is neither a list nor an object: 1; expected a "
                                   "JSON list"),
    ("empty.csv", b"", "the file is empty; expected a CSV file whose header row names"),
    ("other.csv", b"x,y\n1,2\n", r"request 0 has none of the columns prompt_len, .* \(the "
                                 "columns it has: 'x', 'y'\\); expected a CSV file whose header"),
    ("headless.csv", b"10,20\n5,7\n", r"\(the columns it has: '10', '20'\); expected a CSV file"),
    ("nul.csv", b"prompt_len,output_len\n1\x00,2\n", "(not a CSV file|whole number of tokens)"),
]


@pytest.mark.parametrize("name, content, message", UNREADABLE,
                         ids=[n for n, _, _ in UNREADABLE])
def test_an_unreadable_trace_is_refused_naming_the_file_and_the_form(tmp_path, name, content,
                                                                      message):
    """N3: a file that is not JSON, not text or not a list of requests raised
    json's or the codec's own error ('Expecting value: line 1 column 1'),
    naming neither the file nor what a trace holds."""
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as e:
        load_trace(path, rate=1.0)
    assert str(e.value).startswith(f"{path}: ")


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("name, content, message", UNREADABLE,
                         ids=[n for n, _, _ in UNREADABLE])
def test_a_refusal_shows_the_json_example_with_single_braces(tmp_path, name, content, message,
                                                             language):
    """Review 41: a row that is neither a list nor an object showed the form's
    example as {{"prompt_len": ...}}, its braces still doubled, in en and zh."""
    import pagedkit

    path = tmp_path / name
    path.write_bytes(content)
    pagedkit.set_language(language)
    try:
        with pytest.raises(ValueError) as e:
            load_trace(path, rate=1.0)
    finally:
        pagedkit.set_language("en")
    assert "{{" not in str(e.value) and "}}" not in str(e.value), str(e.value)


# ------------------------------------------------- how a CSV file is written
#: a trace written by hand or by a spreadsheet: every order of its columns, with and
#: without arrivals (newcomer 15, finding 3)
COLUMNS = [list(order) for order in itertools.permutations(("arrival", "prompt_len",
                                                            "output_len"))]
COLUMNS += [list(order) for order in itertools.permutations(("prompt_len", "output_len"))]
VALUES = {"arrival": ("0", "0.5"), "prompt_len": ("10", "20"), "output_len": ("5", "3")}
BOM = "\ufeff"  # what Excel's "CSV UTF-8" writes first


def _csv(columns, *, bom="", header=None) -> str:
    rows = [",".join(VALUES[c][i] for c in columns) for i in range(2)]
    return bom + "\n".join([header or ",".join(columns), *rows]) + "\n"


def _outcome(path, rate):
    """What load_trace makes of `path`: its requests, or its error with the path cut."""
    try:
        return [(r.arrival, r.prompt_len, r.output_len) for r in load_trace(path, rate=rate)]
    except ValueError as e:
        return str(e).removeprefix(f"{path}: ")


def _expected(columns, rate):
    if "arrival" not in columns:
        return ("the file has no arrival times" if rate is None
                else [(t, p, o) for t, p, o in zip(poisson_arrivals(2, rate), (10, 20), (5, 3),
                                                   strict=True)])
    return ([(0.0, 10, 5), (0.5, 20, 3)] if rate is None
            else "the file gives every request an arrival time")


@pytest.mark.parametrize("rate", [None, 0.5])
@pytest.mark.parametrize("columns", COLUMNS, ids=",".join)
@pytest.mark.parametrize("bom", ["", BOM], ids=["plain", "bom"])
def test_a_csv_file_reads_the_same_with_or_without_a_byte_order_mark(tmp_path, bom, columns,
                                                                     rate):
    """Newcomer 15, finding 3: with Excel's BOM the first column read as
    '\\ufeffarrival', so with a rate the file's arrivals were silently replaced by
    Poisson draws, and without one the refusal said the file had none (or, with
    prompt_len first, that it had no prompt_len column)."""
    path = tmp_path / "t.csv"
    path.write_text(_csv(columns, bom=bom), encoding="utf-8")
    got = _outcome(path, rate)
    expected = _expected(columns, rate)
    if isinstance(expected, str):
        assert isinstance(got, str) and got.startswith(expected), got
    else:
        assert got == expected
    assert got == _outcome(_plain(tmp_path, columns), rate)


def _plain(tmp_path, columns):
    path = tmp_path / "plain.csv"
    path.write_text(_csv(columns), encoding="utf-8")
    return path


#: header rows that name the columns as a hand or a spreadsheet writes them
HEADERS = ["arrival, prompt_len, output_len", " arrival ,prompt_len ,output_len ",
           "Arrival,Prompt_Len,Output_Len", "ARRIVAL, PROMPT_LEN, OUTPUT_LEN",
           "arrival,\tprompt_len,\toutput_len"]


@pytest.mark.parametrize("bom", ["", BOM], ids=["plain", "bom"])
@pytest.mark.parametrize("header", HEADERS, ids=repr)
def test_a_header_row_is_read_case_and_spaces_aside(tmp_path, header, bom):
    """Finding 3's 'arrival, prompt_len, output_len' (a space after each comma)
    was refused as having no prompt_len column while the message showed one."""
    path = tmp_path / "t.csv"
    path.write_text(_csv(["arrival", "prompt_len", "output_len"], bom=bom, header=header),
                    encoding="utf-8")
    assert _outcome(path, None) == [(0.0, 10, 5), (0.5, 20, 3)]


@pytest.mark.parametrize("separator, what", [(";", "semicolons"), ("\t", "tabs")])
@pytest.mark.parametrize("columns", [["prompt_len", "output_len"],
                                     ["arrival", "prompt_len", "output_len"]], ids=",".join)
def test_a_file_separated_otherwise_than_by_commas_is_refused_saying_so(tmp_path, separator,
                                                                        what, columns):
    path = tmp_path / "t.csv"
    path.write_text(_csv(columns).replace(",", separator))
    expected = (f"the header row {separator.join(columns)!r} is separated by {what}, not "
                "commas; save the file comma-separated")
    for rate in (None, 1.0):
        assert _outcome(path, rate).startswith(expected)


@pytest.mark.parametrize("header, twice", [
    ("prompt_len,output_len,prompt_len", "'prompt_len' twice ('prompt_len' and 'prompt_len')"),
    ("Prompt_Len,output_len,prompt_len", "'prompt_len' twice ('Prompt_Len' and 'prompt_len')"),
    ("arrival,prompt_len,output_len, Arrival", "'arrival' twice ('arrival' and ' Arrival')")])
def test_two_columns_that_read_the_same_are_refused(tmp_path, header, twice):
    """Before, the last of two equal names silently won; read case aside, two
    different names may read the same."""
    path = tmp_path / "t.csv"
    path.write_text(header + "\n" + ",".join(["1"] * header.count(",")) + ",1\n")
    assert _outcome(path, 1.0) == f"the header row names the column {twice}; keep one"
    objects = tmp_path / "t.json"
    objects.write_text(json.dumps([{"prompt_len": 1, "output_len": 1, "Output_Len ": 2}]))
    assert _outcome(objects, 1.0) == ("request 0 names the column 'output_len' twice "
                                      "('output_len' and 'Output_Len '); keep one")


def test_json_objects_are_read_case_and_spaces_aside_and_a_json_bom_skipped(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(BOM + json.dumps([{"Prompt_Len": 3, " output_len": 4, "ARRIVAL": 1}]),
                    encoding="utf-8")
    assert _outcome(path, None) == [(1.0, 3, 4)]


@pytest.mark.parametrize("header", ["prompt_len\u200b,output_len", "x,output_len"])
def test_a_missing_column_is_named_and_the_columns_shown_as_read(tmp_path, header):
    """The refusal shows each column name as Python writes it, so a hidden
    character (here a zero-width space) shows, and never a name it says is missing."""
    path = tmp_path / "t.csv"
    path.write_text(_csv(["prompt_len", "output_len"], bom=BOM, header=header),
                    encoding="utf-8")
    first = header.split(",")[0]
    assert _outcome(path, 1.0) == (
        "request 0 has none of the columns prompt_len, input_len, prompt_tokens, "
        f"input_tokens, prompt, input (the columns it has: {first!r}, 'output_len'); "
        "expected a CSV file whose header row names the columns, e.g. prompt_len,output_len")


def test_a_byte_that_is_not_utf8_is_counted_from_the_files_start(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbfprompt_len\xff,output_len\n")
    assert _outcome(path, 1.0).startswith("not a text file (byte 13 is not UTF-8)")
