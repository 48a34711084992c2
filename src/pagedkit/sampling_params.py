"""How to pick each next token, per request (shaped like vLLM's SamplingParams)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ._validation import (
    check_bool,
    check_int,
    check_number,
    did_you_mean,
    is_value,
    warn_at_caller,
)

#: The least temperature above 0: vLLM raises smaller ones to it (the logits
#: divided by less overflow float32).
MIN_TEMPERATURE = 0.01
#: repetition_penalty's range: a logit divided (or multiplied) by more
#: overflows float32 (whose largest finite value is 3.4e38).
MIN_PENALTY = 1e-30
#: Seeds a torch.Generator takes: 0 <= seed < 2**64 (-1, vLLM's, is None: no seed).
MAX_SEED = 2**64 - 1


class VllmNames(type):
    """The metaclass of `LLM`, `LLMEngine`, `RequestOutput`, `CompletionOutput`
    and `SamplingParams`: one of vLLM's names pagedkit lacks, read on the
    class itself (``SamplingParams.from_optional``, a classmethod in vLLM),
    says what pagedkit offers instead, as it does on an instance
    (`pagedkit.vllm_names`); any other missing name gets Python's message."""

    def __getattr__(cls, name: str) -> object:
        plain = AttributeError(f"type object {cls.__name__!r} has no attribute {name!r}",
                               name=name, obj=cls)
        if name.startswith("__") and name.endswith("__"):  # Python's and libraries' probes
            raise plain
        from .vllm_names import VLLM_ONLY_ATTRIBUTES, missing

        kind = next((c.__name__ for c in cls.__mro__ if c.__module__.startswith("pagedkit.")
                     and c.__name__ in VLLM_ONLY_ATTRIBUTES), None)
        raise plain if kind is None else missing(kind, cls, name, f"type object {cls.__name__!r}")


class RequestOutputKind(enum.Enum):
    """vLLM's ``output_kind`` values; pagedkit takes CUMULATIVE (vLLM's
    default) only: every output carries the whole completion so far."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


_INSTEAD_LOGITS = "change the logits yourself on LLMEngine's model, or use vLLM"
#: vLLM 0.32's sampling options that pagedkit does not implement: name ->
#: (the values that change nothing here, vLLM's default first; why the
#: others are refused, and what to do instead). `SamplingParams` takes them
#: at those values, so a vLLM script that spells out a default still runs.
VLLM_ONLY_OPTIONS: dict[str, tuple[tuple, str]] = {
    "logit_bias": ((None,), f"pagedkit adds no per-token bias; {_INSTEAD_LOGITS}"),
    "allowed_token_ids": ((None,), f"pagedkit samples from the whole vocabulary; "
                                   f"{_INSTEAD_LOGITS}"),
    "bad_words": (([], None), "pagedkit bans no words; stop strings or stop_token_ids end "
                              "a completion instead"),
    "structured_outputs": ((None,), "pagedkit has no guided (structured) decoding; use vLLM"),
    "watermarking": ((None,), "pagedkit adds no watermark"),
    "thinking_token_budget": ((None,), "pagedkit has no reasoning-token budget; use max_tokens"),
    "repetition_detection": ((None,), "pagedkit stops on max_tokens, stop strings and stop "
                                      "ids only; repetition_penalty discourages repeats"),
    "logprob_token_ids": ((None,), "logprobs reports each position's top tokens only"),
    "prompt_logprob_token_ids": ((None,), "prompt_logprobs reports each position's top "
                                          "tokens only"),
    "prompt_logprob_start": ((None,), "prompt_logprobs covers the whole prompt"),
    "flat_logprobs": ((False,), "logprobs come as one dict per position (vLLM's default)"),
    "output_kind": ((RequestOutputKind.CUMULATIVE, 0), "outputs are cumulative, vLLM's "
                                                       "default: each carries the whole "
                                                       "completion so far"),
    "stream_interval": ((None, 1), "LLMEngine.step() returns every request's output after "
                                   "each step"),
    "output_text_buffer_length": ((0,), "texts are held back only inside a character"),
    "spaces_between_special_tokens": ((True,), "special tokens are decoded by the "
                                               "tokenizer's default"),
    "skip_clone": ((False, True), "vLLM's own copy optimisation, True or False"),
    "skip_reading_prefix_cache": ((False, None), "a request reads the prefix cache whenever "
                                                 "the engine has one (enable_prefix_caching)"),
    "extra_args": ((None,), "pagedkit has no extensions to pass them to"),
    "routed_experts_prompt_start": ((0,), "pagedkit serves no mixture-of-experts routing "
                                          "records"),
    "trace_decode_token_ids": ((None,), "pagedkit records no decode traces"),
}


def check_vllm_only_options(options: dict) -> None:
    """Refuse, by name, a vLLM sampling option pagedkit does not implement
    (`VLLM_ONLY_OPTIONS`) unless its value changes nothing; a name neither
    has is left to Python's own TypeError."""
    for name, value in options.items():
        if name not in VLLM_ONLY_OPTIONS:
            continue
        accepted, why = VLLM_ONLY_OPTIONS[name]
        if not any(is_value(value, a) for a in accepted):
            raise TypeError(f"SamplingParams: {name}={value!r} is vLLM's, not pagedkit's "
                            f"({why}); pagedkit takes {name}={shown(accepted[0])} (docs/api.md, "
                            "'Sampling options vLLM has and pagedkit does not')")


