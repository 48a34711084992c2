"""Request traces: who arrives when, with how long a prompt and how long an answer.

The simulator needs only lengths and arrival times, never text. The paper
(§6.1, Figure 11) drives its experiments with two datasets, ShareGPT (long
conversations) and Alpaca (short instructions), and synthesizes Poisson
arrival times at a chosen request rate. We cannot ship those datasets, so
`synthetic_trace` draws **synthetic** lengths shaped like them: each length
is a log-normal truncated to ``[1, max_len]``, its location solved so the
mean matches the paper's Figure 11 exactly (the shape, `sigma`, is chosen by
eye, not fitted to the real data). Real length lists load from a local JSON
or CSV file with `load_trace`.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import numbers
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

import numpy as np

from .._validation import check_int, check_number, choice_name
from ..i18n import N_, _, join_names


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: it arrives at `arrival` seconds, brings a prompt
    of `prompt_len` tokens and will produce `output_len` tokens. Its
    `request_id` is any hashable value, unique in its trace: a number or a
    name such as ``"A"``."""

    request_id: Hashable
    arrival: float
    prompt_len: int
    output_len: int

    def __post_init__(self) -> None:
        # Checked here, so a hand-built request cannot reach the simulator with a
        # length it would loop on (an arrival of NaN is never reached).
        who = f"request {self.request_id!r}"
        try:
            hash(self.request_id)
        except TypeError:
            raise TypeError(f"{who}: the id is a {type(self.request_id).__name__}, which is "
                            "not hashable; a request id is a number or a name such as "
                            "'A'") from None
        object.__setattr__(self, "prompt_len",
                           check_int(f"prompt_len of {who}", self.prompt_len, minimum=1))
        object.__setattr__(self, "output_len",
                           check_int(f"output_len of {who}", self.output_len, minimum=1))
        t = self.arrival
        if isinstance(t, bool) or not isinstance(t, numbers.Real):
            raise TypeError(f"{who} arrives at {t!r} ({type(t).__name__}): an arrival is a "
                            "time >= 0 in seconds")
        if not (math.isfinite(t) and t >= 0):
            raise ValueError(f"{who} arrives at {t!r} s: an arrival is a finite time >= 0 "
                             "in seconds")
        object.__setattr__(self, "arrival", float(t))

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.output_len


@dataclass(frozen=True)
class Trace:
    """Requests in arrival order, with a name and where they came from."""

    name: str
    requests: tuple[TraceRequest, ...]
    source: str = "synthetic"

    def __post_init__(self) -> None:
        requests = tuple(self.requests)
        first: dict[Hashable, int] = {}  # request id -> where it first appears
        for i, r in enumerate(requests):
            if not isinstance(r, TraceRequest):
                raise TypeError(f"trace {self.name!r}: request {i} is {r!r}, not a TraceRequest")
            if r.request_id in first:
                raise ValueError(f"trace {self.name!r}: requests {first[r.request_id]} and {i} "
                                 f"both have the id {r.request_id!r}; give every request its "
                                 "own id, as results are reported by id")
            first[r.request_id] = i
            if i and r.arrival < requests[i - 1].arrival:
                raise ValueError(f"trace {self.name!r}: requests must be in arrival order; "
                                 f"request {i} arrives at {r.arrival:g} s, before request "
                                 f"{i - 1} ({requests[i - 1].arrival:g} s)")
        object.__setattr__(self, "requests", requests)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self):
        return iter(self.requests)

    @property
    def duration(self) -> float:
        """Seconds from time 0 to the last arrival."""
        return self.requests[-1].arrival if self.requests else 0.0

    def mean_prompt_len(self) -> float:
        return float(np.mean([r.prompt_len for r in self.requests]))

    def mean_output_len(self) -> float:
        return float(np.mean([r.output_len for r in self.requests]))

    def head(self, n: int) -> Trace:
        """The first `n` requests (a quick trace for tests and demos)."""
        check_int("n", n, minimum=1)
        return Trace(self.name, self.requests[:n], self.source)


# ----------------------------------------------------------------- shapes
@dataclass(frozen=True)
class LengthShape:
    """A log-normal length distribution known by its mean and its log-spread."""

    mean: float
    sigma: float


@dataclass(frozen=True)
class DatasetShape:
    """Prompt and output length distributions of one dataset; ``prompt + output``
    never exceeds `max_len` (OPT's 2048-token context, paper §6.1)."""

    name: str
    prompt: LengthShape
    output: LengthShape
    max_len: int = 2048
    notes: str = field(default="", compare=False)


