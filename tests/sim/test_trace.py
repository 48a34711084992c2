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
    with pytest.raises(ValueError, match="no arrival times; pass rate="):
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
    ("other.csv", b"x,y\n1,2\n", r"request 0 has none of the columns prompt_len, .* \(its "
                                 "header row reads x,y; expected a CSV file whose header"),
    ("headless.csv", b"10,20\n5,7\n", r"\(its header row reads 10,20; expected a CSV file"),
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
