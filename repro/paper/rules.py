"""The verdict rules: how an interval of ours and a number of the paper's become one verdict.

Every rule is a pair of one-sided tests that ask the same of both answers (docs/VERDICTS.md reads the
table from `RULES` and the margins from `MARGIN_TABLE`; `tests/paper/test_rules.py` checks both):

- **A value** is judged on ``d = ours - paper``, whose interval carries our interval and the paper's own
  noise where the paper states it (`paper_noise`), added in quadrature on each side
  (`difference_interval`). Against an **equivalence margin** ``m`` (`equivalence_margin`): the whole
  interval of ``d`` inside ``[-m, m]``: **reproduced** (equivalence shown: two one-sided tests, TOST);
  the whole interval beyond the margin on one side: **not reproduced** (a difference larger than the
  margin shown: the mirror of TOST, a minimum-effect test); else **within noise**. A value that is itself
  an effect (a percentage: a reduction, a gain, a saving, a share, about 0; a ratio ``x`` about 1,
  `effect_null`) is also tested for its direction: our interval beyond the null on the other side
  from the paper's: **contradicted**.
- **An ordering** (a paired difference A - B, the paper's side of zero ``claim``) with a stated gap
  ``g``: its direction (our interval beyond zero on the paper's side: shown; on the other side:
  **contradicted**) and its size (the interval of ``ours - g``, with the paper's noise of a gap, inside
  ``[-g/2, g/2]``: the same; wholly below ``-g/2``: smaller; wholly above ``g/2``: larger). Reproduced when
  the direction is shown and the size the same; not reproduced when the size is shown smaller or larger;
  within noise otherwise.
- **An ordering stated without a size** is read as an effect at least as large as the smallest the paper
  draws from numbers of that kind (`smallest_effect`: Table II's 0.029 for goodput), and judged by
  one-sided tests against half of it (``t``, as a stated gap's band): our interval wholly above ``t`` on
  the paper's side: reproduced; wholly below ``t`` (not below zero): not reproduced; wholly below zero:
  contradicted. Where the unit has no smallest effect (``t = 0``) only the direction can be judged.
- **A tie** (``claim = 0``): the whole interval within the tie margin (`tie_margin`): reproduced; the whole
  interval beyond it on one side: not reproduced; else within noise.
- **input**: a number the model was given or aimed at; **context**: the paper states no number.

Each decided verdict holds only when the whole interval lies in a region of its own, and the regions of
verdicts for and against the paper are disjoint; so weaker evidence (the interval widened about the same
point: fewer traces) can only move a decided verdict to within noise, never to another decided one
(`decisiveness`), and stronger evidence never undecides one. `reachability` says which verdicts a row can
reach at all, with any number of our traces (the paper's own noise may forbid "reproduced"); `decided_at`
says, by the rule itself, how many of our traces (or requests) would decide a row that is within noise.

Units as the row's (goodput a fraction; ``points`` are goodput x 100).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from repro.statistics.intervals import LEVEL, Estimate, t_quantile

VERDICTS = ("reproduced", "not reproduced", "contradicted", "within noise", "input", "context")
KINDS = ("value", "ordering", "input")
COUNT_UNITS = ("GPUs", "runs", "traces", "requests", "instances", "count", "workloads", "bool")
"""Integer counts: no margin (the number must be ours exactly)."""
GOODPUT_UNITS = ("", "fraction")
LATENCY_UNITS = ("s", "s/token")

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
OTHER_SHARE = 0.1
"""The margin of a value in a unit the rules name no effect for: 10 % of the number."""

RULES: tuple[tuple[str, str, str], ...] = (
    ("value", "reproduced", "the whole interval of ours - paper (with the paper's noise) inside [-m, m] (an "
                            "effect's band stopping at its null)"),
    ("value", "not reproduced", "the whole interval of ours - paper beyond the margin, on one side"),
    ("value", "contradicted", "a value that is an effect (%, x): our interval beyond its null on the other side "
                              "from the paper's"),
    ("value", "within noise", "otherwise"),
    ("ordering", "contradicted", "our interval beyond zero on the other side from the paper's"),
    ("ordering", "reproduced", "direction shown and the whole interval of ours - g (with the paper's noise of a "
                               "gap) inside [-g/2, g/2]"),
    ("ordering", "not reproduced", "the whole interval of ours - g beyond g/2 on one side (smaller or larger)"),
    ("ordering", "within noise", "otherwise"),
    ("ordering without a size", "contradicted", "our interval beyond zero on the other side from the paper's"),
    ("ordering without a size", "reproduced", "our interval wholly above t, half the smallest effect the paper "
                                              "draws, on the paper's side"),
    ("ordering without a size", "not reproduced", "our interval wholly below t, not below zero (t > 0 only)"),
    ("ordering without a size", "within noise", "otherwise"),
    ("tie", "reproduced", "the whole interval inside [-tie margin, tie margin]"),
    ("tie", "not reproduced", "the whole interval beyond the tie margin, on one side"),
    ("tie", "within noise", "otherwise"),
)
"""The rule table as data (kind, verdict, condition): docs/VERDICTS.md and the property test read it."""

TESTS: tuple[tuple[str, str], ...] = (
    ("reproduced (a value, a tie, a gap's size)", "two one-sided tests (TOST): the interval wholly inside the margin "
     "(Schuirmann 1981, as pingouin.tost and statsmodels' ttost_paired implement it)"),
    ("not reproduced (a value, a tie, a gap's size)", "its mirror, a minimal-effect test: the interval wholly beyond "
     "the margin on one side (TOSTER's t_TOST, hypothesis 'MET')"),
    ("contradicted; a direction shown", "a one-sided test of the sign at 2.5 %: the 95 % interval beyond zero"),
    ("an ordering without a size", "one-sided tests against t, one on each side, at 2.5 % each"),
    ("a claim reproduced", "an intersection-union test: every row it rests on reproduced at 95 %, no correction "
     "(Berger 1982)"),
    ("a claim decided against the paper", "a union-intersection test: some row against the paper at 1 - 0.05/k over "
     "the claim's k judged rows (Bonferroni; Holm's first step, which alone decides whether any row is rejected)"),
)
"""Each verdict and the standard test it is (docs/VERDICTS.md prints this table)."""


@dataclass(frozen=True)
class Judgement:
    verdict: str
    reason: str


def _num(x: float) -> str:
    return f"{x:.4g}"


# ---- margins -----------------------------------------------------------------------------------------------
def equivalence_margin(unit: str, paper: float) -> float:
    """The margin ``m`` within which ours counts as the paper's number (the row's unit): the smallest effect
    the paper draws from numbers of that kind. Goodput (a fraction): `SMALLEST_EFFECT` (0.029); goodput
    points: the same in points (2.9); latencies (s, s/token): `LATENCY_EFFECT` of the number (5 %); a
    percentage or a ratio that is itself an effect (%, x): half of it; an integer count: 0 (it must be ours
    exactly); anything else: `OTHER_SHARE` of the number (10 %)."""
    a = abs(float(paper))
    if unit in GOODPUT_UNITS:
        return SMALLEST_EFFECT
    if unit == "points":
        return 100 * SMALLEST_EFFECT
    if unit in COUNT_UNITS:
        return 0.0
    if unit in LATENCY_UNITS:
        return LATENCY_EFFECT * a
    if unit in ("%", "x"):
        return GAP_SHARE * a
    return OTHER_SHARE * a


def tie_margin(unit: str) -> float:
    """The band of a claimed tie, in the row's unit: 2 goodput points (`TIE_MARGIN`; 2.0 in points); the same
    0.02 in the row's own unit for every other unit (the paper claims no tie of another unit; a row may state
    its own, ``tolerance``)."""
    return 100 * TIE_MARGIN if unit == "points" else TIE_MARGIN


def smallest_effect(unit: str) -> float:
    """The smallest effect the paper draws from a difference of this unit: goodput 0.029 (`SMALLEST_EFFECT`;
    2.9 in points); 0 for every other unit (the paper draws no ordering of another unit without its number)."""
    if unit in GOODPUT_UNITS:
        return SMALLEST_EFFECT
    if unit == "points":
        return 100 * SMALLEST_EFFECT
    return 0.0


def effect_null(unit: str) -> float | None:
    """The null of a value that is itself an effect, by its unit: a percentage (a reduction, a gain, a saving,
    a share) about 0, a ratio ``x`` about 1; None for every other unit (a level, not an effect)."""
    return {"%": 0.0, "x": 1.0}.get(unit)


MARGIN_TABLE: tuple[tuple[str, str, str, str], ...] = (
    ("goodput (fraction)", f"{SMALLEST_EFFECT:g}", f"{TIE_MARGIN:g}", f"{GAP_SHARE * SMALLEST_EFFECT:g}"),
    ("goodput points", f"{100 * SMALLEST_EFFECT:g}", f"{100 * TIE_MARGIN:g}", f"{GAP_SHARE * 100 * SMALLEST_EFFECT:g}"),
    ("latency (s, s/token)", f"{100 * LATENCY_EFFECT:g} % of the paper's number", f"{TIE_MARGIN:g}", "0"),
    ("an effect (%, x)", f"{100 * GAP_SHARE:g} % of the paper's number", f"{TIE_MARGIN:g}", "0"),
    ("an integer count", "0", f"{TIE_MARGIN:g}", "0"),
    ("any other unit", f"{100 * OTHER_SHARE:g} % of the paper's number", f"{TIE_MARGIN:g}", "0"),
)
"""Per kind of unit: a value's margin ``m``, a tie's margin, and ``t`` of an ordering without a size (in the
row's unit); an ordering with a gap ``g`` uses ``g/2``. docs/VERDICTS.md prints it; a test checks both against
the functions above."""

UNIT_EXAMPLES = {"goodput (fraction)": ("fraction", 0.864), "goodput points": ("points", 4.5),
                 "latency (s, s/token)": ("s", 0.321), "an effect (%, x)": ("%", 20.0),
                 "an integer count": ("GPUs", 7.0), "any other unit": ("tokens", 300.0)}
"""One unit and paper number per row of `MARGIN_TABLE` (the docs test evaluates the functions on them)."""


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


def _z(level: float = LEVEL) -> float:
    return t_quantile(10 ** 6, level)


def difference_interval(ours: Estimate, paper: float, paper_se: float, level: float = LEVEL) -> tuple[float, float]:
    """The interval of ``ours - paper``: our interval's two sides, each added in quadrature with the paper's
    ``z x paper_se`` (a normal quantile at ``level``)."""
    q = _z(level) * paper_se
    d = ours.value - paper
    lo_side = ours.value - ours.lo
    hi_side = ours.hi - ours.value
    return d - math.hypot(lo_side, q), d + math.hypot(hi_side, q)


# ---- the interval as the method grows it --------------------------------------------------------------------
_F = re.compile(r"F interval of an sd ratio \((\d+) traces of ours, (\d+) of the paper's\)")
_K = re.compile(r"min over (\d+) rivals")


def _rivals(method: str) -> int:
    m = _K.search(method)
    return int(m.group(1)) if m else 1


def growth(ours: Estimate) -> tuple[str, int] | None:
    """How this interval narrows with more data, by its method: ``(noun, n)``, the units it grows in and how
    many it rests on now (traces, or requests for an interval over one trace's or these traces' requests);
    None when the method names no law of growth."""
    m = ours.method
    if _F.search(m):
        return "traces", max(int(ours.traces), 2)
    if "within each of" in m or "requests, 1 trace" in m or "(blocks of" in m or "held-out requests" in m:
        return "requests", max(int(ours.requests), 2)
    if m.startswith("Wilson"):
        return "units", max(int(ours.requests), 2)
    if " t interval" in f" {m}" or "bootstrap over" in m or "t over traces" in m or m == "t":
        return "traces", max(int(ours.traces), 2)
    return None


def _t_factor(method: str, n0: int, n: int, level: float, level0: float = LEVEL) -> float:
    """The ratio of a t interval's half-width over ``n`` units at ``level`` to its half-width over ``n0`` at
    ``level0`` (the same per-unit spread)."""
    k = _rivals(method)
    a, a0 = 1 - (1 - level) / k, 1 - (1 - level0) / k
    return t_quantile(max(n - 1, 1), a) / t_quantile(max(n0 - 1, 1), a0) * math.sqrt(n0 / n)


def rescaled(ours: Estimate, n: float | None = None, level: float = LEVEL) -> Estimate:
    """Our estimate with its interval as its method would give it over ``n`` units of `growth` (None: the
    units it has; ``math.inf``: the limit) and at confidence ``level`` (each side scaled about the point; an
    F interval recomputed with our degrees of freedom ``n - 1`` and the paper's as they are)."""
    g = growth(ours)
    if not ours.has_interval or (g is None and level == LEVEL):
        return ours
    n0 = g[1] if g else 1
    n = n0 if n is None else n
    f = _F.search(ours.method)
    if f:
        from scipy import stats

        m = int(f.group(2))
        r = ours.value
        dfn = 10 ** 9 if math.isinf(n) else max(int(n) - 1, 1)
        a = 1 - level
        return replace(ours, lo=r / math.sqrt(stats.f.ppf(1 - a / 2, dfn, m - 1)),
                       hi=r / math.sqrt(stats.f.ppf(a / 2, dfn, m - 1)),
                       traces=ours.traces if math.isinf(n) else int(n))
    if math.isinf(n):
        return replace(ours, lo=ours.value, hi=ours.value)
    is_t = " t interval" in f" {ours.method}" or "t over traces" in ours.method or ours.method == "t"
    if g and g[0] == "traces" and is_t:
        k = _t_factor(ours.method, n0, int(n), level)
    else:  # a normal interval over independent units
        k = _z(1 - (1 - level) / _rivals(ours.method)) / _z(1 - (1 - LEVEL) / _rivals(ours.method)) * math.sqrt(n0 / n)
    lo = ours.value - (ours.value - ours.lo) * k
    hi = ours.value + (ours.hi - ours.value) * k
    if g and g[0] == "traces":
        return replace(ours, lo=lo, hi=hi, traces=int(n))
    return replace(ours, lo=lo, hi=hi, requests=int(n))


# ---- the rules -----------------------------------------------------------------------------------------------
def judge(kind: str, ours: Estimate, paper: float, *, unit: str = "", tolerance: float | None = None,
          claim: float | None = None, paper_traces: int = PAPER_TRACES, level: float = LEVEL) -> Judgement:
    """The verdict of one row with its reason, by the module's rules. ``claim``: an ordering's side of zero
    in the paper (+1: A better, -1: B better, 0: a tie; default the sign of ``paper``), ``paper`` NaN with a
    claim: the paper states the ordering, not the gap. ``tolerance`` replaces the margin (a value's ``m``, an
    ordering's size band or its threshold ``t`` without a size, a tie's margin). ``paper_traces``: the traces
    the paper's number rests on (its noise, `paper_noise`). ``level``: the confidence of every interval
    (our interval rescaled to it, `rescaled`; the paper's noise at its quantile): a claim's correction for
    its number of rows judges at ``1 - 0.05 / k``."""
    if kind not in KINDS:
        raise ValueError(f"verdict: kind {kind!r}; allowed: {list(KINDS)}")
    if kind == "input":
        return Judgement("input", "a number the model was given or aimed at, not a measurement")
    paper = math.nan if paper is None else float(paper)
    claim = _claim(kind, paper, claim)
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
    if level != LEVEL:
        ours = rescaled(ours, level=level)
    j = _rule(kind, ours, paper, unit, tolerance, claim, paper_traces, level)
    reach = reachability(kind, paper, unit=unit, tolerance=tolerance, claim=claim, paper_traces=paper_traces)
    why_not = unreachable_text(reach)
    if j.verdict == "within noise" and level == LEVEL:
        n, noun, reason = decided_at(kind, ours, paper, unit=unit, tolerance=tolerance, claim=claim,
                                     paper_traces=paper_traces)
        j = Judgement(j.verdict, j.reason + (f"; about {n:,} {noun} of ours would decide it" if n else
                                             f"; no number of ours would decide it: {reason}"))
    return Judgement(j.verdict, j.reason + (f"; {why_not}" if why_not else ""))


def _claim(kind: str, paper: float, claim: float | None) -> int | None:
    if kind != "ordering":
        return None
    if claim is None or (isinstance(claim, float) and math.isnan(claim)):
        return None if math.isnan(paper) else (1 if paper > 0 else -1 if paper < 0 else 0)
    return int(claim)


def _rule(kind: str, ours: Estimate, paper: float, unit: str, tolerance: float | None, claim: int | None,
          traces: int, level: float) -> Judgement:
    """The rule table alone (no reachability, no traces that would decide)."""
    if kind == "value":
        return _judge_value(ours, paper, unit, tolerance, traces, level)
    if claim == 0:
        return _judge_tie(ours, unit, tolerance)
    if math.isnan(paper):
        return _judge_no_size(ours, int(claim or 1), unit, tolerance)
    return _judge_ordering(ours, paper, int(claim or 0), unit, tolerance, traces, level)


def _judge_value(ours: Estimate, paper: float, unit: str, tolerance: float | None, traces: int,
                 level: float) -> Judgement:
    m = equivalence_margin(unit, paper) if tolerance is None else float(tolerance)
    se = paper_noise(unit, "value", traces)
    lo, hi = difference_interval(ours, paper, se, level)
    noise = f" with the paper's noise (se {_num(se)})" if se else ""
    band = f"ours - paper {_num(ours.value - paper)} [{_num(lo)}, {_num(hi)}]{noise}"
    null = effect_null(unit)
    low, high = -m, m
    if null is not None and paper != null:
        s = 1 if paper > null else -1
        if (s > 0 and ours.hi < null) or (s < 0 and ours.lo > null):
            return Judgement("contradicted", f"the effect reversed: our interval [{_num(ours.lo)}, {_num(ours.hi)}] "
                                             f"lies {'below' if s > 0 else 'above'} {_num(null)} where the paper's "
                                             f"is {_num(paper)}")
        # an effect's equivalence band stops at its null: no reversed effect is the paper's
        low, high = (max(low, null - paper), high) if s > 0 else (low, min(high, null - paper))
    if low <= lo and hi <= high:
        edge = "" if (low, high) == (-m, m) else f" (the band stopping at the effect's null, {_num(null)})"
        return Judgement("reproduced", f"equivalence shown: {band} lies within +-{_num(m)}{edge}")
    if lo > m or hi < -m:
        return Judgement("not reproduced", f"a difference shown: {band} lies wholly "
                                           f"{'above' if lo > m else 'below'} {'+' if lo > m else '-'}{_num(m)}")
    return Judgement("within noise", f"{band} neither lies within +-{_num(m)} nor wholly beyond it")


def _judge_tie(ours: Estimate, unit: str, tolerance: float | None) -> Judgement:
    m = tie_margin(unit) if tolerance is None else float(tolerance)
    iv = f"our interval [{_num(ours.lo)}, {_num(ours.hi)}]"
    if -m <= ours.lo and ours.hi <= m:
        return Judgement("reproduced", f"a tie: {iv} lies within +-{_num(m)} of zero")
    if ours.lo > m or ours.hi < -m:
        return Judgement("not reproduced", f"the paper reports a tie; {iv} lies wholly beyond +-{_num(m)} "
                                           f"({'A' if ours.value > 0 else 'B'} better)")
    return Judgement("within noise", f"the paper reports a tie; {iv} neither lies within +-{_num(m)} nor wholly "
                                     "beyond it")


def direction(ours: Estimate, claim: int) -> str:
    """``shown`` (the interval excludes zero on the paper's side), ``contradicted`` (on the other side) or
    ``undecided``."""
    side = 1 if ours.lo > 0 else -1 if ours.hi < 0 else 0
    if side == 0:
        return "undecided"
    return "shown" if side == claim else "contradicted"


def threshold(unit: str, tolerance: float | None = None) -> float:
    """``t`` of an ordering stated without a size: half the smallest effect the paper draws (`smallest_effect`;
    ``tolerance`` replaces it)."""
    return GAP_SHARE * smallest_effect(unit) if tolerance is None else float(tolerance)


def _judge_no_size(ours: Estimate, claim: int, unit: str, tolerance: float | None) -> Judgement:
    t = threshold(unit, tolerance)
    iv = f"our interval [{_num(ours.lo)}, {_num(ours.hi)}]"
    dirn = direction(ours, claim)
    if dirn == "contradicted":
        return Judgement("contradicted", f"{iv} excludes zero on the other side from the paper's")
    lo, hi = (ours.lo, ours.hi) if claim > 0 else (-ours.hi, -ours.lo)
    side = "in the paper's direction"
    if t <= 0:
        if dirn == "shown":
            return Judgement("reproduced", f"direction reproduced: {iv} excludes zero on the paper's side (the paper "
                                           "states the ordering, not the gap)")
        return Judgement("within noise", f"direction undecided: {iv} holds zero (the paper states the ordering, not "
                                         "the gap)")
    what = f"half the smallest effect the paper draws ({_num(t)})"
    if lo > t:
        return Judgement("reproduced", f"an effect the paper would draw: {iv} lies wholly above {what} {side}")
    if hi < t:
        d = "direction reproduced" if dirn == "shown" else "direction undecided"
        return Judgement("not reproduced", f"{d}, but smaller than the paper would draw: {iv} lies wholly below "
                                           f"{what} {side}")
    d = "direction reproduced" if dirn == "shown" else "direction undecided"
    return Judgement("within noise", f"{d}; {iv} holds {what} (the paper states the ordering, not the gap)")


def size(ours: Estimate, gap: float, unit: str, tolerance: float | None, traces: int,
         level: float = LEVEL) -> tuple[str, str]:
    """An ordering's size against the paper's gap: ``same`` / ``smaller`` / ``larger`` / ``undecided`` (in
    the paper's direction, on ``|ours|`` against ``|gap|``: the whole interval inside or beyond the band) and
    the words with the interval."""
    m = GAP_SHARE * abs(gap) if tolerance is None else float(tolerance)
    se = paper_noise(unit, "ordering", traces)
    lo, hi = difference_interval(ours, gap, se, level)
    if gap < 0:  # in the paper's direction: a larger gap is more negative
        lo, hi = -hi, -lo
    noise = f", with the paper's noise (se {_num(se)})" if se else ""
    words = f"ours - paper's gap in the paper's direction [{_num(lo)}, {_num(hi)}]{noise}, margin +-{_num(m)}"
    if -m <= lo and hi <= m:
        return "same", words
    if hi < -m:
        return "smaller", words
    if lo > m:
        return "larger", words
    return "undecided", words


def _judge_ordering(ours: Estimate, paper: float, claim: int, unit: str, tolerance: float | None,
                    traces: int, level: float) -> Judgement:
    dirn = direction(ours, claim)
    iv = f"our interval [{_num(ours.lo)}, {_num(ours.hi)}]"
    if dirn == "contradicted":
        return Judgement("contradicted", f"{iv} excludes zero on the other side from the paper's")
    sz, words = size(ours, paper, unit, tolerance, traces, level)
    d_text = {"shown": "direction reproduced", "undecided": "direction undecided"}[dirn]
    if sz == "same" and dirn == "shown":
        return Judgement("reproduced", f"{d_text}, size the paper's ({words})")
    if sz in ("smaller", "larger"):
        return Judgement("not reproduced", f"{d_text}, size shown {sz} than the paper's {_num(paper)} ({words})")
    size_text = "size the paper's" if sz == "same" else "size undecided"
    return Judgement("within noise", f"{d_text}, {size_text} ({words})")


# ---- what a row can reach, and what would decide it ------------------------------------------------------------
DECIDED_VERDICTS = ("reproduced", "not reproduced", "contradicted")


def reachability(kind: str, paper: float, *, unit: str = "", tolerance: float | None = None,
                 claim: float | None = None, paper_traces: int = PAPER_TRACES) -> dict[str, bool]:
    """Which decided verdicts the row's rule can reach at all, with any number of our traces (our interval
    shrinking to its point, the paper's noise as it is): ``{verdict: reachable}`` over `DECIDED_VERDICTS`.
    "reproduced" is out of reach where the paper's own noise (its ``z x se``) is as wide as the margin; an
    ordering's "not reproduced" then too unless its size can be shown larger; "contradicted" needs a
    direction (an ordering, or a value that is an effect away from its null)."""
    paper = math.nan if paper is None else float(paper)
    if kind == "input":
        return dict.fromkeys(DECIDED_VERDICTS, False)
    c = _claim(kind, paper, claim)
    if kind == "value":
        if math.isnan(paper):
            return dict.fromkeys(DECIDED_VERDICTS, False)
        m = equivalence_margin(unit, paper) if tolerance is None else float(tolerance)
        q = _z() * paper_noise(unit, "value", paper_traces)
        null = effect_null(unit)
        return {"reproduced": q < m or q == m == 0, "not reproduced": True,
                "contradicted": null is not None and paper != null}
    if c is None:
        return dict.fromkeys(DECIDED_VERDICTS, False)
    if c == 0:
        m = tie_margin(unit) if tolerance is None else float(tolerance)
        return {"reproduced": m >= 0, "not reproduced": True, "contradicted": False}
    if math.isnan(paper):
        return {"reproduced": True, "not reproduced": threshold(unit, tolerance) > 0, "contradicted": True}
    m = GAP_SHARE * abs(paper) if tolerance is None else float(tolerance)
    q = _z() * paper_noise(unit, "ordering", paper_traces)
    return {"reproduced": q < m, "not reproduced": True, "contradicted": True}


def unreachable_text(reach: dict[str, bool]) -> str:
    """The row's words for the verdicts it can never reach ("" when it can reach all it should)."""
    if not any(reach.values()):
        return ""
    if not reach["reproduced"]:
        return ("the paper's own noise lets no number of ours reproduce this size: the row can count against "
                "the paper only by its direction, and is not evidence for or against its size")
    if not reach["not reproduced"] and not reach["contradicted"]:
        return "no number of ours can show a difference here: the row can only count for the paper"
    if not reach["not reproduced"]:
        return "the paper states no size and the unit no smallest effect: only the direction can be judged"
    return ""


def evidence(verdict: str, reach: dict[str, bool]) -> bool:
    """Whether a row's verdict counts as evidence about the paper's claim: only when the rule could have
    said the opposite (a reproduction counts where a difference was reachable; "not reproduced" where a
    reproduction was; a reversal of direction always, its mirror being a direction shown)."""
    if verdict == "reproduced":
        return reach["not reproduced"] or reach["contradicted"]
    if verdict == "not reproduced":
        return reach["reproduced"]
    if verdict == "contradicted":
        return True
    return verdict == "within noise" and reach["reproduced"]


MOST = 1_000_000
"""`decided_at` looks no further than this many units."""


def decided_at(kind: str, ours: Estimate, paper: float, *, unit: str = "", tolerance: float | None = None,
               claim: float | None = None, paper_traces: int = PAPER_TRACES) -> tuple[int, str, str]:
    """By the rule itself, the fewest units of our data (traces, or requests for an interval over requests:
    `growth`) at which the same point, its interval narrowing as its method says (`rescaled`), first gets a
    decided verdict: ``(n, noun, "")``; or ``(0, noun, why)`` when no number would (the limit of a vanishing
    interval of ours is still undecided: the paper's own noise, a point on the margin's edge, the paper's
    degrees of freedom) or the method names no law of growth. A row already decided gives its own units."""
    g = growth(ours)
    if g is None or not ours.has_interval or math.isnan(ours.value):
        return 0, "traces", "its interval's method says nothing of how it would narrow"
    noun, n0 = g
    c = _claim(kind, float(paper), claim)

    def verdict_at(n: float) -> str:
        return _rule(kind, rescaled(ours, n), float(paper), unit, tolerance, c, paper_traces, LEVEL).verdict

    if verdict_at(n0) != "within noise":
        return n0, noun, ""
    if verdict_at(math.inf) == "within noise":
        return 0, noun, _why_never(kind, ours, float(paper), unit, tolerance, c, paper_traces)
    if verdict_at(MOST) == "within noise":
        return 0, noun, f"more than {MOST:,} {noun} (its point sits within a hair of the margin's edge)"
    lo, hi = n0, MOST  # verdict_at(lo) undecided, verdict_at(hi) decided: the interval only narrows with n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if verdict_at(mid) != "within noise" else (mid, hi)
    return hi, noun, ""


def _why_never(kind: str, ours: Estimate, paper: float, unit: str, tolerance: float | None, claim: int | None,
               traces: int) -> str:
    if _F.search(ours.method):
        lim = rescaled(ours, math.inf)
        return (f"the paper's spread rests on its own few traces: with any number of ours the interval stays "
                f"about [{_num(lim.lo)}, {_num(lim.hi)}]")
    se = paper_noise(unit, "ordering" if kind == "ordering" else "value", traces)
    if se:
        return (f"the paper's own noise (se {_num(se)}, +-{_num(_z() * se)}) is wider than this point's distance "
                "from the margin's edge")
    return "its point sits on the margin's edge"


POWER = 0.8
"""The power at which `hardware_traces` sizes a run on the paper's hardware."""


def per_trace_sd(ours: Estimate) -> float:
    """The sd of one trace's value behind our interval: a t interval's half-width back through ``t(n-1)/sqrt(n)``
    (at its Bonferroni level for a best of k), any other's through the normal quantile; NaN without one."""
    if not ours.has_interval or ours.traces < 2:
        return math.nan
    h = max(ours.value - ours.lo, ours.hi - ours.value)
    k = _rivals(ours.method)
    n = int(ours.traces)
    q = t_quantile(n - 1, 1 - (1 - LEVEL) / k) if " t interval" in f" {ours.method}" else _z(1 - (1 - LEVEL) / k)
    return h * math.sqrt(n) / q


def hardware_traces(kind: str, paper: float, sd: float, *, unit: str = "", tolerance: float | None = None,
                    claim: float | None = None, paper_traces: int = PAPER_TRACES, assumed: float = math.nan,
                    most: int = 100_000) -> tuple[int, str]:
    """How many traces a run on the paper's hardware would need for this row's rule to decide it with `POWER`,
    if the truth there is the paper's number (an ordering without a size: the smallest effect the paper draws,
    else ``assumed``): each trace's value with sd ``sd`` (a goodput row's at least the paper's own trace sd), a t
    interval over the traces, the paper's noise as the rules add it. ``(n, what)``: what the run would show
    ("reproduce it", "show its direction" where the size is out of reach); ``(0, why)`` when no number would."""
    from scipy import stats

    paper = math.nan if paper is None else float(paper)
    c = _claim(kind, paper, claim)
    floor = {"": PAPER_TRACE_SD, "fraction": PAPER_TRACE_SD, "points": 100 * PAPER_TRACE_SD}.get(unit, 0.0)
    s = max(sd if math.isfinite(sd) else 0.0, floor)
    if s <= 0:
        return 0, "no spread of one trace's value is known"
    zp = float(stats.norm.ppf(POWER))

    def first(ok) -> int:
        for n in (*range(2, 100), *range(100, most + 1, max(1, most // 2000))):
            if ok(n):
                return n
        return 0

    def band(centre_gap: float, m: float, q: float) -> int:  # truth at the centre: |e| + H(n) <= m with POWER
        return first(lambda n: m - math.hypot(t_quantile(n - 1) * s / math.sqrt(n), q) >=
                     float(stats.norm.ppf(0.5 + POWER / 2)) * s / math.sqrt(n))

    def beyond(effect: float, t: float) -> int:  # truth ``effect`` above ``t``: the lower end above t with POWER
        if effect <= t:
            return 0
        return first(lambda n: effect - t >= (t_quantile(n - 1) + zp) * s / math.sqrt(n))

    if kind == "value":
        m = equivalence_margin(unit, paper) if tolerance is None else float(tolerance)
        q = _z() * paper_noise(unit, "value", paper_traces)
        if q >= m and not q == m == 0:
            return 0, f"the paper's own noise (+-{_num(q)}) is as wide as the margin +-{_num(m)}"
        n = band(0.0, m, q)
        return (n, "reproduce it") if n else (0, f"more than {most:,}")
    if c == 0:
        m = tie_margin(unit) if tolerance is None else float(tolerance)
        n = band(0.0, m, 0.0)
        return (n, "reproduce the tie") if n else (0, f"more than {most:,}")
    if c is None:
        return 0, "the paper states no number"
    if math.isnan(paper):
        t = threshold(unit, tolerance)
        effect = 2 * t if t > 0 else abs(assumed) if math.isfinite(assumed) else math.nan
        if not math.isfinite(effect) or effect <= 0:
            return 0, "the paper states no size to size a run by"
        n = beyond(effect, t)
        return (n, "reproduce it" if t > 0 else "show its direction") if n else (0, f"more than {most:,}")
    m = GAP_SHARE * abs(paper) if tolerance is None else float(tolerance)
    q = _z() * paper_noise(unit, "ordering", paper_traces)
    if q < m:
        n = band(0.0, m, q)
        return (n, "reproduce it") if n else (0, f"more than {most:,}")
    n = beyond(abs(paper), 0.0)
    return (n, "show its direction (no number can reproduce its size: the paper's own noise)") if n else (
        0, f"more than {most:,}")


def traces_needed(ours: Estimate, centre: float, margin: float, paper_q: float, *, most: int = 10_000) -> int:
    """About how many of our traces would show ``|ours - centre|`` inside ``margin`` or wholly beyond it,
    whichever the point lies on (our half-width shrinking as 1/sqrt(traces), the paper's ``paper_q`` in
    quadrature): a quick normal approximation for comparisons the paper states nothing about; the verdicts use
    `decided_at`, the rule itself. 0 when no number would."""
    n = max(int(ours.traces), 2)
    h = (ours.hi - ours.lo) / 2
    room = abs(abs(ours.value - centre) - margin)
    if room <= paper_q or not math.isfinite(h) or h <= 0:
        return 0
    need = h * h / (room * room - paper_q * paper_q) * n
    k = max(n + 1, math.ceil(need))
    return k if k <= most else 0


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
    `COMPARISON_VERDICTS`, by the tie rule's two one-sided tests about `tie_margin`: ``better`` / ``worse`` when
    the whole interval lies beyond the margin above / below zero, ``tie`` when it lies within it, else ``within
    noise`` (with the traces that would decide it, `decided_at`). A difference shown but smaller than the margin
    is within noise: it would otherwise turn into a tie when its interval widened. Without an interval nothing
    is decided."""
    if math.isnan(est.value):
        return Judgement("within noise", f"no value ({est.method})")
    if not est.has_interval:
        return Judgement("within noise", f"no interval ({est.method}): no difference can be shown")
    margin = tie_margin(unit)
    span = f"[{_num(est.lo)}, {_num(est.hi)}]"
    if est.lo > margin or est.hi < -margin:
        return Judgement("better" if est.lo > margin else "worse",
                         f"the interval {span} lies wholly beyond +-{_num(margin)}")
    if -margin <= est.lo and est.hi <= margin:
        return Judgement("tie", f"the interval {span} lies within +-{_num(margin)} of zero")
    n, noun, why = decided_at("ordering", est, 0.0, unit=unit, claim=0, tolerance=margin)
    more = f"; about {n:,} {noun} would decide it" if n else f"; no number of traces would decide it: {why}"
    side = est.excludes_zero()
    shown = (f" (it excludes zero: A {'better' if side > 0 else 'worse'}, by less than the margin or more: its size is "
             "undecided)") if side else ""
    return Judgement("within noise", f"the interval {span} reaches across +-{_num(margin)}{shown}{more}")
