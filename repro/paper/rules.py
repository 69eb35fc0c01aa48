"""The verdict rules: how an interval of ours and a number of the paper's become one verdict.

The rule table (docs/VERDICTS.md reads it from `RULES`; `tests/paper/test_rules.py` checks the rules
against it as a property):

- **A value** is judged on ``d = ours - paper``. Its interval carries our interval and the paper's own
  noise where the paper states it (`paper_noise`: Table II's trace-to-trace sd 0.012 over three traces),
  added in quadrature on each side. Against an **equivalence margin** ``m`` tied to the effects the paper
  draws from that kind of number (`equivalence_margin`): the whole interval of ``d`` inside ``[-m, m]``:
  equivalence shown, **reproduced**; the interval excludes zero and its point lies beyond the margin: a
  difference shown, **not reproduced**; else **within noise**, with the traces
  that would decide it (or the statement that none would: the paper's own noise is wider).
- **An ordering** (a paired difference A - B, the paper's side of zero ``claim``) is judged on its
  **direction** and its **size** apart. Direction: the interval excludes zero on the paper's side
  (shown), on the other side (**contradicted**), or holds zero (undecided). Size, where the paper states
  its gap ``g``: the interval of ``ours - g`` (with the paper's noise of a gap) inside ``[-g/2, g/2]``
  (the same size); excluding zero with its point below ``-g/2`` (smaller) or above ``g/2`` (larger); else
  undecided. The verdict:
  contradicted when the direction is; **reproduced** when the direction is shown and the size the same
  (or, with no stated gap, the direction alone); **not reproduced** when the size is shown smaller or
  larger, or, with no stated gap, when the interval lies within the tie margin of zero (a precise null);
  within noise otherwise. The reason says both parts.
- **A tie** (``claim = 0``): the whole interval within the tie margin (`tie_margin`): reproduced; the
  interval excludes zero and its point lies beyond the margin: not reproduced; else within noise.
- **input**: a number the model was given or aimed at; **context**: the paper states no number.

Every rule depends on the point and the interval alone, and weaker evidence is never kinder: widening an
interval about the same point (fewer traces) can only move a decided verdict (reproduced; not reproduced,
contradicted) to within noise, never to another decided one, and never make one (`decisiveness`). That is
why "not reproduced" asks for the point beyond the margin as well as an interval that excludes zero: a
difference shown but smaller than the margin at its point could, widened, turn an equivalence into a
difference.

Units as the row's (goodput a fraction; ``points`` are goodput x 100).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from repro.statistics.intervals import LEVEL, Estimate, t_quantile

VERDICTS = ("reproduced", "not reproduced", "contradicted", "within noise", "input", "context")
KINDS = ("value", "ordering", "input")
COUNT_UNITS = ("GPUs", "runs", "traces", "requests", "instances", "count", "workloads", "bool")
"""Integer counts: no margin (the number must be ours exactly)."""
GOODPUT_UNITS = ("", "fraction")

PAPER_TRACE_SD = 0.012
"""Table II's trace-to-trace sd of the learned router's goodput (0.860 / 0.877 / 0.855: 0.0115): the paper's
one stated measure of its own noise (a goodput fraction)."""
PAPER_TRACES = 3
"""The paper's headline experiments average three arrival traces (§IV-B)."""
SMALLEST_EFFECT = 0.029
"""The smallest goodput effect the paper draws about its router (Table II's 0.029 lead over JSQ at width 4;
its other effects are 3.2-4.7 points): a value closer to the paper's than this cannot be told from it at the
resolution of the paper's own claims (the equivalence margin of a goodput value)."""
LATENCY_EFFECT = 0.05
"""The smallest latency effect the paper draws (Fig. 6: the router's P99 TTFT 0.321 s against round-robin's
0.337 s, 5 %): the equivalence margin of a latency, relative to the number."""
TIE_MARGIN = 0.02
"""Two goodput points: the band within which two policies' goodput counts as level (a claimed tie)."""
GAP_SHARE = 0.5
"""An ordering's size matches the paper's when ``ours - g`` lies within ``GAP_SHARE x |g|``."""

