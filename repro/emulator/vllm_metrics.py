"""vLLM's Prometheus metrics for the emulated engine, via prometheus-client.

Names, types, buckets and labels (``model_name``, ``engine``; ``engine`` is the engine index
"0", as in vLLM) follow ``vllm/v1/metrics/loggers.py`` of vLLM 0.11/0.12. All times are physics
seconds (wall seconds x time scale).

The histograms are kept here rather than as ``prometheus_client.Histogram`` objects because a
decode step adds the same inter-token latency for every running sequence at once: one
``observe(value, count=n)`` per step instead of n calls. They are exposed through a custom
collector with prometheus-client's metric families (`EngineMetrics.registry`). ``/metrics`` renders
the same text with `EngineMetrics.text`, which formats only the numbers into strings prepared once:
the proxy polls every engine every 50 ms (physics), and prometheus-client's generic renderer took
~78% of an emulated prefill engine's CPU at 16 req/s on 2p4d (K = 2). A test keeps the two texts
byte-identical. Gauges (running, waiting, KV usage) are read from the engine at scrape time.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    from repro.emulator.seq import Seq

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
LAG_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0]
FINISH_REASONS = ("stop", "length", "abort")


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """[1, 2, 5, 10, 20, 50, ...] up to ``max_value`` (vLLM's helper)."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exp
            if v > max_value:
                return out
            out.append(float(v))
        exp += 1


class Hist:
    """A cumulative histogram with weighted observations."""

    __slots__ = ("buckets", "counts", "sum")

    def __init__(self, buckets: Iterable[float]):
        self.buckets = [float(b) for b in buckets]
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        self.counts[bisect_left(self.buckets, value)] += count
        self.sum += value * count

    def cumulative(self) -> list[tuple[str, float]]:
        out = []
        acc = 0
        for b, c in zip(self.buckets, self.counts, strict=False):  # counts[-1] is the +Inf bucket
            acc += c
            out.append((_fmt(b), acc))
        acc += self.counts[-1]
        out.append(("+Inf", acc))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)


_LAG_DOC = "Emulator only: how late (physics s) a step started after the previous one ended."


def _fmt(v: float) -> str:
    return repr(float(v))


