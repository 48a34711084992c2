"""`LLM`: the front door, shaped like vLLM's, so what a learner writes here
carries over to vLLM itself."""

from __future__ import annotations

import contextlib
import itertools
import numbers
from collections.abc import Callable, Iterator
from collections.abc import Sequence as SequenceLike
from typing import Any

from tqdm.auto import tqdm

from .._validation import PromptInput, check_bool, check_int, check_prompt, plural
from ..i18n import _
from ..sampling_params import SamplingParams, VllmNames
from ..vllm_names import vllm_only_attribute
from .args import check_call_args, engine_args_kwargs, split_engine_args
from .llm_engine import LLMEngine
from .offline_beam import BeamSearchOutput, BeamSearchParams
from .offline_beam import beam_search as offline_beam_search
from .outputs import RequestOutput, StepOutput

Prompt = str | SequenceLike[int] | dict[str, Any]  # see generate


class LLM(metaclass=VllmNames):
    """Generate text with a paged engine.

    >>> llm = LLM("tiny", num_blocks=64)                                   # doctest: +SKIP
    >>> llm.generate(["Once upon a time"], SamplingParams(max_tokens=8))  # doctest: +SKIP

    All keyword arguments go to `LLMEngine` (``block_size``, ``num_blocks``,
    ``kv_cache_memory``, ``enable_prefix_caching``, ``preemption_mode``,
    ``swap_space``, ``max_num_seqs``, ``max_num_batched_tokens``,
    ``enable_chunked_prefill``, ``max_model_len``, ``device``, ``dtype``,
    ``gpu_memory_utilization``, ``seed``; see docs/api.md), with vLLM's
    arguments that change nothing on one device (``tensor_parallel_size=1``,
    ``enforce_eager``, ...; `pagedkit.engine.args`); any other is refused
    by name. The engine is `llm.llm_engine`, as in vLLM.
    """

    def __init__(self, model: Any = "tiny", tokenizer: Any = None, **engine_args: Any) -> None:
        split_engine_args("LLM", engine_args)  # a wrong name is the caller's, not the engine's
        self.llm_engine = LLMEngine(model, tokenizer, **engine_args)
        self._next_id = 0  # generate's next request id, "0", "1", ... (vLLM's counter)

    def __repr__(self) -> str:
        """The engine's, under this name (newcomer 41: it was Python's default)."""
        return "LLM" + repr(self.llm_engine).removeprefix("LLMEngine")

    @classmethod
    def from_engine_args(cls, engine_args: Any) -> LLM:
        """vLLM's other way to build an `LLM`: from an `EngineArgs`."""
        return cls(**engine_args_kwargs("LLM", engine_args))

    def __getattr__(self, name: str) -> Any:
        """Only for a name the LLM has not: vLLM's ``embed``, ``get_metrics``,
        ... say what pagedkit offers instead
        (`pagedkit.vllm_names.VLLM_ONLY_ATTRIBUTES`)."""
        raise vllm_only_attribute("LLM", self, name)

    def get_tokenizer(self):
        return self.llm_engine.tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """What `generate` and `chat` use without sampling parameters, as in
        vLLM: `SamplingParams()` with what the model's generation config
        sets (temperature, top_k, top_p, min_p, the penalties,
        max_new_tokens as max_tokens)."""
        return SamplingParams(**self.llm_engine.generation_defaults)

    def chat(self, messages: Any, sampling_params: Any = None,
             use_tqdm: bool | Callable[..., Any] = True, *,
             chat_template: str | None = None, add_generation_prompt: bool = True,
             continue_final_message: bool = False,
             chat_template_kwargs: dict[str, Any] | None = None,
             **vllm_args: Any) -> list[RequestOutput]:
        """vLLM's ``chat``: each conversation (a list of ``{"role", "content"}``
        messages; `messages` is one or a list of them) rendered by the
        tokenizer's chat template (or `chat_template`) and generated from.
        The rendered text is the output's `prompt`; it is tokenized without
        adding special tokens (the template writes them), as vLLM does.

        The tiny model answers no question: trained on children's stories
        only, it continues a chat with story fragments, which show what
        `chat` sends the engine. For real answers, load an instruction-tuned
        model with a chat template, e.g. ``LLM("Qwen/Qwen2.5-0.5B-Instruct")``
        (docs/api.md). vLLM's other arguments (``lora_request``, ``priority``,
        ``tools``, ...) are taken where they change nothing (`VLLM_CALL_ARGS`)."""
        conversations = _conversations(messages)
        check_call_args("LLM.chat()", vllm_args, (
            "lora_request", "priority", "tools", "chat_template_content_format",
            "tokenization_kwargs", "mm_processor_kwargs"), prompts=len(conversations))
        check_bool("add_generation_prompt", add_generation_prompt)
        check_bool("continue_final_message", continue_final_message)
        if add_generation_prompt and continue_final_message:
            raise ValueError("continue_final_message=True continues the last message: give "
                             "add_generation_prompt=False with it")
        tokenizer = self.get_tokenizer()
        if tokenizer is None:
            raise ValueError("chat needs a tokenizer and this engine has none: build the LLM "
                             "with one (LLM(model, tokenizer=...)), or call generate with "
                             "token ids")
        if chat_template is None and getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template: give chat_template=... "
                             "(a Jinja string), or use generate")
        template = chat_template if chat_template is not None else tokenizer.chat_template
        prompts = []
        for conversation in conversations:
            # a "developer" message the template does not know becomes system, as in vLLM
            text = tokenizer.apply_chat_template(
                _developer_as_system(conversation, template), tokenize=False,
                chat_template=chat_template, add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message, **(chat_template_kwargs or {}))
            prompts.append((text, tokenizer(text, add_special_tokens=False)["input_ids"]))
        own, earlier = self._generate([ids for _text, ids in prompts], sampling_params,
                                      use_tqdm, None, {})
        for output, (text, _ids) in zip(own, prompts, strict=True):
            output.prompt = text
        return sorted([*own, *earlier], key=_vllm_order)

    def beam_search(self, prompts: Any, params: BeamSearchParams, use_tqdm: bool = False,
                    concurrency_limit: int | None = None, *,
                    lora_request: Any = None) -> list[BeamSearchOutput]:
        """vLLM's ``beam_search`` (`pagedkit.engine.offline_beam`): the
        ``beam_width`` best beams of each prompt, each with all its tokens
        (the prompt's first) and text, best first."""
        check_call_args("LLM.beam_search()", {"lora_request": lora_request}, ("lora_request",))
        if not isinstance(params, BeamSearchParams):
            raise TypeError(f"params must be a BeamSearchParams, got {type(params).__name__}")
        check_bool("use_tqdm", use_tqdm)
        if concurrency_limit is not None:
            check_int("concurrency_limit", concurrency_limit, minimum=1)
        self._check_beam_width(params.beam_width)
        prompts = _beam_prompts(prompts)
        # an error names a prompt as generate's do: its place in the list, if more than one
        names = ([f"prompts[{i}]" for i in range(len(prompts))] if len(prompts) > 1
                 else ["beam_search()"] * len(prompts))
        checked = [self.llm_engine.check_prompt(p, who=who)
                   for p, who in zip(prompts, names, strict=True)]
        queued = list(self.llm_engine.groups)
        if queued:  # each step's generate would run them, and their outputs had no place
            shown = ", ".join(map(repr, queued[:3])) + (", ..." if len(queued) > 3 else "")
            raise ValueError(f"LLM.beam_search(): the engine holds {len(queued)} request"
                             f"{'s' * (len(queued) != 1)} queued with add_request ({shown}); "
                             "beam search runs its beams through generate, which would run "
                             "those too and return their outputs where beams are expected. "
                             "Finish them first (llm_engine.step() until "
                             "has_unfinished_requests() is False) or abort them; nothing ran")
        ids = [token_ids for _prompt, token_ids, *_rest in checked]
        salts = [salt for *_head, salt in checked]  # each beam's requests carry its prompt's
        limit = concurrency_limit or len(ids)
        outputs = []
        with self.llm_engine.one_warning(names):  # the prompts cut short, said once
            for start in range(0, len(ids), limit):
                outputs += offline_beam_search(self, ids[start:start + limit], params, use_tqdm,
                                               names[start:start + limit],
                                               salts[start:start + limit])
        return outputs

    def _check_beam_width(self, width: int) -> None:
        """Each step asks for 2 x beam_width candidates of each beam, as
        logprobs (vLLM's rule): refused here in beam_width's terms, not in
        the logprobs the user never gave. The widest beam to give instead is
        the smallest of the limits (the vocabulary, max_logprobs), so that
        it passes them all."""
        engine, asked = self.llm_engine, 2 * width
        vocab, most = engine.runner.vocab_size, engine.max_logprobs
        if asked <= vocab and (most == -1 or asked <= most):
            return
        widest = min(vocab, vocab if most == -1 else most) // 2
        fewer = f"give beam_width={widest} or less" if widest >= 1 else ""
        if asked > vocab:
            also = (f" (and than max_logprobs={most}, an engine argument)"
                    if most != -1 and asked > most and most < vocab else "")
            raise ValueError(f"beam_search(): beam_width={width} takes the 2 x beam_width = "
                             f"{asked} best candidates of each beam a step, more than the "
                             f"vocabulary's {vocab} tokens{also}; {fewer}")
        raise ValueError(f"beam_search(): beam_width={width} asks for 2 x beam_width = "
                         f"{asked} logprobs a step (vLLM's rule), more than max_logprobs="
                         f"{most} (an engine argument, vLLM's default 20); "
                         f"{fewer + ', or ' if fewer else ''}build the engine with "
                         f"LLM(..., max_logprobs={asked})")

    def get_num_unfinished_requests(self) -> int:
        return self.llm_engine.get_num_unfinished_requests()

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """Forget every cached block, for a cold cache (`LLMEngine.reset_prefix_cache`):
        True once reset, False while requests hold blocks (vLLM's rule)."""
        return self.llm_engine.reset_prefix_cache(reset_running_requests)

    def generate(self, prompts: Prompt | SequenceLike[Prompt],
                 sampling_params: SamplingParams | SequenceLike[SamplingParams] | None = None,
                 use_tqdm: bool | Callable[..., Any] = True,
                 on_step: Callable[[StepOutput], Any] | None = None,
                 **vllm_args: Any) -> list[RequestOutput]:
        """Run prompts to completion; outputs come back in input order (with
        those of any requests queued earlier by add_request: below).

        A prompt is a string, a list of token ids, ``{"prompt": str}`` or
        ``{"prompt_token_ids": [...]}`` (vLLM's forms; the second may carry
        its text as ``"prompt"``, which becomes the output's `prompt`, and
        either a ``"cache_salt"``: only requests with the same salt share
        cached prefix blocks); `prompts` is one prompt or a list of them.
        `sampling_params` is one for all prompts or a list with one per
        prompt. `use_tqdm` is True, False, or a function called as
        ``use_tqdm(total=..., desc=...)`` for a tqdm-like bar (vLLM's form).
        `on_step(step_output)` is called after every engine step (the
        widgets' live mode uses it) with its `StepOutput`: its fields
        (scheduled, new tokens, preemptions, `finished`, memory); its list
        of RequestOutputs is empty, as generate asks the engine to build
        none (it returns the finished ones; ``LLMEngine.step()`` streams).

        A call that does not return — an exception in the model or in
        `on_step`, or a KeyboardInterrupt (a notebook's "interrupt") — aborts
        its unfinished requests and frees their blocks before the error
        propagates, so nothing it queued keeps running in later calls.

        vLLM's other arguments (``lora_request``, ``priority``,
        ``tokenization_kwargs``, ``mm_processor_kwargs``) are taken where
        they change nothing (`VLLM_CALL_ARGS`) and refused by name otherwise.

        Requests queued before the call (``llm_engine.add_request``) run to
        the end too, and their outputs come back with the call's own, as
        vLLM's generate runs every request of its engine (`_vllm_order`)."""
        own, earlier = self._generate(prompts, sampling_params, use_tqdm, on_step, vllm_args)
        return sorted([*own, *earlier], key=_vllm_order)

    def _generate(self, prompts: Any, sampling_params: Any, use_tqdm: Any, on_step: Any,
                  vllm_args: dict[str, Any]) -> tuple[list[RequestOutput], list[RequestOutput]]:
        """`generate`'s work: the call's own outputs in prompt order, and those
        of the requests queued before it, in the order they finished."""
        prompts = _prompt_list(prompts)
        check_call_args("LLM.generate()", vllm_args, (
            "lora_request", "priority", "tokenization_kwargs", "mm_processor_kwargs"),
            prompts=len(prompts))
        params = _params_list(sampling_params if sampling_params is not None
                              else self.get_default_sampling_params(), len(prompts))
        _check_use_tqdm(use_tqdm)
        if on_step is not None and not callable(on_step):
            raise TypeError(f"on_step must be a function of a StepOutput, got {on_step!r}")
        engine = self.llm_engine
        ids = self._fresh_ids(len(prompts))
        # all or none; an error names a prompt by its place in the caller's list
        names = ([f"prompts[{i}]" for i in range(len(prompts))] if len(prompts) > 1
                 else ["generate()"] * len(prompts))  # no prompts: nothing to do, [] (vLLM's)
        engine.add_requests(list(zip(ids, prompts, params, strict=True)), names=names)
        self._next_id = int(ids[-1]) + 1 if ids else self._next_id  # taken once all are in
        wanted = set(ids)
        done: dict[str, RequestOutput] = {}
        earlier: list[RequestOutput] = []  # requests queued before the call (add_request)
        total = len(engine.groups) + len(engine.unreported_aborts())  # every output to come
        try:  # the requests a small KV cache cut short are said in one warning
            with engine.one_warning(names), _progress_bar(use_tqdm, total) as bar:
                # every request, as vLLM runs them, and a last step for the output of
                # one of the call's own that on_step aborted in the last step
                while engine.has_unfinished_requests() or \
                        wanted.difference(done).intersection(engine.unreported_aborts()):
                    step = engine.step(outputs=False)  # only the finished ones are read
                    for output in step.finished:  # a call's own id ends once (an on_step
                        if output.request_id in wanted and output.request_id not in done:
                            done[output.request_id] = output  # may add a request under it)
                        elif not _aborted_before(output):
                            earlier.append(output)
                        bar.update(1)
                    if on_step is not None:
                        on_step(step)
            outputs = _in_order(done, ids)
        except BaseException as error:
            aborted = self._abort_unfinished([i for i in ids if i not in done])
            if hasattr(error, "add_note"):  # Python 3.11+
                for note in _interrupted_notes(aborted, earlier):
                    error.add_note(note)
            raise
        return outputs, earlier

    def _fresh_ids(self, count: int) -> list[str]:
        """`count` request ids for a call: "0", "1", ... on from the last call,
        past ids queued with add_request, and past those of aborted requests
        whose output the next step still reports (it would be taken for the
        call's own). Asking takes none: `_generate` moves past them once its
        requests are in (a refused call leaves the numbering as it was;
        newcomer 43)."""
        taken = self.llm_engine.unreported_aborts()
        ids: list[str] = []
        candidates = itertools.count(self._next_id)
        while len(ids) < count:
            request_id = str(next(candidates))
            if request_id not in self.llm_engine.groups and request_id not in taken:
                ids.append(request_id)
        return ids

    def _abort_unfinished(self, request_ids: list[str]) -> int:
        """End this call's requests that are still in the engine (finish reason
        ``"abort"``) and free their blocks. Their outputs would come with the
        engine's next step, to a caller who never asked for them: they are
        not reported."""
        return sum(self.llm_engine.abort_request([request_id], report=False)
                   for request_id in request_ids)