RULES: tuple[tuple[str, str, str], ...] = (
    ("value", "reproduced", "interval of ours - paper (with the paper's noise) inside [-m, m]"),
    ("value", "not reproduced", "interval of ours - paper excludes zero and its point lies beyond the margin"),
    ("value", "within noise", "otherwise"),
    ("ordering", "contradicted", "interval excludes zero on the other side from the paper's"),
    ("ordering", "reproduced", "direction shown and size within half the paper's gap g of g (no gap stated: the "
                               "direction alone)"),
    ("ordering", "not reproduced", "size shown smaller or larger: the interval of ours - g excludes zero and its "
                                   "point lies beyond half of g; no gap stated: the interval within the tie margin "
                                   "of zero"),
    ("ordering", "within noise", "otherwise"),
    ("tie", "reproduced", "interval inside [-tie margin, tie margin]"),
    ("tie", "not reproduced", "interval excludes zero and its point lies beyond the tie margin"),
    ("tie", "within noise", "otherwise"),
)
"""The rule table as data (kind, verdict, condition): docs/VERDICTS.md and the property test read it."""


@dataclass(frozen=True)
class Judgement:
    verdict: str
    reason: str


def _num(x: float) -> str:
    return f"{x:.4g}"


def equivalence_margin(unit: str, paper: float) -> float:
    """The margin ``m`` within which ours counts as the paper's number (the row's unit): the smallest effect
    the paper draws from numbers of that kind. Goodput (a fraction): `SMALLEST_EFFECT` (0.029); goodput
    points: the same in points (2.9); latencies (s): `LATENCY_EFFECT` of the number (5 %); a percentage or a
    ratio that is itself an effect (%, x): half of it; an integer count: 0 (it must be ours exactly);
    anything else: 10 % of the number."""
    a = abs(float(paper))
    if unit in GOODPUT_UNITS:
        return SMALLEST_EFFECT
    if unit == "points":
        return 100 * SMALLEST_EFFECT
    if unit in COUNT_UNITS:
        return 0.0
    if unit in ("s", "s/token"):
        return LATENCY_EFFECT * a
    if unit in ("%", "x"):
        return 0.5 * a
    return 0.1 * a


def tie_margin(unit: str) -> float:
    """The band of a claimed tie, in the row's unit: 2 goodput points (`TIE_MARGIN`; 2.0 in points)."""
    return 100 * TIE_MARGIN if unit == "points" else TIE_MARGIN


def paper_noise(unit: str, kind: str = "value", traces: int = PAPER_TRACES) -> float:
    """The standard error of the paper's own number, where the paper states its noise (the row's unit):
    goodput over ``traces`` of its traces, `PAPER_TRACE_SD` / sqrt(traces) (a value), a gap between two
    such means sqrt(2) times that (unpaired: an upper bound for the paper's paired runs); 0 for every other
    unit (the paper states no noise for latencies, counts or ratios)."""
    if unit in GOODPUT_UNITS:
        sd = PAPER_TRACE_SD
    elif unit == "points":
        sd = 100 * PAPER_TRACE_SD
    else:
        return 0.0
    se = sd / math.sqrt(max(int(traces), 1))
    return se * math.sqrt(2.0) if kind == "ordering" else se


def difference_interval(ours: Estimate, paper: float, paper_se: float, level: float = LEVEL) -> tuple[float, float]:
    """The interval of ``ours - paper``: our interval's two sides, each added in quadrature with the paper's
    ``z x paper_se`` (a normal quantile at ``level``)."""
    z = t_quantile(10 ** 6, level)
    q = z * paper_se
    d = ours.value - paper
    lo_side = ours.value - ours.lo
    hi_side = ours.hi - ours.value
    return d - math.hypot(lo_side, q), d + math.hypot(hi_side, q)


def traces_needed(ours: Estimate, centre: float, margin: float, paper_q: float, *, most: int = 10_000) -> int:
    """About how many of our traces would decide ``|ours - centre|`` against ``margin``: the traces at which
    our half-width (shrinking as 1/sqrt(traces), from this interval's traces) plus the paper's ``paper_q``
    (in quadrature) falls below the distance of the point from the margin's nearer edge; 0 when no number
    would (the paper's own noise alone is wider, or the point sits on the edge)."""
    n = max(int(ours.traces), 2)
    h = (ours.hi - ours.lo) / 2
    room = abs(abs(ours.value - centre) - margin)
    if room <= paper_q or not math.isfinite(h) or h <= 0:
        return 0
    denom = room * room - paper_q * paper_q
    if denom <= 0:
        return 0
    need = h * h / denom * n
    k = max(n + 1, math.ceil(need))
    return k if k <= most else 0


def _decide_text(n: int, paper_q: float) -> str:
    if n:
        return f"; about {n} traces of ours would decide it"
    if paper_q > 0:
        return "; no number of our traces would decide it: the paper's own noise is too wide"
    return ""


