"""What a policy sees for one decision: `RequestInfo` (the request, at admission), `InstanceSignals` (one
instance, as the router knows it), `PoolArrays` (a pool's signals as numpy arrays) and `ClusterView` (both
pools, in either form). The contract they belong to is `repro.routing.policies.base`'s, which exports them.

The install compiles this module (`repro.native`): the simulator makes a `RequestInfo` per request and the
router a `ClusterView` per decision as native objects, the router fills the signals and the compiled
scorers read them as native fields, without a Python attribute lookup per instance. Compiled, a field
takes only its declared type: ``index`` and ``in_flight`` plain Python ints, ``healthy`` a plain bool, the
float fields any real number (an int is stored as a float); a `RequestInfo`'s fields cannot be assigned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Final

import numpy as np

from repro.vocab import SloClass


class RequestInfo:
    """What the router knows about a request at admission (never its true output length). Read-only (its
    fields are `Final`: assigning one raises `AttributeError` in the compiled module); compared, hashed and
    shown by value, as a frozen dataclass is."""

    __slots__ = ("request_id", "prompt_tokens", "predicted_output_tokens", "slo_class", "arrival_s")
    __match_args__: ClassVar[tuple[str, ...]] = ("request_id", "prompt_tokens", "predicted_output_tokens",
                                                 "slo_class", "arrival_s")

    request_id: Final[str]
    """The request's id, unique within a run (the ledger's key)."""
    prompt_tokens: Final[int]
    """Prompt length (tokens)."""
    predicted_output_tokens: Final[float]
    """The predictor's estimate of the output length (tokens)."""
    slo_class: Final[SloClass]
    """``tight`` or ``loose``: selects the TTFT/TPOT targets of the cost model."""
    arrival_s: Final[float]
    """Arrival time (seconds, on the router's clock)."""

    def __init__(self, request_id: str, prompt_tokens: int, predicted_output_tokens: float, slo_class: SloClass,
                 arrival_s: float) -> None:
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.predicted_output_tokens = float(predicted_output_tokens)
        self.slo_class = slo_class
        self.arrival_s = float(arrival_s)

    def _key(self) -> tuple[str, int, float, str, float]:
        return (self.request_id, self.prompt_tokens, self.predicted_output_tokens, self.slo_class, self.arrival_s)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RequestInfo):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"RequestInfo(request_id={self.request_id!r}, prompt_tokens={self.prompt_tokens!r}, "
                f"predicted_output_tokens={self.predicted_output_tokens!r}, slo_class={self.slo_class!r}, "
                f"arrival_s={self.arrival_s!r})")

    def __reduce__(self) -> tuple[type[RequestInfo], tuple[str, int, float, str, float]]:
        return (RequestInfo, self._key())


@dataclass(slots=True)
class InstanceSignals:
    """One instance as the router sees it (never the engine's internal truth).

    Mutable on purpose: the `Router` updates one object per instance in place before every decision
    (a speed shortcut), so a policy must read it during `Policy.place` and not keep it.
    """

    index: int
    """Position in its pool (what a `Placement` names)."""
    name: str
    """The instance's name (from the topology)."""
    backlog_s: float
    """Ledger: priced seconds of work still outstanding on it (the router's cost model)."""
    in_flight: int
    """Ledger: requests dispatched to it and not yet settled."""
    in_flight_tokens: float
    """Ledger: tokens of those requests (prefill pool: prompt tokens still to prefill; decode pool:
    prompt + estimated output)."""
    kv_usage: float
    """Last polled ``vllm:kv_cache_usage_perc`` (fraction, 0..1)."""
    kv_age_s: float
    """Age of that poll (seconds)."""
    healthy: bool = True
    """False while the instance does not answer; a policy must not place on it."""