def shown(value: object) -> str:
    """`value` as a script spells it: ``RequestOutputKind.CUMULATIVE`` for a
    member of an enum, repr() for anything else."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


#: The options beam search inside one request leaves out, with the values
#: that mean "not set" (`SamplingParams._check_beam_options`).
BEAM_DEFAULTS = {"top_p": (1,), "top_k": (0, -1), "min_p": (0,), "presence_penalty": (0,),
                 "frequency_penalty": (0,), "repetition_penalty": (1,), "stop": ([],),
                 "logprobs": (None,), "prompt_logprobs": (None,)}


@dataclass(frozen=True)
class SamplingParams(metaclass=VllmNames):
    """Decoding settings for one request; checked when built, so a bad value
    never reaches the engine.

    * ``temperature == 0`` is greedy decoding (argmax).
    * ``n > 1`` returns n samples; they share the prompt's KV blocks (paper §4.4,
      parallel sampling) and fork only when they diverge.
    * ``use_beam_search`` keeps ``beam_width`` (default ``n``) beams that fork
      and free blocks by reference count with copy-on-write (paper §4.4), and
      returns the ``n`` best.

    The other fields are vLLM's, with vLLM's meaning (docs/api.md): the
    penalties and ``min_p`` change the logits a token is picked from;
    ``stop`` strings end a completion once its text holds one;
    ``logprobs`` / ``prompt_logprobs`` report the model's own (raw)
    log-probabilities of each position's top tokens. An option left at its
    default costs nothing: the engine's plain path never looks further.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: no limit (vLLM's default is 0)
    max_tokens: int | None = 16  # None: up to the model's length (vLLM's)
    min_tokens: int = 0
    seed: int | None = None  # -1: None, as vLLM
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    use_beam_search: bool = False
    beam_width: int | None = None
    length_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_p: float = 0.0
    stop: str | list[str] | None = None
    include_stop_str_in_output: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    #: set from the fields above: does a token need more than the plain pick?
    penalized: bool = field(init=False, repr=False, compare=False, default=False)
    #: set from `temperature`: is every token the most likely one (argmax)?
    greedy: bool = field(init=False, repr=False, compare=False, default=False)

    #: unhashable, as vLLM's: `stop` and `stop_token_ids` are lists
    __hash__ = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        check_int("n", self.n, minimum=1)
        # vLLM takes a float for the two token counts: a whole one (5.0) is
        # that count, stored as an int; another (5.5) is refused (docs/api.md)
        if self.max_tokens is not None:
            object.__setattr__(self, "max_tokens", check_int(
                "max_tokens", self.max_tokens, minimum=1, whole_floats=True))
        object.__setattr__(self, "min_tokens", check_int(
            "min_tokens", self.min_tokens, minimum=0, whole_floats=True))
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens={self.min_tokens} is more than max_tokens="
                             f"{self.max_tokens}: give min_tokens <= max_tokens")
        for name in ("temperature", "top_p", "length_penalty", "presence_penalty",
                     "frequency_penalty", "repetition_penalty", "min_p"):
            self._check_real(name)
        if not _is_finite(self.temperature) or not self.temperature >= 0:
            raise ValueError(f"temperature must be a finite number >= 0, got "
                             f"{self.temperature!r}")
        if 0 < self.temperature < MIN_TEMPERATURE:  # vLLM 0.32's rule, and its floor
            warn_at_caller(f"temperature={self.temperature!r} is below {MIN_TEMPERATURE}: the "
                           "logits divided by it overflow float32 (inf, then nan); raised to "
                           f"{MIN_TEMPERATURE}, as vLLM does. temperature=0 is greedy decoding")
            object.__setattr__(self, "temperature", MIN_TEMPERATURE)
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not _is_finite(self.length_penalty):
            raise ValueError(f"length_penalty must be a finite number, got "
                             f"{self.length_penalty!r}")
        check_int("top_k", self.top_k)
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 or -1 (no limit) or >= 1, got {self.top_k}")
        if self.seed is not None:
            # stored as an int: torch.Generator.manual_seed refuses a numpy integer
            seed = check_int("seed", self.seed)
            if not -1 <= seed <= MAX_SEED:
                raise ValueError(f"seed must be in [0, 2**64 - 1], or -1 or None for no seed "
                                 f"(vLLM's), got {seed}")
            object.__setattr__(self, "seed", None if seed == -1 else seed)  # vLLM's -1: unseeded
        check_bool("ignore_eos", self.ignore_eos)
        check_bool("use_beam_search", self.use_beam_search)
        if self.stop_token_ids is None:  # vLLM's default
            object.__setattr__(self, "stop_token_ids", [])
        if isinstance(self.stop_token_ids, (str, bytes)) or not hasattr(
                self.stop_token_ids, "__iter__"):
            raise TypeError(f"stop_token_ids must be a list of token ids, got "
                            f"{self.stop_token_ids!r}")
        # a list of its own, each id once (vLLM's): the caller's list is not kept
        object.__setattr__(self, "stop_token_ids", list(dict.fromkeys(
            check_int(f"stop_token_ids[{i}]", t, minimum=0)
            for i, t in enumerate(self.stop_token_ids))))
        self._check_vllm_options()
        if self.use_beam_search:
            width = self.n if self.beam_width is None else check_int(
                "beam_width", self.beam_width, minimum=1)
            if width < self.n:
                raise ValueError(f"beam_width ({width}) must be >= n ({self.n}): "
                                 "beam search returns the n best of its beams")
            if self.temperature != 0:
                default = (" (SamplingParams' default temperature is 1.0)"
                           if self.temperature == 1 else "")
                raise ValueError("beam search is deterministic: use temperature=0, got "
                                 f"{self.temperature}{default}")
            object.__setattr__(self, "beam_width", width)
            self._check_beam_options()
        elif self.beam_width is not None:
            raise ValueError("beam_width only applies with use_beam_search=True")

    def _check_beam_options(self) -> None:
        """Beam search ranks whole beams by the model's own log-probabilities:
        an option that would filter, reshape or report a sampled token's
        distribution is refused by name, not ignored."""
        given = [name for name, default in BEAM_DEFAULTS.items()
                 if getattr(self, name) not in default]
        if given:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in given)
            raise ValueError(
                f"{values}: not used by use_beam_search=True, which ranks whole beams by the "
                "model's own log-probabilities; leave "
                f"{'it' if len(given) == 1 else 'them'} at the default "
                "(docs/api.md, 'Decoding: SamplingParams')")

    def _check_real(self, name: str) -> None:
        """A float option is a real number: a string, bool or tensor is a TypeError
        naming its type (as `check_int`'s); another real type (numpy.float32) is
        stored as a Python float, as numpy integers are taken for int options."""
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
        if not isinstance(value, (int, float)):
            object.__setattr__(self, name, float(value))

    def _check_vllm_options(self) -> None:
        """The options vLLM has and the engine's first version had not, with
        vLLM's limits (its error messages name the same bounds)."""
        for name, low, high in (("presence_penalty", -2, 2), ("frequency_penalty", -2, 2),
                                ("min_p", 0, 1)):
            value = getattr(self, name)
            if not _is_number(value) or not low <= value <= high:
                raise ValueError(f"{name} must be a number in [{low}, {high}], got {value!r}")
        if not _is_finite(self.repetition_penalty) or not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be a finite number > 0, got "
                             f"{self.repetition_penalty!r}")
        if not MIN_PENALTY <= self.repetition_penalty <= 1 / MIN_PENALTY:
            raise ValueError(f"repetition_penalty={self.repetition_penalty!r} is outside "
                             f"[{MIN_PENALTY}, {1 / MIN_PENALTY:g}]: a logit scaled by it (or "
                             "by its inverse) can overflow float32 (inf, then nan); give a "
                             "penalty in that range (1 is none; above 1 discourages repeats)")
        for name in ("include_stop_str_in_output", "detokenize", "skip_special_tokens"):
            check_bool(name, getattr(self, name))
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is True:  # vLLM's shorthand for 1
                object.__setattr__(self, name, 1)
            elif value is not None:
                check_int(name, value, minimum=-1)  # -1: the whole vocabulary
        object.__setattr__(self, "stop", _stop_strings(self.stop))
        if self.stop and not self.detokenize:
            raise ValueError("stop strings are matched in the output text: they need "
                             "detokenize=True (or use stop_token_ids)")
        object.__setattr__(self, "greedy", self.temperature == 0)
        object.__setattr__(self, "penalized", bool(
            self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1
            or self.min_p))

    def __getattr__(self, name: str) -> object:
        """Only for a name it has not: vLLM's say so (`VLLM_ONLY_ATTRIBUTES`)."""
        from .vllm_names import vllm_only_attribute

        raise vllm_only_attribute("SamplingParams", self, name)

    @property
    def num_sequences(self) -> int:
        """How many sequences the request runs at once after its prompt."""
        return self.beam_width if self.use_beam_search else self.n

    def clone(self) -> SamplingParams:
        """A copy with lists of its own, checked again, as vLLM's ``clone()``
        (a deep copy): the engine takes one of each request's params, so a
        list changed afterwards (``params.stop.append(...)``) reaches no
        request already added. To change a field, make a new one with
        ``dataclasses.replace(params, max_tokens=...)`` (checked again)."""
        return dataclasses.replace(self)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value: object) -> bool:
    return _is_number(value) and math.isfinite(value)