def judge(kind: str, ours: Estimate, paper: float, *, unit: str = "", tolerance: float | None = None,
          claim: float | None = None, paper_traces: int = PAPER_TRACES) -> Judgement:
    """The verdict of one row with its reason, by the module's rules. ``claim``: an ordering's side of zero
    in the paper (+1: A better, -1: B better, 0: a tie; default the sign of ``paper``), ``paper`` NaN with a
    claim: the paper states the ordering, not the gap. ``tolerance`` replaces the margin (a value's ``m``, an
    ordering's size band, a tie's margin). ``paper_traces``: the traces the paper's number rests on (its
    noise, `paper_noise`)."""
    if kind not in KINDS:
        raise ValueError(f"verdict: kind {kind!r}; allowed: {list(KINDS)}")
    if kind == "input":
        return Judgement("input", "a number the model was given or aimed at, not a measurement")
    paper = math.nan if paper is None else float(paper)
    if kind == "ordering" and (claim is None or (isinstance(claim, float) and math.isnan(claim))):
        claim = None if math.isnan(paper) else (1 if paper > 0 else -1 if paper < 0 else 0)
    stated = not math.isnan(paper) or (kind == "ordering" and claim is not None)
    if math.isnan(ours.value):
        if not stated:
            return Judgement("context", "neither the paper nor we have a number")
        why = ours.method[len("none: "):] if ours.method.startswith("none: ") else "no value measured"
        return Judgement("not reproduced", f"the paper states it; we have no value ({why})")
    if not stated:
        return Judgement("context", "the paper states no number for it")
    if not ours.has_interval:
        return Judgement("within noise", f"no interval ({ours.method}): a point alone shows neither equivalence "
                                         "nor a difference")
    if kind == "value":
        return _judge_value(ours, paper, unit, tolerance, paper_traces)
    if claim == 0:
        return _judge_tie(ours, unit, tolerance)
    return _judge_ordering(ours, paper, int(claim or 0), unit, tolerance, paper_traces)


def _judge_value(ours: Estimate, paper: float, unit: str, tolerance: float | None, traces: int) -> Judgement:
    m = equivalence_margin(unit, paper) if tolerance is None else float(tolerance)
    se = paper_noise(unit, "value", traces)
    lo, hi = difference_interval(ours, paper, se)
    noise = f" with the paper's noise (se {_num(se)})" if se else ""
    band = f"ours - paper {_num(ours.value - paper)} [{_num(lo)}, {_num(hi)}]{noise}"
    if -m <= lo and hi <= m:
        return Judgement("reproduced", f"equivalence shown: {band} lies within +-{_num(m)}")
    d = ours.value - paper
    if (lo > 0 or hi < 0) and abs(d) > m:
        return Judgement("not reproduced", f"a difference shown: {band} excludes zero, its point beyond +-{_num(m)}")
    q = t_quantile(10 ** 6) * se
    n = traces_needed(ours, paper, m, q)
    return Judgement("within noise", f"{band} neither lies within +-{_num(m)} nor shows a difference beyond it"
                                     f"{_decide_text(n, q)}")


def _judge_tie(ours: Estimate, unit: str, tolerance: float | None) -> Judgement:
    m = tie_margin(unit) if tolerance is None else float(tolerance)
    iv = f"our interval [{_num(ours.lo)}, {_num(ours.hi)}]"
    if -m <= ours.lo and ours.hi <= m:
        return Judgement("reproduced", f"a tie: {iv} lies within +-{_num(m)} of zero")
    if (ours.lo > 0 or ours.hi < 0) and abs(ours.value) > m:
        return Judgement("not reproduced", f"the paper reports a tie; {iv} excludes zero, its point beyond "
                                           f"+-{_num(m)} ({'A' if ours.value > 0 else 'B'} better)")
    n = traces_needed(ours, 0.0, m, 0.0)
    return Judgement("within noise", f"the paper reports a tie; {iv} neither lies within +-{_num(m)} nor shows a "
                                     f"difference beyond it{_decide_text(n, 0.0)}")


def direction(ours: Estimate, claim: int) -> str:
    """``shown`` (the interval excludes zero on the paper's side), ``contradicted`` (on the other side) or
    ``undecided``."""
    side = 1 if ours.lo > 0 else -1 if ours.hi < 0 else 0
    if side == 0:
        return "undecided"
    return "shown" if side == claim else "contradicted"