@dataclass(slots=True, frozen=True)
class PoolArrays:
    """One pool's signals as numpy arrays, element i = instance i: the same numbers as the
    `InstanceSignals` of ``ClusterView.prefill`` / ``ClusterView.decode`` (bit for bit), for
    policies that price a large pool at once. Read-only and, like the signals, valid during
    `Policy.place` only: the router hands over its own live arrays (a speed shortcut)."""

    backlog_s: np.ndarray
    """Ledger seconds of priced work outstanding (float64, s)."""
    in_flight: np.ndarray
    """Ledger requests in flight (int64)."""
    in_flight_tokens: np.ndarray
    """Ledger tokens of those requests (float64, tokens)."""
    kv_usage: np.ndarray
    """Last polled KV usage (float64, fraction 0..1)."""
    kv_age_s: np.ndarray
    """Age of that poll (float64, s)."""
    healthy: np.ndarray
    """Health (bool)."""

    @classmethod
    def of(cls, pool: list[InstanceSignals]) -> PoolArrays:
        """The arrays of a list of signals (``pool[i].index == i``)."""
        return cls(
            np.array([s.backlog_s for s in pool], dtype=np.float64),
            np.array([s.in_flight for s in pool], dtype=np.int64),
            np.array([s.in_flight_tokens for s in pool], dtype=np.float64),
            np.array([s.kv_usage for s in pool], dtype=np.float64),
            np.array([s.kv_age_s for s in pool], dtype=np.float64),
            np.array([s.healthy for s in pool], dtype=bool),
        )

    def write(self, pool: list[InstanceSignals]) -> None:
        """Write these values into ``pool``'s signals (``pool[i].index == i``)."""
        for s, b, n, t, kv, age, ok in zip(pool, self.backlog_s.tolist(), self.in_flight.tolist(),
                                           self.in_flight_tokens.tolist(), self.kv_usage.tolist(),
                                           self.kv_age_s.tolist(), self.healthy.tolist(), strict=True):
            s.backlog_s, s.in_flight, s.in_flight_tokens, s.kv_usage, s.kv_age_s, s.healthy = b, n, t, kv, age, ok


class ClusterView:
    """Snapshot handed to a policy for one decision.

    Two equivalent forms of the same numbers (bit for bit): ``prefill`` / ``decode`` (lists of
    `InstanceSignals`) and `arrays` (`PoolArrays`, for vectorised pricing of large pools). A test
    builds ``ClusterView(now_s, prefill, decode)`` from lists; the `Router` of a large pool builds
    it lazily: ``arrays`` a callable making the arrays, ``fill`` a callable bringing the lists'
    signals up to date, so that only the form a policy reads is made (the other, if read later, is
    derived from it).
    """

    __slots__ = ("now_s", "_prefill", "_decode", "_arrays", "_fill")

    def __init__(
        self,
        now_s: float,
        prefill: list[InstanceSignals],
        decode: list[InstanceSignals],
        *,
        arrays: Callable[[], tuple[PoolArrays, PoolArrays]] | None = None,
        fill: Callable[[], None] | None = None,
    ) -> None:
        self.now_s = now_s
        """Decision time (seconds, on the router's clock)."""
        self._prefill = prefill
        self._decode = decode
        self._arrays: tuple[PoolArrays, PoolArrays] | Callable[[], tuple[PoolArrays, PoolArrays]] | None = arrays
        self._fill = fill

    def _lists(self) -> None:
        fill, self._fill = self._fill, None
        if isinstance(self._arrays, tuple):  # already made: the lists follow them
            self._arrays[0].write(self._prefill)
            self._arrays[1].write(self._decode)
        elif fill is not None:
            fill()

    @property
    def prefill(self) -> list[InstanceSignals]:
        """The prefill pool, ``prefill[i].index == i``."""
        if self._fill is not None:
            self._lists()
        return self._prefill

    @property
    def decode(self) -> list[InstanceSignals]:
        """The decode pool, ``decode[i].index == i``."""
        if self._fill is not None:
            self._lists()
        return self._decode

    @property
    def n_prefill(self) -> int:
        """Instances in the prefill pool (without building the signals)."""
        return len(self._prefill)

    @property
    def n_decode(self) -> int:
        """Instances in the decode pool (without building the signals)."""
        return len(self._decode)

    def arrays(self) -> tuple[PoolArrays, PoolArrays]:
        """(prefill, decode) as `PoolArrays`."""
        made = self._arrays
        if isinstance(made, tuple):
            return made
        if made is not None and self._fill is not None:  # the lists are not up to date: the source
            made = made()
        else:
            made = (PoolArrays.of(self._prefill), PoolArrays.of(self._decode))
        self._arrays = made
        return made