def _stop_strings(stop: object) -> list[str]:
    """`stop` as a list of its own of non-empty strings, as vLLM keeps it
    (vLLM takes one string or a list; a tuple is taken too)."""
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, (list, tuple)):
        raise TypeError(f"stop must be a string or a list of strings, got {stop!r} "
                        f"({type(stop).__name__})")
    for i, s in enumerate(stop):
        if not isinstance(s, str):
            raise TypeError(f"stop[{i}] must be a string, got {s!r} ({type(s).__name__})")
        if not s:
            raise ValueError(f"stop[{i}] must be a non-empty string, got {s!r}")
    return list(stop)


@dataclass(frozen=True)
class BeamSearchParams:
    """vLLM's ``BeamSearchParams``, for `LLM.beam_search` (`pagedkit.engine.offline_beam`)."""

    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        check_int("beam_width", self.beam_width, minimum=1)
        # 0, as in vLLM 0.32: each prompt's one beam is the prompt itself; 5.0 is 5, as in
        # SamplingParams
        object.__setattr__(self, "max_tokens", check_int("max_tokens", self.max_tokens,
                                                         minimum=0, whole_floats=True))
        check_number("temperature", self.temperature, minimum=0)
        check_number("length_penalty", self.length_penalty)
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            check_bool(name, getattr(self, name))