#: Shaped like ShareGPT (paper Fig. 11a): means 161.31 in, 337.99 out; long tails.
SHAREGPT = DatasetShape(
    "sharegpt", LengthShape(161.31, 1.2), LengthShape(337.99, 0.8),
    notes="synthetic, log-normal; means from the paper's Fig. 11a, shape by eye")
#: Shaped like Alpaca (paper Fig. 11b): short instructions, means 19.31 in, 58.45 out.
ALPACA = DatasetShape(
    "alpaca", LengthShape(19.31, 0.5), LengthShape(58.45, 0.9),
    notes="synthetic, log-normal; means from the paper's Fig. 11b, shape by eye")

DATASETS = {"sharegpt": SHAREGPT, "alpaca": ALPACA}


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _truncated_lognormal_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    """Mean of exp(mu + sigma Z) conditioned on lying in [lo, hi] (closed form)."""
    a, b = (math.log(lo) - mu) / sigma, (math.log(hi) - mu) / sigma
    mass = _phi(b) - _phi(a)
    if mass < 1e-300:  # all the mass is beyond one bound: the mean sits on it
        return lo if b < 0 else hi
    return math.exp(mu + sigma * sigma / 2) * (_phi(b - sigma) - _phi(a - sigma)) / mass


def _solve_mu(target: float, sigma: float, his: Iterable[float]) -> float:
    """The log-location whose truncated mean, averaged over upper bounds `his`
    (one per conditioning case), equals `target`. Rounding a value in
    [k - 0.5, k + 0.5) to k is unbiased enough that this continuous mean
    is the integer lengths' mean too."""
    his = list(his)
    if not 1 <= target <= max(his):
        raise ValueError(f"a mean length of {target} is outside [1, {max(his)}]")
    lo, hi = -20.0, 20.0
    for _step in range(100):  # the mean grows with mu: bisect
        mid = (lo + hi) / 2
        mean = sum(_truncated_lognormal_mean(mid, sigma, 0.5, h) for h in his) / len(his)
        lo, hi = (mid, hi) if mean < target else (lo, mid)
    return (lo + hi) / 2


def _draw_truncated(rng: np.random.Generator, mu: float, sigma: float,
                    his: np.ndarray) -> np.ndarray:
    """Integer lengths from the log-normal, each rounding into [1, his[i]].

    Redrawing what falls outside is fast while the bound is loose; the few
    whose bound cuts deep into the distribution (a long prompt leaves little
    room for the output) are drawn exactly by inverting the normal CDF."""
    out = np.zeros(len(his), dtype=np.int64)
    todo = np.arange(len(his))
    for _try in range(8):
        if not len(todo):
            return out
        x = np.rint(rng.lognormal(mu, sigma, size=len(todo))).astype(np.int64)
        ok = (x >= 1) & (x <= his[todo])
        out[todo[ok]] = x[ok]
        todo = todo[~ok]
    normal = NormalDist()
    lo = normal.cdf((math.log(0.5) - mu) / sigma)
    for i, u in zip(todo, rng.random(len(todo)), strict=True):
        hi = normal.cdf((math.log(his[i] + 0.5) - mu) / sigma)
        q = min(max(lo + u * (hi - lo), 1e-300), 1 - 1e-16)
        out[i] = min(max(round(math.exp(mu + sigma * normal.inv_cdf(q))), 1), his[i])
    return out