def size(ours: Estimate, gap: float, unit: str, tolerance: float | None, traces: int) -> tuple[str, str]:
    """An ordering's size against the paper's gap: ``same`` / ``smaller`` / ``larger`` / ``undecided`` (in
    the paper's direction, on ``|ours|`` against ``|gap|``) and the words with the interval."""
    m = GAP_SHARE * abs(gap) if tolerance is None else float(tolerance)
    se = paper_noise(unit, "ordering", traces)
    lo, hi = difference_interval(ours, gap, se)
    if gap < 0:  # in the paper's direction: a larger gap is more negative
        lo, hi = -hi, -lo
    noise = f", with the paper's noise (se {_num(se)})" if se else ""
    words = f"ours - paper's gap in the paper's direction [{_num(lo)}, {_num(hi)}]{noise}, margin +-{_num(m)}"
    point = (ours.value - gap) * (1 if gap >= 0 else -1)
    if -m <= lo and hi <= m:
        return "same", words
    if hi < 0 and point < -m:
        return "smaller", words
    if lo > 0 and point > m:
        return "larger", words
    return "undecided", words


def _judge_ordering(ours: Estimate, paper: float, claim: int, unit: str, tolerance: float | None,
                    traces: int) -> Judgement:
    dirn = direction(ours, claim)
    iv = f"our interval [{_num(ours.lo)}, {_num(ours.hi)}]"
    if dirn == "contradicted":
        return Judgement("contradicted", f"{iv} excludes zero on the other side from the paper's")
    if math.isnan(paper):
        if dirn == "shown":
            return Judgement("reproduced", f"direction reproduced: {iv} excludes zero on the paper's side (the "
                                           "paper states the ordering, not the gap)")
        m = tie_margin(unit)
        if -m <= ours.lo and ours.hi <= m:
            return Judgement("not reproduced", f"a precise null: {iv} lies within +-{_num(m)} of zero where the "
                                               "paper reports an ordering")
        n = traces_needed(ours, 0.0, 0.0, 0.0)
        return Judgement("within noise", f"direction undecided: {iv} holds zero (the paper states the ordering, "
                                         f"not the gap){_decide_text(n, 0.0)}")
    sz, words = size(ours, paper, unit, tolerance, traces)
    d_text = {"shown": "direction reproduced", "undecided": "direction undecided"}[dirn]
    if sz == "same" and dirn == "shown":
        return Judgement("reproduced", f"{d_text}, size the paper's ({words})")
    if sz in ("smaller", "larger"):
        return Judgement("not reproduced", f"{d_text}, size {sz} than the paper's {_num(paper)} ({words})")
    m = GAP_SHARE * abs(paper) if tolerance is None else float(tolerance)
    q = t_quantile(10 ** 6) * paper_noise(unit, "ordering", traces)
    n = traces_needed(ours, paper, m, q)
    size_text = "size the paper's" if sz == "same" else "size undecided"
    return Judgement("within noise", f"{d_text}, {size_text} ({words}){_decide_text(n, q)}")


def verdict(kind: str, ours: Estimate, paper: float, *, unit: str = "", tolerance: float | None = None,
            claim: float | None = None) -> str:
    """The verdict alone (`judge`)."""
    return judge(kind, ours, paper, unit=unit, tolerance=tolerance, claim=claim).verdict


DECIDED = {"reproduced": 1, "within noise": 0, "not reproduced": -1, "contradicted": -1}
"""A judged verdict's decisiveness: +1 decided for the paper, -1 decided against it, 0 undecided. Weaker
evidence (a wider interval about the same point) never raises ``|decisiveness|`` nor flips its sign."""


def decisiveness(v: str) -> int:
    return DECIDED.get(v, 0)


COMPARISON_VERDICTS = ("better", "worse", "tie", "within noise")
"""The verdicts of `compare` (a comparison the paper states nothing about)."""


def compare(est: Estimate, unit: str = "") -> Judgement:
    """The verdict of a paired difference A - B the paper states nothing about (positive: A better), one of
    `COMPARISON_VERDICTS`: ``better`` / ``worse`` when the interval excludes zero, ``tie`` when it lies
    within `tie_margin` of zero, else ``within noise`` (about how many traces would decide it, from
    `traces_needed`). Without an interval nothing is decided."""
    if math.isnan(est.value):
        return Judgement("within noise", f"no value ({est.method})")
    if not est.has_interval:
        return Judgement("within noise", f"no interval ({est.method}): no difference can be shown")
    side = est.excludes_zero()
    span = f"[{_num(est.lo)}, {_num(est.hi)}]"
    if side:
        return Judgement("better" if side > 0 else "worse", f"the interval {span} excludes zero")
    margin = tie_margin(unit)
    if -margin <= est.lo and est.hi <= margin:
        return Judgement("tie", f"the interval {span} lies within +-{_num(margin)} of zero")
    n = traces_needed(est, 0.0, 0.0, 0.0)
    more = f"; about {n} traces would decide it" if n else "; more traces would decide it"
    return Judgement("within noise", f"the interval {span} holds zero and is wider than +-{_num(margin)}{more}")