def _in_order(done: dict[str, RequestOutput], ids: list[str]) -> list[RequestOutput]:
    """The call's outputs in prompt order. One is missing only where an
    ``on_step`` took it away: said by name, not a KeyError (review of stop 48)."""
    missing = [i for i in ids if i not in done]
    if missing:
        raise RuntimeError(
            f"generate(): request {missing[0]!r} of this call ended without its output "
            f"reaching generate: an on_step that aborts it with abort_request(..., "
            f"report=False), which reports nothing, or that runs the engine's step() itself, "
            f"which takes the output. Abort it with abort_request([{missing[0]!r}]) instead "
            f"(generate then returns it with finish reason 'abort' and the tokens it had), "
            f"and let generate step the engine")
    return [done[i] for i in ids]


def _interrupted_notes(aborted: int, earlier: list[RequestOutput]) -> list[str]:
    """What an error out of `generate` says it left: the call's `aborted`
    requests, and the queued requests that finished during it (`earlier`),
    whose outputs nothing returns."""
    notes = []
    if aborted:
        were, their = ("s were", "their") if aborted != 1 else (" was", "its")
        notes.append(f"pagedkit: generate() did not finish; its {aborted} unfinished "
                     f"request{were} aborted and {their} KV blocks freed (the engine is "
                     "ready for the next call)")
    if earlier:
        notes.append("pagedkit: requests queued before generate() finished during it, and "
                      "their outputs are lost with the error: "
                      + ", ".join(repr(o.request_id) for o in earlier))
    return notes