def sample_lengths(shape: DatasetShape, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` (prompt, output) length pairs drawn from `shape`.

    The output is truncated to what the context has left after the prompt,
    so its location is solved over a grid of prompt lengths (the prompt's
    quantiles) to keep its mean on target."""
    check_int("n", n, minimum=0)
    rng = np.random.default_rng(seed)
    max_prompt = shape.max_len - 1
    mu_p = _solve_mu(shape.prompt.mean, shape.prompt.sigma, [max_prompt + 0.5])
    grid = _draw_truncated(np.random.default_rng(12345), mu_p, shape.prompt.sigma,
                           np.full(400, max_prompt))
    mu_o = _solve_mu(shape.output.mean, shape.output.sigma, shape.max_len - grid + 0.5)
    prompts = _draw_truncated(rng, mu_p, shape.prompt.sigma, np.full(n, max_prompt))
    outputs = _draw_truncated(rng, mu_o, shape.output.sigma, shape.max_len - prompts)
    return prompts, outputs


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> np.ndarray:
    """Arrival times of `n` requests of a Poisson process with `rate` requests/s
    (exponential gaps), as the paper synthesizes them (§6.1)."""
    check_int("n", n, minimum=0)
    rate = check_number("rate", rate, positive=True)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    return np.cumsum(gaps)


#: The most requests `synthetic_trace` draws: five times the paper's largest
#: trace (an hour of Alpaca at 55 req/s, 198,000), far below what fills memory.
MAX_SYNTHETIC_REQUESTS = 1_000_000


def synthetic_trace(dataset: str | DatasetShape = "sharegpt", *, rate: float,
                    num_requests: int | None = None, duration: float | None = None,
                    seed: int = 0) -> Trace:
    """A seeded synthetic trace: lengths shaped like `dataset`, Poisson arrivals.

    Give either `num_requests` or `duration` (seconds; ``rate * duration``
    requests). Lengths depend only on the seed, not on the rate, so a sweep
    over rates replays the same requests faster or slower.
    """
    shape = _shape(dataset)
    rate = check_number("rate", rate, positive=True)
    if (num_requests is None) == (duration is None):
        raise ValueError("give exactly one of num_requests and duration")
    if num_requests is None:
        duration = check_number("duration", duration, positive=True)
        num_requests = max(1, round(rate * duration))
        asked = _("rate {rate:g} req/s x duration {duration:g} s = {n:,} requests").format(
            rate=rate, duration=duration, n=num_requests)
    else:
        asked = f"num_requests={num_requests:,}"
    check_int("num_requests", num_requests, minimum=1)
    if num_requests > MAX_SYNTHETIC_REQUESTS:  # before allocating: 2e9 took a 23 GB machine
        raise ValueError(_("{asked} is more than a synthetic trace holds ({most:,}, five times "
                           "the paper's largest: an hour at 55 req/s); give fewer requests or "
                           "a shorter duration").format(asked=asked, most=MAX_SYNTHETIC_REQUESTS))
    prompts, outputs = sample_lengths(shape, num_requests, seed)
    arrivals = poisson_arrivals(num_requests, rate, seed + 1)
    requests = tuple(TraceRequest(i, float(t), int(p), int(o))
                     for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs, strict=True)))
    return Trace(f"{shape.name}@{rate:g}", requests, f"synthetic ({shape.notes})")


def dataset_name(dataset: str) -> str:
    """`dataset`'s key in `DATASETS`, read as every choice is (case and
    surrounding spaces aside: ``"Alpaca"``), or a ValueError naming the choices."""
    name = choice_name(dataset)
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of "
                         f"{', '.join(map(repr, DATASETS))} or pass a DatasetShape")
    return name


def _shape(dataset: str | DatasetShape) -> DatasetShape:
    if isinstance(dataset, DatasetShape):
        return dataset
    return DATASETS[dataset_name(dataset)]


# ---------------------------------------------------------------- loading
_PROMPT_KEYS = ("prompt_len", "input_len", "prompt_tokens", "input_tokens", "prompt", "input")
_OUTPUT_KEYS = ("output_len", "output_tokens", "completion_tokens", "output")
_ARRIVAL_KEYS = ("arrival", "arrival_time", "timestamp")


def load_trace(path: str | Path, *, rate: float | None = None, seed: int = 0,
               name: str | None = None, rate_option: str = "rate=") -> Trace:
    """Load real lengths from a JSON or CSV file.

    JSON: a list of ``[prompt_len, output_len]`` pairs (optionally with an
    arrival third) or of objects; CSV: a header row. Columns may be called
    ``prompt_len``/``input_len`` and ``output_len``/``output_tokens`` (and a
    few aliases), in any case and with spaces around them (``Arrival,
    Prompt_Len``); a file may start with a UTF-8 byte-order mark (Excel's
    "CSV UTF-8" writes one). Lengths are whole numbers of tokens (``12`` or
    ``12.0``, never ``12.7``). Arrival times (seconds, an ``arrival`` column) are used
    when every request has one; a file without any takes Poisson arrivals
    at `rate`. A file where only some requests have one, or one with
    arrivals and a `rate`, is refused rather than half used; the error
    calls the rate `rate_option` (the command line's ``--rate``). The errors
    come in the language of the moment (`pagedkit.set_language`).
    """
    path = Path(path)
    if not path.is_file():  # before the suffix: a missing file is not a format problem
        raise FileNotFoundError(_("{path}: no such trace file (a .json or .csv file of "
                                  "request lengths)").format(path=path))
    rows = _read_rows(path)
    lengths, arrivals = [], []
    for i, row in enumerate(rows):
        if isinstance(row, (list, tuple)):
            if len(row) not in (2, 3):
                raise ValueError(_("{path}: request {i} should be [prompt_len, output_len] "
                                   "(optionally + arrival), got {row!r}")
                                 .format(path=path, i=i, row=row))
            lengths.append((row[0], row[1]))
            arrivals.append(row[2] if len(row) == 3 else None)
        elif isinstance(row, dict):
            row = _named_columns(row.items(), path, i)
            lengths.append((_field(row, _PROMPT_KEYS, path, i), _field(row, _OUTPUT_KEYS, path, i)))
            arrivals.append(next((row[k] for k in _ARRIVAL_KEYS if row.get(k) not in (None, "")),
                                 None))
        else:
            raise ValueError(_("{path}: request {i} is neither a list nor an object: {row!r}; "
                               "expected {form}").format(path=path, i=i, row=row,
                                                          form=_(_JSON_FORM).format()))
    if not lengths:
        raise ValueError(_("{path}: the trace holds no requests").format(path=path))
    pairs = [(_length(p, "prompt_len", path, i), _length(o, "output_len", path, i))
             for i, (p, o) in enumerate(lengths)]
    missing = [i for i, a in enumerate(arrivals) if a is None]
    rate_given = f"{rate_option}{'' if rate_option.endswith('=') else ' '}{rate!r}"
    if not missing:
        if rate is not None:
            raise ValueError(_("{path}: the file gives every request an arrival time; leave "
                               "out {rate} (it would replace them) or drop the arrivals")
                             .format(path=path, rate=rate_given))
        times = np.array([_arrival(a, path, i) for i, a in enumerate(arrivals)])
        if np.any(np.diff(times) < 0):
            at = int(np.argmax(np.diff(times) < 0)) + 1
            raise ValueError(_("{path}: arrival times must be non-decreasing; request {i} "
                               "arrives at {t:g} s, before request {before} ({t_before:g} s)")
                             .format(path=path, i=at, t=times[at], before=at - 1,
                                     t_before=times[at - 1]))
    elif len(missing) < len(arrivals):
        given = next(i for i, a in enumerate(arrivals) if a is not None)
        raise ValueError(_("{path}: request {i} has no arrival time but request {given} has "
                           "one ({lack} of {n} lack one); give every request an arrival, or "
                           "none and pass {rate}")
                         .format(path=path, i=missing[0], given=given, lack=len(missing),
                                 n=len(arrivals), rate=rate_option))
    elif rate is None:
        raise ValueError(_("{path}: the file has no arrival times (a column {names}, or a "
                           "third value after each [prompt, output] pair); pass {rate} "
                           "(requests/s) to draw Poisson arrivals")
                         .format(path=path, names=join_names(_ARRIVAL_KEYS), rate=rate_option))
    else:
        times = poisson_arrivals(len(pairs), rate, seed)
    requests = tuple(TraceRequest(i, float(t), p, o)
                     for i, ((p, o), t) in enumerate(zip(pairs, times, strict=True)))
    return Trace(name or path.stem, requests, f"file {path.name}")


def _length(value, what: str, path: Path, i: int) -> int:
    """A length as read from a file: a whole number of tokens, at least 1;
    every refusal names the file, as the trace's other errors do."""
    number = None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value.strip())
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = value
    if number is None or not math.isfinite(number) or number != int(number):
        raise ValueError(_("{path}: {what} of request {i} must be a whole number of tokens, "
                           "got {value!r}").format(path=path, what=what, i=i, value=value))
    if number < 1:
        raise ValueError(_("{path}: {what} of request {i} must be >= 1, got {value}")
                         .format(path=path, what=what, i=i, value=int(number)))
    return int(number)


def _arrival(value, path: Path, i: int) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = math.nan
    if isinstance(value, bool) or not math.isfinite(t) or t < 0:
        raise ValueError(_("{path}: the arrival of request {i} must be a time >= 0 in "
                           "seconds, got {value!r}").format(path=path, i=i, value=value))
    return t


#: what a trace file holds, said where one cannot be read
_JSON_FORM = N_("a JSON list of [prompt_len, output_len] pairs or of objects such as "
                '{{"prompt_len": 12, "output_len": 30}}')
_CSV_FORM = N_("a CSV file whose header row names the columns, e.g. prompt_len,output_len")
#: what a CSV file's header row may be separated by, if not commas: said, not misread
_OTHER_SEPARATORS = {";": N_("semicolons"), "\t": N_("tabs")}


def _form(path: Path) -> str:
    """What a trace file of `path`'s suffix holds, in the language of the moment."""
    form = _JSON_FORM if path.suffix.lower() == ".json" else _CSV_FORM
    return _(form).format()  # format: the JSON example's braces are doubled


def _read_rows(path: Path) -> list:
    """A trace file's requests, unchecked: a JSON list, or a CSV file's rows
    as dicts. A UTF-8 byte-order mark before the first character is skipped
    (Excel's "CSV UTF-8" writes one; read as text it would be part of the
    first column's name, and that column lost). A file that is not text,
    not JSON, or not a list is refused naming the file, what went wrong (the
    line) and the form expected."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv"):
        raise ValueError(_("{path}: unsupported trace format {suffix!r} (use .json or .csv)")
                         .format(path=path, suffix=path.suffix))
    data = path.read_bytes()
    try:  # decoded whole, so an error's byte is the file's byte, mark or none
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise ValueError(_("{path}: not a text file (byte {byte} is not UTF-8); expected "
                           "{form}").format(path=path, byte=e.start, form=_form(path))) from None
    if not text.strip():
        raise ValueError(_("{path}: the file is empty; expected {form}")
                         .format(path=path, form=_form(path)))
    if suffix == ".csv":
        try:
            reader = csv.DictReader(text.splitlines())
            reader.fieldnames = _header(reader.fieldnames or [], path)
            return list(reader)
        except csv.Error as e:
            raise ValueError(_("{path}: not a CSV file ({error}); expected {form}")
                             .format(path=path, error=e, form=_form(path))) from None
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(_("{path}: not JSON (line {line}, column {column}: {error}); "
                           "expected {form}").format(path=path, line=e.lineno, column=e.colno,
                                                     error=e.msg, form=_form(path))) from None
    if not isinstance(rows, list):
        raise ValueError(_("{path}: expected {form}, got a JSON {kind}")
                         .format(path=path, form=_form(path), kind=type(rows).__name__))
    return rows


def _header(names: list[str], path: Path) -> list[str]:
    """A CSV header row's column names as `_named_columns` reads them. A row
    of one name holding a semicolon or a tab is a file separated by those,
    refused by name (read with commas, it is one column named
    ``"prompt_len;output_len"``)."""
    if len(names) == 1:
        for separator, what in _OTHER_SEPARATORS.items():
            if separator in names[0]:
                raise ValueError(_("{path}: the header row {header!r} is separated by {what}, "
                                   "not commas; save the file comma-separated, as {form}")
                                 .format(path=path, header=names[0], what=_(what),
                                         form=_form(path)))
    return list(_named_columns([(name, None) for name in names], path, None))


def _named_columns(row: Iterable[tuple], path: Path, i: int | None) -> dict:
    """A row's (column, value) pairs as a dict, its column names read as pagedkit reads every name
    (`choice_name`: case and surrounding spaces aside, so ``" Prompt_Len"``
    is ``prompt_len``); two names that read the same are refused, naming both
    (one would silently hide the other). `i` is the request, or None for a
    CSV header row."""
    named: dict = {}
    given: dict = {}
    for key, value in row:
        name = choice_name(key)
        if name in named and i is None:
            raise ValueError(_("{path}: the header row names the column {name!r} twice "
                               "({first!r} and {second!r}); keep one")
                             .format(path=path, name=name, first=given[name], second=key))
        if name in named:
            raise ValueError(_("{path}: request {i} names the column {name!r} twice ({first!r} "
                               "and {second!r}); keep one")
                             .format(path=path, i=i, name=name, first=given[name], second=key))
        named[name], given[name] = value, key
    return named


def _field(row: dict, keys: tuple[str, ...], path: Path, i: int):
    for key in keys:
        if row.get(key) not in (None, ""):
            return row[key]
    columns = join_names(repr(k) for k in row if isinstance(k, str)) or _("none")
    raise ValueError(_("{path}: request {i} has none of the columns {names} (the columns it "
                       "has: {columns}); expected {form}")
                     .format(path=path, i=i, names=join_names(keys), columns=columns,
                             form=_form(path)))
