"""Validation of a completion or chat-completion body into `ParsedRequest`, with vLLM 0.12's
error messages and statuses (every refusal raises `ApiError`)."""

from __future__ import annotations

import json
from typing import Any

from repro.emulator.model import TOKENIZER, detokenize, message_text, render_chat
from repro.emulator.routes.errors import ApiError, validation_error

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class ParsedRequest:
    """One validated request. Token counts are tokens; ``explicit_max`` is the client's
    ``max_tokens`` (chat: ``max_completion_tokens`` first), None when it left the limit to the
    context length; ``kv`` is the raw ``kv_transfer_params`` (or None)."""

    __slots__ = ("prompt_ids", "prompt_text", "explicit_max", "ignore_eos", "min_tokens",
                 "temperature", "seed", "stream", "include_usage", "continuous_usage", "kv", "echo")

    prompt_ids: list[int]
    prompt_text: str
    explicit_max: int | None
    ignore_eos: bool
    min_tokens: int
    temperature: float | None
    seed: int | None
    stream: bool
    include_usage: bool
    continuous_usage: bool
    kv: dict[str, Any] | None
    echo: bool


def completion_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body (an empty body is not one)."""
    try:
        body = json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise validation_error(f"JSON decode error: {what}", (0,), raw.decode("utf-8", "replace")[:200],
                               "json_invalid") from None
    if not isinstance(body, dict):
        raise validation_error("Input should be a valid dictionary or object to extract fields from", (), body,
                               "model_attributes_type")
    return body


def check_model(body: dict[str, Any], model_name: str) -> None:
    """A ``model`` other than the served one is a 404 (absent or empty means the served one)."""
    m = body.get("model")
    if m not in (None, "") and m != model_name:
        raise ApiError(f"The model `{m}` does not exist.", err_type="NotFoundError", status=404, param="model")


def _get_int(body: dict, key: str, default: int | None) -> int | None:
    if key not in body or body[key] is None:
        return default
    v = body[key]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise validation_error("Input should be a valid integer", (key,), v, "int_type")
    return v


def _get_float(body: dict, key: str, default: float | None) -> float | None:
    if key not in body or body[key] is None:
        return default
    v = body[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise validation_error("Input should be a valid number", (key,), v, "float_type")
    return float(v)


def _get_bool(body: dict, key: str, default: bool) -> bool:
    if key not in body or body[key] is None:
        return default
    v = body[key]
    if not isinstance(v, bool):
        if v in (0, 1):
            return bool(v)
        raise validation_error("Input should be a valid boolean", (key,), v, "bool_type")
    return v


def _common(body: dict, p: ParsedRequest, *, chat: bool) -> None:
    p.ignore_eos = _get_bool(body, "ignore_eos", False)
    p.min_tokens = _get_int(body, "min_tokens", 0) or 0
    p.temperature = _get_float(body, "temperature", None)
    p.seed = _get_int(body, "seed", None)
    if p.seed is not None and not (_LONG_MIN <= p.seed <= _LONG_MAX):
        raise validation_error("Input should be less than or equal to 9223372036854775807", ("seed",), p.seed)
    p.stream = _get_bool(body, "stream", False)
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise validation_error("Input should be a valid dictionary or instance of StreamOptions",
                                   ("stream_options",), so, "model_type")
        if not p.stream:
            raise validation_error("Value error, Stream options can only be defined when `stream=True`.", (), body)
        p.include_usage = bool(so.get("include_usage", True) if so.get("include_usage") is not None else True)
        p.continuous_usage = bool(so.get("continuous_usage_stats") or False)
    else:
        p.include_usage = False
        p.continuous_usage = False
    n = _get_int(body, "n", 1)
    if n != 1:
        raise ApiError("n > 1 is not supported by the emulated engine", param="n")
    if body.get("logprobs") not in (None, False) or body.get("prompt_logprobs") is not None:
        raise ApiError("logprobs are not supported by the emulated engine", param="logprobs")
    if body.get("use_beam_search"):
        raise ApiError("beam search is not supported by the emulated engine")
    kv = body.get("kv_transfer_params")
    if kv is not None and not isinstance(kv, dict):
        raise validation_error("Input should be a valid dictionary", ("kv_transfer_params",), kv, "dict_type")
    p.kv = kv
    if chat:
        mct = _get_int(body, "max_completion_tokens", None)
        mt = _get_int(body, "max_tokens", None)
        p.explicit_max = mct if mct is not None else mt
    else:
        p.explicit_max = _get_int(body, "max_tokens", 16)


def parse_completion(body: dict[str, Any]) -> ParsedRequest:
    """A ``/v1/completions`` body: one prompt (a string or a list of token ids; a list of exactly
    one such prompt is accepted too)."""
    p = ParsedRequest()
    if "prompt" not in body or body["prompt"] is None:
        if body.get("prompt_embeds") is not None:
            raise ApiError("prompt_embeds are not supported by the emulated engine")
        raise validation_error("Value error, Either prompt or prompt_embeds must be provided and non-empty.", (), body)
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        p.prompt_text = prompt
        p.prompt_ids = TOKENIZER.encode(prompt)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        p.prompt_text = detokenize(prompt)
        p.prompt_ids = list(prompt)
    elif isinstance(prompt, list):
        raise ApiError("batched prompts (a list of several prompts) are not supported by the emulated engine",
                       param="prompt")
    else:
        raise validation_error("Input should be a valid string", ("prompt",), prompt, "string_type")
    if not p.prompt_ids:
        raise ApiError("The prompt cannot be empty.", param="prompt")
    _common(body, p, chat=False)
    p.echo = _get_bool(body, "echo", False)
    if body.get("suffix") is not None:
        raise ApiError("suffix is not currently supported")
    return p


def parse_chat(body: dict[str, Any], model_name: str) -> ParsedRequest:
    """A ``/v1/chat/completions`` body: the messages rendered with the chat template of ``model_name``."""
    p = ParsedRequest()
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise validation_error("Field required" if msgs is None else "Input should be a valid list", ("messages",),
                               msgs, "missing" if msgs is None else "list_type")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise validation_error("Input should be a valid message with a 'role'", ("messages", i), m)
        try:
            message_text(m.get("content"))
        except ValueError as exc:
            raise ApiError(str(exc), param="messages") from None
    p.prompt_text = render_chat(msgs, model_name, _get_bool(body, "add_generation_prompt", True))
    p.prompt_ids = TOKENIZER.encode(p.prompt_text)
    _common(body, p, chat=True)
    p.echo = False
    return p


def resolve_max_tokens(p: ParsedRequest, max_model_len: int) -> int:
    """The output limit in tokens (the explicit one, else what the context has left), after vLLM's
    checks of the prompt length, ``max_tokens``, ``temperature`` and ``min_tokens``."""
    P = len(p.prompt_ids)
    if P >= max_model_len:
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{P} input tokens. Please reduce the length of the input messages.",
            param="input_tokens",
        )
    if p.explicit_max is not None:
        if p.explicit_max < 1:
            raise ApiError(f"max_tokens must be at least 1, got {p.explicit_max}.", param="max_tokens")
        if P + p.explicit_max > max_model_len:
            raise ApiError(
                f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                f"{P + p.explicit_max} tokens ({P} in the messages, {p.explicit_max} in the completion). "
                f"Please reduce the length of the messages or completion.",
                param="max_tokens",
            )
        max_tokens = p.explicit_max
    else:
        max_tokens = max_model_len - P
    if p.temperature is not None and p.temperature < 0:
        raise ApiError(f"temperature must be non-negative, got {p.temperature}.", param="temperature")
    if p.min_tokens < 0:
        raise ApiError(f"min_tokens must be greater than or equal to 0, got {p.min_tokens}.", param="min_tokens")
    if p.min_tokens > max_tokens:
        raise ApiError(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {p.min_tokens}.",
                       param="min_tokens")
    return max_tokens