def _init_naming_options(init, vllm_only_options: Mapping = MappingProxyType({})):
    """A params class's dataclass ``__init__`` that refuses a name it does not
    take with the closest one it does (``temprature``: "did you mean
    'temperature'?"), and takes vLLM's other options by name
    (`check_vllm_only_options`) before the fields."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        takes = [f.name for f in dataclasses.fields(self) if f.init]
        for name in kwargs:
            if name not in takes and name not in vllm_only_options:
                raise TypeError(f"{type(self).__name__} got an unexpected keyword argument "
                                f"{name!r}{did_you_mean(name, [*takes, *vllm_only_options])}")
        vllm_only = {k: kwargs.pop(k) for k in list(kwargs) if k in vllm_only_options}
        check_vllm_only_options(vllm_only)
        init(self, *args, **kwargs)

    return __init__


SamplingParams.__init__ = _init_naming_options(SamplingParams.__init__, VLLM_ONLY_OPTIONS)
BeamSearchParams.__init__ = _init_naming_options(BeamSearchParams.__init__)


def _refuse_assignment(self, name: str, value: object) -> None:
    """Sampling and beam search params are checked once, when built, so they
    cannot change afterwards (vLLM's can): say how to get the value wanted."""
    kind = type(self).__name__
    raise dataclasses.FrozenInstanceError(
        f"cannot assign {name}={value!r}: a {kind} is checked once, when built, and cannot "
        f"change afterwards (vLLM's can); make a new one: dataclasses.replace(params, "
        f"{name}={value!r}), or {kind}(...) with it")


def _refuse_deletion(self, name: str) -> None:
    raise dataclasses.FrozenInstanceError(
        f"cannot delete {name}: a {type(self).__name__} cannot change once built")


for _frozen in (SamplingParams, BeamSearchParams):
    _frozen.__setattr__ = _refuse_assignment
    _frozen.__delattr__ = _refuse_deletion