def _aborted_before(output: RequestOutput) -> bool:
    """A queued request `abort_request` ended (before `generate` ran, or from
    its `on_step`): its output comes with pagedkit's next step (docs/api.md),
    but vLLM's generate returns only requests that ran to their end, so
    generate leaves it out too."""
    return all(c.finish_reason == "abort" for c in output.outputs)


def _vllm_order(output: RequestOutput) -> tuple[int, int]:
    """`generate`'s order, vLLM 0.32's: by request id read as an integer (the
    call's own ids are "0", "1", ... in prompt order, after any earlier
    call's). vLLM raises a ValueError for an id that is no integer, once
    everything ran; pagedkit puts such a request (queued by add_request) last,
    in the order the requests finished."""
    try:
        return 0, int(output.request_id)
    except ValueError:
        return 1, 0


def _check_use_tqdm(use_tqdm: Any) -> None:
    """True, False or a function making a tqdm-like bar (vLLM's ``use_tqdm``)."""
    if not isinstance(use_tqdm, bool) and not callable(use_tqdm):
        raise TypeError(f"use_tqdm must be True, False or a function returning a tqdm-like "
                        f"bar (such as tqdm itself), got {use_tqdm!r} "
                        f"({type(use_tqdm).__name__})")


@contextlib.contextmanager
def _progress_bar(use_tqdm: bool | Callable[..., Any], total: int) -> Iterator[Any]:
    """`generate`'s bar, closed however the call ends: tqdm's (hidden for
    False), or the one `use_tqdm` makes when it is a function, called as
    vLLM calls it, with the total and a description; pagedkit then calls
    only its ``update(n)`` and ``close()``."""
    if isinstance(use_tqdm, bool):
        bar = tqdm(total=total, desc=_("generate"), disable=not use_tqdm)
    else:
        bar = use_tqdm(total=total, desc="generate")
    try:
        yield bar
    finally:
        bar.close()


