"""One request inside the emulated engine (`Seq`) and the states it passes through.

States: ``waiting`` (queued, or preempted back to the queue head), ``waiting_for_remote_kvs``
(a P/D decode-side request whose KV is being pulled), ``running``, ``finished``, ``aborted``.
Counts are tokens, times are physics seconds of the driver's clock (see `Seq`). The scheduler
(`repro.emulator.core.EngineCore`) moves a `Seq` between the states; the metrics
(`repro.emulator.vllm_metrics`) read it, the drivers (`repro.emulator.engine`, the routes, the
benchmark's virtual clock) create it and own its ``out`` and ``info``. Imports nothing of the
emulator at run time (the model's type only under ``TYPE_CHECKING``), so every emulator module can
name it without an import circle.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from repro.emulator.model import OutputFunction

WAITING = "waiting"
PULLING = "waiting_for_remote_kvs"
RUNNING = "running"
FINISHED = "finished"
ABORTED = "aborted"

_counter = itertools.count()


class Seq:
    """One request inside the engine.

    Counts are tokens: ``P`` prompt, ``T`` tokens to compute before the next output token (prompt,
    plus what was generated before a preemption), ``computed`` of those done, ``g`` generated (EOS
    included; while decoding, `EngineCore.generated` has the live count), ``target`` the output
    length at which it finishes (``finish_kind``: "stop" or "length"). Times (``arrival``,
    ``first_sched``, ``first_token_t``, ``finish_t``, ``handoff_expiry``) are physics seconds of the
    driver's clock. ``remote``: the ``kv_transfer_params`` of a remote prefill (pull the KV instead
    of computing the prompt; ignored for a one-token prompt); ``prefill_only``: a P/D prefill whose
    blocks are held for the decode engine (``kv_params`` then names them). ``notify`` is called
    whenever the sequence has news (first token, stream flush, finish, abort); ``out`` and ``info``
    belong to the driver (the core never reads them).
    """

    __slots__ = (
        "rid", "prompt_ids", "P", "T", "computed", "g", "g0", "s0", "target", "finish_kind",
        "blocks", "state", "epoch", "prefill_only", "remote", "kv_loaded", "stream", "arrival",
        "first_sched", "first_token_t", "finish_t", "finish_reason", "cached_tokens", "hashes",
        "notify", "out", "max_tokens", "handoff_expiry", "transfer_tokens", "order", "decoding",
        "kv_params", "hit_blocks", "pull_ok", "info",
    )

    def __init__(
        self,
        rid: str,
        prompt_ids: list[int],
        *,
        target: int,
        finish_kind: str = "length",
        max_tokens: int | None = None,
        prefill_only: bool = False,
        remote: dict[str, Any] | None = None,
        stream: bool = False,
        arrival: float = 0.0,
        notify: Callable[[], None] | None = None,
        out: OutputFunction | None = None,
        info: dict[str, Any] | None = None,
    ):
        self.rid = rid
        self.prompt_ids = prompt_ids
        self.P = len(prompt_ids)
        self.T = self.P
        self.computed = 0
        self.g = 0
        self.g0 = 0
        self.s0 = 0
        self.target = max(1, int(target))
        self.finish_kind = finish_kind  # reason when g reaches target: "length" or "stop"
        self.max_tokens = max_tokens if max_tokens is not None else self.target
        self.blocks: list[int] = []
        self.state = WAITING
        self.epoch = 0
        self.prefill_only = prefill_only
        self.remote = remote if (remote is not None and self.P > 1) else None
        self.kv_loaded = False
        self.stream = stream
        self.arrival = arrival
        self.first_sched: float | None = None
        self.first_token_t: float | None = None
        self.finish_t: float | None = None
        self.finish_reason: str | None = None
        self.cached_tokens = 0
        self.hashes: list[int] | None = None
        self.notify = notify
        self.out = out
        self.handoff_expiry = 0.0
        self.transfer_tokens = 0
        self.order = next(_counter)
        self.decoding = False
        self.kv_params: dict[str, Any] | None = None
        self.hit_blocks = 0
        self.pull_ok: bool | None = None
        self.info = info