class EngineMetrics:
    """Recorder called by `EngineCore` (its ``on_*`` methods; `repro.emulator.core.NullMetrics` is the silent
    stand-in of virtual replays) and Prometheus collector of ``/metrics``."""

    def __init__(self, model_name: str, max_model_len: int, engine_index: str = "0"):
        self.labels = [model_name, engine_index]
        self.model_name = model_name
        tok = build_1_2_5_buckets(max_model_len)
        self.h = {
            "vllm:time_to_first_token_seconds": (Hist(TTFT_BUCKETS), "Histogram of time to first token in seconds."),
            "vllm:inter_token_latency_seconds": (Hist(ITL_BUCKETS), "Histogram of inter-token latency in seconds."),
            "vllm:request_time_per_output_token_seconds": (
                Hist(ITL_BUCKETS), "Histogram of time_per_output_token_seconds per request."),
            "vllm:e2e_request_latency_seconds": (
                Hist(REQUEST_LATENCY_BUCKETS), "Histogram of e2e request latency in seconds."),
            "vllm:request_queue_time_seconds": (
                Hist(REQUEST_LATENCY_BUCKETS), "Histogram of time spent in WAITING phase for request."),
            "vllm:request_inference_time_seconds": (
                Hist(REQUEST_LATENCY_BUCKETS), "Histogram of time spent in RUNNING phase for request."),
            "vllm:request_prefill_time_seconds": (
                Hist(REQUEST_LATENCY_BUCKETS), "Histogram of time spent in PREFILL phase for request."),
            "vllm:request_decode_time_seconds": (
                Hist(REQUEST_LATENCY_BUCKETS), "Histogram of time spent in DECODE phase for request."),
            "vllm:request_prompt_tokens": (Hist(tok), "Number of prefill tokens processed."),
            "vllm:request_generation_tokens": (Hist(tok), "Number of generation tokens processed."),
            "vllm:request_params_max_tokens": (Hist(tok), "Histogram of the max_tokens request parameter."),
            "vllm:iteration_tokens_total": (
                Hist(ITERATION_TOKEN_BUCKETS), "Histogram of number of tokens per engine_step."),
        }
        self.c = {
            "vllm:prefix_cache_queries": [0, "Prefix cache queries, in terms of number of queried tokens."],
            "vllm:prefix_cache_hits": [0, "Prefix cache hits, in terms of number of cached tokens."],
            "vllm:num_preemptions": [0, "Cumulative number of preemption from the engine."],
            "vllm:prompt_tokens": [0, "Number of prefill tokens processed."],
            "vllm:generation_tokens": [0, "Number of generation tokens processed."],
        }
        self.success = {r: 0 for r in FINISH_REASONS}
        self.lag = Hist(LAG_BUCKETS)
        self.gauges: dict[str, tuple[Callable[[], float], str]] = {}
        self.info: dict[str, str] = {}
        self._hists = {k: v[0] for k, v in self.h.items()}

    # ---- recorder interface (called by the core; times are physics seconds) -------------------
    def on_prefix(self, queries: int, hits: int) -> None:
        self.c["vllm:prefix_cache_queries"][0] += queries
        self.c["vllm:prefix_cache_hits"][0] += hits

    def on_scheduled(self, seq: Seq, now: float) -> None:
        self._hists["vllm:request_queue_time_seconds"].observe(max(0.0, now - seq.arrival))

    def on_first_token(self, seq: Seq, t: float) -> None:
        self._hists["vllm:time_to_first_token_seconds"].observe(max(0.0, t - seq.arrival))
        self.c["vllm:prompt_tokens"][0] += seq.P

    def on_decode_tokens(self, n: int, itl: float) -> None:
        self._hists["vllm:inter_token_latency_seconds"].observe(itl, n)

    def on_step(self, prompt_tokens: int, new_tokens: int, step_s: float) -> None:
        self.c["vllm:generation_tokens"][0] += new_tokens
        self._hists["vllm:iteration_tokens_total"].observe(prompt_tokens + new_tokens)

    def on_preempt(self, seq: Seq) -> None:
        self.c["vllm:num_preemptions"][0] += 1

    def on_finish(self, seq: Seq, t: float) -> None:
        h = self._hists
        self.success[seq.finish_reason if seq.finish_reason in self.success else "length"] += 1
        h["vllm:e2e_request_latency_seconds"].observe(max(0.0, t - seq.arrival))
        sched = seq.first_sched if seq.first_sched is not None else seq.arrival
        first = seq.first_token_t if seq.first_token_t is not None else t
        h["vllm:request_inference_time_seconds"].observe(max(0.0, t - sched))
        h["vllm:request_prefill_time_seconds"].observe(max(0.0, first - sched))
        h["vllm:request_decode_time_seconds"].observe(max(0.0, t - first))
        h["vllm:request_prompt_tokens"].observe(seq.P)
        h["vllm:request_generation_tokens"].observe(seq.g)
        h["vllm:request_params_max_tokens"].observe(seq.max_tokens)
        if seq.g > 1:
            h["vllm:request_time_per_output_token_seconds"].observe((t - first) / (seq.g - 1))

    def on_abort(self, seq: Seq) -> None:
        self.success["abort"] += 1

    def on_lag(self, lag_s: float) -> None:
        self.lag.observe(lag_s)

    # ---- exposition ----------------------------------------------------------------------------
    def collect(self):
        labels = ["model_name", "engine"]
        for name, (fn, doc) in self.gauges.items():
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(self.labels, float(fn()))
            yield g
        if self.info:
            keys = list(self.info)
            g = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                  labels=keys + ["engine"])
            g.add_metric([self.info[k] for k in keys] + [self.labels[1]], 1.0)
            yield g
        for name, (value, doc) in self.c.items():
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(self.labels, float(value))
            yield c
        c = CounterMetricFamily("vllm:request_success", "Count of successfully processed requests.",
                                labels=labels + ["finished_reason"])
        for reason, value in self.success.items():
            c.add_metric(self.labels + [reason], float(value))
        yield c
        for name, (hist, doc) in self.h.items():
            yield _hist_family(name, doc, labels, self.labels, hist)
        yield _hist_family("emulator:scheduler_lag_seconds", _LAG_DOC, labels, self.labels, self.lag)

    def describe(self):
        return []

    # ---- fast exposition ---------------------------------------------------------------------------
    def text(self, names: Collection[str] | None = None) -> bytes:
        """``/metrics``: byte for byte what ``generate_latest(self.registry())`` renders, faster.

        ``names``: only the samples of those names (prometheus-client's ``?name[]=`` filter, as its
        ``make_asgi_app`` serves it: byte for byte ``generate_latest(registry.restricted_registry(names))``;
        a family is shown, with its HELP/TYPE head, when at least one of its samples is). The proxy's
        poller asks for the three gauges it reads: ~0.5 KB instead of ~32 KB per poll, rendered on the
        engine's own event loop (a real vLLM renders in its API server, apart from the GPU's work;
        newer vLLM ignores the filter and sends everything).
        """
        parts = self._parts or self._prepare()
        keep = (lambda _: True) if names is None else frozenset(names).__contains__
        g = floatToGoString
        out: list[str] = []
        add = out.append
        for sample, head, fn in parts["gauges"]:
            if keep(sample):
                add(head)
                add(g(fn()))
                add("\n")
        if parts["info"] and keep("vllm:cache_config_info"):
            add(parts["info"])
        for sample, head, cell in parts["counters"]:
            if keep(sample):
                add(head)
                add(g(cell[0]))
                add("\n")
        if keep("vllm:request_success_total"):
            add(parts["success_head"])
            for line, reason in parts["success"]:
                add(line)
                add(g(self.success[reason]))
                add("\n")
        for name, head, bucket_lines, count_line, sum_line, hist in parts["hists"]:
            b, c, s = keep(name + "_bucket"), keep(name + "_count"), keep(name + "_sum")
            if not (b or c or s):
                continue
            add(head)
            acc = 0
            for line, n in zip(bucket_lines, hist.counts, strict=True):
                acc += n
                if b:
                    add(line)
                    add(g(acc))
                    add("\n")
            if c:
                add(count_line)
                add(g(acc))
                add("\n")
            if s:
                add(sum_line)
                add(g(hist.sum))
                add("\n")
        return "".join(out).encode()

    _parts: dict | None = None

    def _prepare(self) -> dict:
        """The constant strings of `text` (help, type and sample names with their labels)."""
        def esc(v: str) -> str:
            return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')

        def doc(d: str) -> str:
            return d.replace("\\", r"\\").replace("\n", r"\n")

        def labels(**kv: str) -> str:
            return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in sorted(kv.items())) + "}"

        model, engine = self.labels
        base = labels(model_name=model, engine=engine)

        def head(name: str, kind: str, documentation: str) -> str:
            return f"# HELP {name} {doc(documentation)}\n# TYPE {name} {kind}\n"

        gauges = [(name, head(name, "gauge", d) + f"{name}{base} ", fn) for name, (fn, d) in self.gauges.items()]
        info = ""
        if self.info:
            name = "vllm:cache_config_info"
            info = (head(name, "gauge", "Information of the LLMEngine CacheConfig")
                    + f"{name}{labels(**self.info, engine=engine)} 1.0\n")
        counters = [(name + "_total", head(name + "_total", "counter", cell[1]) + f"{name}_total{base} ", cell)
                    for name, cell in self.c.items()]
        succ = "vllm:request_success_total"
        success = [(f"{succ}{labels(model_name=model, engine=engine, finished_reason=r)} ", r) for r in self.success]
        hists = []
        for name, (hist, d) in [*self.h.items(), ("emulator:scheduler_lag_seconds", (self.lag, _LAG_DOC))]:
            edges = [_fmt(b) for b in hist.buckets] + ["+Inf"]
            bucket_lines = [f"{name}_bucket{labels(model_name=model, engine=engine, le=le)} " for le in edges]
            hists.append((name, head(name, "histogram", d), bucket_lines, f"{name}_count{base} ",
                          f"{name}_sum{base} ", hist))
        self._parts = {"gauges": gauges, "info": info, "counters": counters, "success": success,
                       "success_head": head(succ, "counter", "Count of successfully processed requests."),
                       "hists": hists}
        return self._parts

    def registry(self) -> CollectorRegistry:
        reg = CollectorRegistry(auto_describe=False)
        reg.register(self)
        return reg


def _hist_family(name: str, doc: str, labels: list[str], values: list[str], hist: Hist):
    fam = HistogramMetricFamily(name, doc, labels=labels)
    fam.add_metric(values, hist.cumulative(), sum_value=hist.sum)
    return fam