def _prompt_list(prompts: Any) -> list[PromptInput]:
    """One prompt or a list of prompts, as a list of checked prompts."""
    if isinstance(prompts, (str, dict)):
        return [check_prompt(prompts)]
    if isinstance(prompts, (list, tuple)):
        if prompts and isinstance(prompts[0], numbers.Integral):
            return [check_prompt(list(prompts))]  # one prompt of token ids
        return [check_prompt(p, f"prompts[{i}]") for i, p in enumerate(prompts)]
    return [check_prompt(prompts, "prompts")]


def _beam_prompts(prompts: Any) -> list[PromptInput]:
    """`beam_search`'s prompts: a non-empty list (or tuple) of prompts, as in
    vLLM 0.32. vLLM reads one prompt not in a list item by item (a string's
    characters as prompts of their own, a dict's keys), and refuses a list of
    token ids and an empty list: pagedkit refuses them all, by name."""
    if isinstance(prompts, (str, dict)):
        raise TypeError(f"beam_search() takes a list of prompts, got one prompt {prompts!r}: "
                        "give [prompt] (vLLM 0.32 would read a string's characters, or a "
                        "dict's keys, as prompts of their own)")
    if (isinstance(prompts, (list, tuple)) and prompts
            and all(isinstance(p, numbers.Integral) for p in prompts)):
        raise TypeError(f"beam_search() takes a list of prompts, got token ids {prompts!r}: "
                        "give [{'prompt_token_ids': ids}] for one prompt of token ids (vLLM "
                        "0.32 refuses a bare list of ids here too)")
    if isinstance(prompts, (list, tuple)) and not prompts:
        raise ValueError("beam_search() got no prompts (an empty list); give at least one, "
                         "as vLLM 0.32 asks")
    return _prompt_list(prompts)


def _conversations(messages: Any) -> list[list[dict[str, Any]]]:
    """One conversation or a list of them, as a list; each message a dict
    with a role and its content as text (vLLM's "openai" form, a list of
    text parts, is joined with newlines: `_parts_text`). An
    empty list is no conversations, as in vLLM (``chat([])`` returns
    ``[]``, as ``generate([])`` does); an empty conversation in a list is
    refused by the chat template, as in vLLM."""
    if isinstance(messages, (list, tuple)) and not messages:
        return []
    one = isinstance(messages, (list, tuple)) and bool(messages) and isinstance(messages[0], dict)
    if one:  # its messages are named as the caller wrote them: messages[j]
        messages = [messages]
    if not isinstance(messages, (list, tuple)):
        raise TypeError(f"messages must be a conversation (a list of {{'role', 'content'}} "
                        f"dicts) or a list of conversations, got {messages!r}")
    return [[_message(m, f"messages[{j}]" if one else f"messages[{i}][{j}]")
             for j, m in enumerate(conversation)] for i, conversation in enumerate(messages)]


#: vLLM 0.32's text content parts: type -> the key that holds the text
#: (its MM_PARSER_MAP); a part that is a plain string is text too
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text",
              "refusal": "refusal", "thinking": "thinking"}


def _message(message: Any, name: str) -> dict[str, Any]:
    """A message as the chat template reads it. A content that is None or
    missing (an assistant turn that only called tools) is rendered as empty
    text, as vLLM renders it; a list of parts as their texts (`_parts_text`)."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise TypeError(f"{name} must be a dict with a 'role' and a 'content', got {message!r}")
    content = message.get("content")
    if content is None:
        content = ""
    if isinstance(content, (list, tuple)):
        content = _parts_text(content, f"{name}['content']")
    if not isinstance(content, str):
        raise TypeError(f"{name}['content'] must be text, got {content!r}")
    return {**message, "content": content}


def _parts_text(parts: list | tuple, name: str) -> str:
    """A message's content parts as one text, as vLLM 0.32 renders them for a
    template that reads the content as a string: each part's text (a string
    part, or a `TEXT_PARTS` dict: ``{"type": "refusal", "refusal": ...}``),
    the empty ones dropped, joined by newlines. Refused by name: a part of
    another type (an image, audio, a tool reference: pagedkit's models read
    text, and it renders no tools), and a text part without its text as a
    string (vLLM would skip it, or crash on a number)."""
    texts = []
    for i, part in enumerate(parts):
        where = f"{name}[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(part, str):
            text = part
        elif kind in TEXT_PARTS:
            text = part.get(TEXT_PARTS[kind])
            if not isinstance(text, str):
                raise TypeError(f"{where}: a {kind!r} part holds its text as a string under "
                                f"{TEXT_PARTS[kind]!r}, got {part!r}; give "
                                f"{{'type': {kind!r}, {TEXT_PARTS[kind]!r}: '...'}}")
        elif isinstance(kind, str):
            raise ValueError(f"{where}: content parts of type {kind!r} are not supported "
                             f"(pagedkit's models read text only, and it renders no tools); "
                             f"give the content as a string or as text parts (types "
                             f"{', '.join(TEXT_PARTS)}, or plain strings), got {part!r}")
        else:
            raise TypeError(f"{where} must be a string or a dict with a 'type' (a text part: "
                            f"{', '.join(TEXT_PARTS)}), got {part!r}")
        if text:  # vLLM drops an empty part
            texts.append(text)
    return "\n".join(texts)


def _developer_as_system(conversation: list[dict[str, Any]],
                         template: str | dict[str, str]) -> list[dict[str, Any]]:
    """vLLM 0.32's rule for the "developer" role (its `safe_apply_chat_template`
    in vllm/renderers/hf.py): if a conversation has a developer message and the
    chat template does not name the role (no ``"developer"`` or ``'developer'``
    in its text), each developer message becomes a system message (without its
    ``tools``), and then, if a system message is not first or there are more
    than one, all system messages become one, first: their non-empty contents
    joined by a blank line. Otherwise the conversation is left as it is."""
    texts = template.values() if isinstance(template, dict) else [template]
    if (not any(m["role"] == "developer" for m in conversation)
            or any('"developer"' in t or "'developer'" in t for t in texts)):
        return conversation
    conversation = [{k: v for k, v in {**m, "role": "system"}.items() if k != "tools"}
                    if m["role"] == "developer" else m for m in conversation]
    systems = [i for i, m in enumerate(conversation) if m["role"] == "system"]
    if systems == [0]:
        return conversation
    merged = {"role": "system",
              "content": "\n\n".join(conversation[i]["content"] for i in systems
                                      if conversation[i]["content"])}
    return [merged, *(m for m in conversation if m["role"] != "system")]


def _params_list(params: Any, n: int) -> list[SamplingParams]:
    if params is None or isinstance(params, SamplingParams):
        return [params or SamplingParams()] * n
    beams = params if isinstance(params, (list, tuple)) else [params]
    if any(isinstance(p, BeamSearchParams) for p in beams):
        raise TypeError("generate() takes SamplingParams, got a BeamSearchParams: for vLLM's "
                        "beam search call llm.beam_search(prompts, params) (vLLM 0.32's "
                        "generate refuses it too); or generate with "
                        "SamplingParams(use_beam_search=True, ...), pagedkit's beam search "
                        "inside the engine (docs/api.md)")
    if not isinstance(params, (list, tuple)):
        raise TypeError(f"sampling_params must be a SamplingParams or a list of them, got "
                        f"{params!r} ({type(params).__name__})")
    for i, p in enumerate(params):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params[{i}] must be a SamplingParams, got {p!r} "
                            f"({type(p).__name__})")
    if len(params) != n:
        raise ValueError(f"got {len(params)} sampling params for {plural(n, 'prompt')}: "
                         "give one for all (a SamplingParams, not in a list), or a list "
                         "with one per prompt")
    return list(params)
