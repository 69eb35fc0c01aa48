"""Fidelity and capacity of the emulated engine (prints tables; default run well under 5 minutes).

Part 1, fidelity of one engine at time scale 1: a prompt-length sweep (one request at a time) and
a concurrency sweep (c simultaneous requests), measured TTFT and inter-token latency (ITL) at the
client, against the profile's Physics:

- "closed form": ``prefill_request_time_s(L)`` for TTFT and the mean of
  ``decode_step_s(n, context)`` over the output for ITL (single-request rows; for concurrency the
  steady-state step ``decode_step_s(c, c x (L + out/2))``; the c requests of a concurrency row are
  sent while a 2048-token "blocker" prefill runs, so they share one step boundary and their TTFT
  includes the rest of the blocker's step: only the replay predicts that);
- "replay": the very same `EngineCore` run on a virtual clock with the measured send times as
  arrivals, i.e. what the physics says for exactly these arrivals (includes batching effects
  such as a request arriving during another's prefill step).

Part 2, capacity: a whole 2p4d emulated cluster on this machine, driven open-loop at ``--rate``
requests per physics second (default 24) with the ``mixed`` workload's lengths (Table I, trace
seed 7) through the two-step P/D flow (this script is its own minimal round-robin router), at
increasing time scales. For each scale the per-request client TTFT and TPOT are compared with a
virtual-clock replay of every engine fed the measured arrival times, and the run gets the live
harness's validity verdict (`repro.live.validity.judge`: this driver's send lag, the engines' step
lateness and lost time, CPU steal, and the harness latency: here the median of measured minus
replayed TTFT, of which K adds (K - 1) / K). The highest scale that is valid and whose mean errors stay within
``--tolerance`` (5%) is reported. ``--hog N`` runs N busy-loop processes meanwhile (background load);
``--shared`` serves every engine from one process (`repro.emulator.server`) instead of one each.
``--nice N`` runs the engines and the driver at niceness N (default: the live runs' `live_nice`,
-5; ``off``: unchanged) and ``--sched rr|normal`` under real-time round-robin or normal scheduling
(default: the live runs' `live_realtime`, rr; `repro.cluster.processes.enter_live_loop`); start it
with ``setsid`` so that the driver has a session of its own.

    python benchmarks/bench_emulator.py                 # both parts
    python benchmarks/bench_emulator.py --part capacity --scales 1,2,4,8 --hog 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx

from repro.cluster.launchers import launch
from repro.cluster.processes import (
    LIVE_NICE_ENV,
    LIVE_SCHED_ENV,
    enter_live_loop,
    live_nice,
    live_realtime,
    policy_name,
    set_priority,
)
from repro.emulator.core import EngineCore
from repro.emulator.http import RawClient
from repro.emulator.seq import Seq
from repro.engine.physics import Physics
from repro.engine.profile import load_profile

PROFILE = "a40-qwen2.5-3b"
PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                  "remote_block_ids": None, "remote_host": None, "remote_port": None}


def make_prompt_ids(n: int, rng: random.Random) -> list[int]:
    return [rng.randrange(1, 150_000) for _ in range(n)]


# ---- virtual-clock replay ----------------------------------------------------------------------
@dataclass
class VReq:
    key: str
    arrival: float
    prompt_ids: list[int]
    max_tokens: int
    remote: bool = False
    first: float | None = None
    finish: float | None = None
    seq: Seq | None = None


def replay(physics: Physics, reqs: list[VReq]) -> None:
    """Run one engine's core on a virtual clock; fills ``first``/``finish`` of each request."""
    core = EngineCore(physics)
    reqs = sorted(reqs, key=lambda r: r.arrival)
    pulls: list[tuple[float, Seq]] = []
    i = 0
    now = 0.0
    by_seq = {}
    while True:
        while i < len(reqs) and reqs[i].arrival <= now + 1e-12:
            r = reqs[i]
            seq = Seq(r.key, r.prompt_ids, target=r.max_tokens, remote={"v": 1} if r.remote else None,
                      arrival=r.arrival)
            r.seq = seq
            by_seq[id(seq)] = r
            core.add(seq)
            i += 1
        pulls.sort(key=lambda x: x[0])
        while pulls and pulls[0][0] <= now + 1e-12:
            _, seq = pulls.pop(0)
            core.kv_arrived(seq, True, now)
        plan = core.schedule(now)
        if plan is not None:
            for seq in plan.pulls:
                pulls.append((now + physics.transfer_time_s(seq.transfer_tokens), seq))
        if plan is not None and (plan.items or plan.n_dec):
            end = now + plan.time_s
            core.complete(plan, end)
            now = end
            continue
        nxt = []
        if i < len(reqs):
            nxt.append(reqs[i].arrival)
        if pulls:
            nxt.append(min(p[0] for p in pulls))
        if not nxt:
            break
        now = max(now, min(nxt))
    for r in reqs:
        r.first = r.seq.first_token_t
        r.finish = r.seq.finish_t


# ---- streaming client ---------------------------------------------------------------------------
@dataclass
class Result:
    send: float = 0.0
    planned: float = 0.0
    first: float | None = None
    last: float | None = None
    n: int = 0
    prefill_resp: float | None = None
    decode_send: float | None = None
    error: str | None = None
    kv: dict | None = None
    prefill_url: str = ""
    decode_url: str = ""


async def stream_completion(client: RawClient, url: str, body: dict, res: Result, headers=None) -> None:
    gen = client.post(url + "/v1/completions", body, headers)
    status, _ = await gen.__anext__()
    buf = b""
    async for now, chunk in gen:
        if status != 200:
            res.error = f"HTTP {status}"
            continue
        if True:
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: ") or event == b"data: [DONE]":
                    continue
                obj = json.loads(event[6:])
                if obj.get("choices"):
                    if res.first is None:
                        res.first = now
                    res.last = now
                if obj.get("usage"):
                    res.n = obj["usage"]["completion_tokens"]


def body_for(prompt_ids: list[int], max_tokens: int, stream: bool = True) -> dict:
    b = {"model": "Qwen/Qwen2.5-3B-Instruct", "prompt": prompt_ids, "max_tokens": max_tokens,
         "ignore_eos": True, "temperature": 0.0, "stream": stream}
    if stream:
        b["stream_options"] = {"include_usage": True}
    return b


# ---- part 1 -----------------------------------------------------------------------------------
def closed_itl(phys: Physics, L: int, out: int, n: int = 1) -> float:
    steps = [phys.decode_step_s(n, n * (L + g)) for g in range(1, out)]
    return sum(steps) / len(steps)


async def fidelity(args) -> list[dict]:
    phys = load_profile(PROFILE).physics
    rng = random.Random(1)
    rows = []
    with launch("1p1d", "emulated", time_scale=1.0, stream_interval_tokens=1, stream_interval_ms=0) as inst:
        url = inst[0].url
        client = RawClient()
        if True:
            for _ in range(3):  # warm-up
                await stream_completion(client, url, body_for(make_prompt_ids(64, rng), 4), Result())
            # prompt-length sweep
            out = args.out_tokens
            for L in args.lengths:
                ms, vs, itls, vitl = [], [], [], []
                for _ in range(args.reps):
                    ids = make_prompt_ids(L, rng)
                    res = Result(send=time.monotonic())
                    await stream_completion(client, url, body_for(ids, out), res)
                    ttft = res.first - res.send
                    itl = (res.last - res.first) / (out - 1)
                    v = VReq("x", 0.0, ids, out)
                    replay(phys, [v])
                    ms.append(ttft)
                    itls.append(itl)
                    vs.append(v.first)
                    vitl.append((v.finish - v.first) / (out - 1))
                    await asyncio.sleep(0.05)
                rows.append(dict(sweep="prompt", x=L, c=1,
                                 ttft_closed=phys.prefill_request_time_s(L), ttft_replay=statistics.mean(vs),
                                 ttft_meas=statistics.mean(ms),
                                 itl_closed=closed_itl(phys, L, out), itl_replay=statistics.mean(vitl),
                                 itl_meas=statistics.mean(itls)))
            # concurrency sweep
            L = args.conc_prompt
            out = args.conc_out
            for c in args.concurrency:
                mt, rt, mi, ri = [], [], [], []
                # open c keep-alive connections first, so that send time ~ arrival time
                await asyncio.gather(*(stream_completion(client, url, body_for(make_prompt_ids(16, rng), 2), Result())
                                       for _ in range(c)))
                for _ in range(args.reps):
                    # a blocker prefill keeps the engine busy while the c requests arrive, so that they
                    # all wait for the same step boundary (sub-millisecond send jitter then cannot
                    # decide which step a request lands in)
                    blocker_ids = make_prompt_ids(2048, rng)
                    blocker = Result()
                    results = [Result() for _ in range(c)]
                    ids = [make_prompt_ids(L, rng) for _ in range(c)]
                    t0 = time.monotonic()

                    async def block(blocker=blocker, blocker_ids=blocker_ids):
                        blocker.send = time.monotonic()
                        await stream_completion(client, url, body_for(blocker_ids, 1), blocker)

                    async def one(k, results=results, ids=ids):
                        await asyncio.sleep(0.01)
                        results[k].send = time.monotonic()
                        await stream_completion(client, url, body_for(ids[k], out), results[k])

                    await asyncio.gather(block(), *(one(k) for k in range(c)))
                    vreqs = [VReq("b", blocker.send - t0, blocker_ids, 1)]
                    vreqs += [VReq(str(k), results[k].send - t0, ids[k], out) for k in range(c)]
                    replay(phys, vreqs)
                    for r, v in zip(results, vreqs[1:], strict=True):
                        mt.append(r.first - r.send)
                        rt.append(v.first - v.arrival)
                        mi.append((r.last - r.first) / (out - 1))
                        ri.append((v.finish - v.first) / (out - 1))
                    await asyncio.sleep(0.05)
                rows.append(dict(sweep="concurrency", x=L, c=c,
                                 ttft_closed=float("nan"),
                                 ttft_replay=statistics.mean(rt), ttft_meas=statistics.mean(mt),
                                 itl_closed=phys.decode_step_s(c, c * (L + out // 2)), itl_replay=statistics.mean(ri),
                                 itl_meas=statistics.mean(mi)))
    return rows


def print_fidelity(rows: list[dict]) -> None:
    print("\n## Fidelity of one emulated engine at time scale 1 (profile a40-qwen2.5-3b), times in ms")
    print("| sweep | prompt | conc | TTFT closed | TTFT replay | TTFT measured | err vs replay | "
          "ITL closed | ITL replay | ITL measured | err vs replay |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        te = r["ttft_meas"] / r["ttft_replay"] - 1
        ie = r["itl_meas"] / r["itl_replay"] - 1
        tc = "-" if math.isnan(r["ttft_closed"]) else f"{r['ttft_closed'] * 1e3:.1f}"
        print(f"| {r['sweep']} | {r['x']} | {r['c']} | {tc} | {r['ttft_replay'] * 1e3:.1f} | "
              f"{r['ttft_meas'] * 1e3:.1f} | {te * 100:+.1f}% | {r['itl_closed'] * 1e3:.2f} | "
              f"{r['itl_replay'] * 1e3:.2f} | {r['itl_meas'] * 1e3:.2f} | {ie * 100:+.1f}% |")


# ---- part 2 -----------------------------------------------------------------------------------
@dataclass
class Job:
    key: str
    at: float  # physics seconds after start
    prompt_ids: list[int]
    out: int
    res: Result = field(default_factory=Result)


def make_jobs(rate: float, duration: float, seed: int, workload: str = "mixed") -> list[Job]:
    """``duration`` physics seconds of the workload's trace at ``rate`` (its arrivals and lengths;
    random token ids of those lengths)."""
    from repro.workload.traces import make_trace

    rng = random.Random(seed)
    df = make_trace(workload, seed=seed, rate=rate, n_requests=max(1, int(rate * duration * 1.5) + 10)).df
    df = df[df.arrival_s <= duration]
    return [Job(f"j{k}", float(r.arrival_s), make_prompt_ids(int(r.prompt_tokens), rng), int(r.output_tokens))
            for k, r in enumerate(df.itertuples())]


async def drive_cluster(instances, jobs: list[Job], K: float) -> float:
    prefill = [i.url for i in instances if i.role == "prefill"]
    decode = [i.url for i in instances if i.role == "decode"]
    client = RawClient()
    if True:
        # warm every pair
        for p in prefill:
            for d in decode:
                j = Job("w", 0, make_prompt_ids(32, random.Random(0)), 4)
                await pd_request(client, p, d, j, 0)
        t0 = time.monotonic()
        tasks = []
        for n, job in enumerate(jobs):
            at = t0 + job.at / K
            delay = at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            job.res.planned = at
            tasks.append(asyncio.create_task(
                _bounded(pd_request(client, prefill[n % len(prefill)], decode[n % len(decode)], job, n), job)
            ))
        await asyncio.gather(*tasks)
    return t0


async def _bounded(coro, job: Job, timeout: float = 120.0) -> None:
    try:
        await asyncio.wait_for(coro, timeout)
    except Exception as exc:  # a request that hangs or fails is counted as failed, not waited for
        job.res.error = f"{type(exc).__name__}: {exc}"


async def pd_request(client: RawClient, p_url: str, d_url: str, job: Job, n: int) -> None:
    res = job.res
    res.prefill_url, res.decode_url = p_url, d_url
    headers = {"X-Request-Id": f"{job.key}-{n}"}
    body = body_for(job.prompt_ids, job.out)
    pre = dict(body, stream=False, max_tokens=1, kv_transfer_params=dict(PREFILL_PARAMS))
    pre.pop("stream_options", None)
    res.send = time.monotonic()
    status, raw = await client.post_json(p_url + "/v1/completions", pre, headers)
    res.prefill_resp = time.monotonic()
    if status != 200:
        res.error = f"prefill HTTP {status}"
        return
    kv = json.loads(raw).get("kv_transfer_params")
    res.kv = kv
    dec = dict(body)
    if kv:
        dec["kv_transfer_params"] = kv
    res.decode_send = time.monotonic()
    await stream_completion(client, d_url, dec, res, headers=headers)


def analyse(jobs: list[Job], t0: float, K: float, phys: Physics) -> dict:
    by_p: dict[str, list[VReq]] = {}
    by_d: dict[str, list[VReq]] = {}
    pairs = []
    for j in jobs:
        r = j.res
        if r.error or r.first is None:
            continue
        vp = VReq(j.key, (r.send - t0) * K, j.prompt_ids, 1)
        vd = VReq(j.key, (r.decode_send - t0) * K, j.prompt_ids, j.out, remote=bool(r.kv))
        by_p.setdefault(r.prefill_url, []).append(vp)
        by_d.setdefault(r.decode_url, []).append(vd)
        pairs.append((j, vp, vd))
    for reqs in list(by_p.values()) + list(by_d.values()):
        replay(phys, reqs)
    mt, rt, mo, ro = [], [], [], []
    sp_m, sp_r, sd_m, sd_r, gap = [], [], [], [], []
    for j, vp, vd in pairs:
        r = j.res
        sp_m.append((r.prefill_resp - r.send) * K)
        sp_r.append(vp.finish - vp.arrival)
        sd_m.append((r.first - r.decode_send) * K)
        sd_r.append(vd.first - vd.arrival)
        gap.append((r.decode_send - r.prefill_resp) * K)
        meas_ttft = (r.first - r.send) * K
        ref_ttft = (vp.finish - vp.arrival) + (r.decode_send - r.prefill_resp) * K + (vd.first - vd.arrival)
        mt.append(meas_ttft)
        rt.append(ref_ttft)
        if j.out > 1:
            mo.append((r.last - r.first) * K / (j.out - 1))
            ro.append((vd.finish - vd.first) / (j.out - 1))
    errors = sum(1 for j in jobs if j.res.error or j.res.first is None)

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    return dict(
        n=len(pairs), errors=errors,
        stage_prefill_meas=statistics.mean(sp_m), stage_prefill_ref=statistics.mean(sp_r),
        stage_decode_meas=statistics.mean(sd_m), stage_decode_ref=statistics.mean(sd_r),
        client_gap=statistics.mean(gap),
        ttft_meas=statistics.mean(mt), ttft_ref=statistics.mean(rt),
        ttft_p90_meas=pct(mt, 0.9), ttft_p90_ref=pct(rt, 0.9),
        tpot_meas=statistics.mean(mo), tpot_ref=statistics.mean(ro),
        ttft_err=statistics.mean(mt) / statistics.mean(rt) - 1,
        ttft_excess_p50=statistics.median(m - r for m, r in zip(mt, rt, strict=True)),
        ttft_p90_err=pct(mt, 0.9) / pct(rt, 0.9) - 1,
        tpot_err=statistics.mean(mo) / statistics.mean(ro) - 1,
    )


async def capacity(args) -> list[dict]:
    from repro.live.validity import CpuSampler, engine_lateness, judge, lateness_between

    phys = load_profile(PROFILE).physics
    rows = []
    for K in args.scales:
        jobs = make_jobs(args.rate, args.duration, seed=7, workload=args.workload)
        enter_live_loop()  # as the live processes do: settled heap (the jobs' prompts), real-time scheduling
        with launch("2p4d", "emulated", time_scale=K, shared_process=args.shared) as inst:
            urls = [i.url for i in inst]
            before = engine_lateness(urls)
            cpu = CpuSampler()
            cpu.start()
            t_start = time.monotonic()
            t0 = await drive_cluster(inst, jobs, K)
            wall = time.monotonic() - t_start
            late_p99, lost = lateness_between(before, engine_lateness(urls), wall)
            steal = cpu.steal_fraction()
            lags = sorted(j.res.send - j.res.planned for j in jobs if j.res.planned)
            policies = [policy_name(0)] + [httpx.get(i.url + "/_emulator/state", trust_env=False).json()
                                           .get("priority", {}).get("policy") for i in inst]
            step_lags = []
            for i in inst:
                text = httpx.get(i.url + "/metrics", trust_env=False).text
                cnt = float(_metric(text, "emulator:scheduler_lag_seconds_count"))
                tot = float(_metric(text, "emulator:scheduler_lag_seconds_sum"))
                over = cnt - float(_metric(text, 'emulator:scheduler_lag_seconds_bucket', 'le="0.005"'))
                step_lags.append(f"{i.name}: mean {tot / max(cnt, 1) * 1e3:.2f} ms, >5ms {int(over)}/{int(cnt)}")
            if args.verbose:
                print("   lag (physics):", "; ".join(step_lags))
        row = analyse(jobs, t0, K, phys)
        # the harness latency: measured TTFT minus the physics replay's, median (physics s)
        verdict = judge(time_scale=K, client_lag_p99_s=lags[int(0.99 * (len(lags) - 1))] if lags else None,
                        proxy=None, engine_late_p99_s=late_p99, engine_lost_fraction=lost, cpu_steal_fraction=steal,
                        harness_latency_p50_s=row["ttft_excess_p50"])
        row.update(scale=K, wall_s=wall, rate=args.rate, valid=verdict.valid, reasons=verdict.reasons,
                   measured=verdict.measured)
        rows.append(row)
        print(f"  scale {K:g}: n={row['n']} errors={row['errors']} TTFT err {row['ttft_err'] * 100:+.1f}% "
              f"(p90 {row['ttft_p90_err'] * 100:+.1f}%), TPOT err {row['tpot_err'] * 100:+.1f}%  [{wall:.1f} s wall]; "
              f"stages (ms, ref/meas): "
              f"prefill {row['stage_prefill_ref'] * 1e3:.1f}/{row['stage_prefill_meas'] * 1e3:.1f}, "
              f"decode-first {row['stage_decode_ref'] * 1e3:.1f}/{row['stage_decode_meas'] * 1e3:.1f}, "
              f"client gap {row['client_gap'] * 1e3:.1f}; scheduling at the end (driver, engines): "
              f"{','.join(str(p) for p in policies)}; {verdict.line()}",
              flush=True)
        if abs(row["ttft_err"]) > 2 * args.tolerance and abs(row["tpot_err"]) > 2 * args.tolerance:
            break  # past what the machine can emulate: higher scales only get worse
    return rows


def _metric(text: str, name: str, label: str = "") -> str:
    for line in text.splitlines():
        if line.startswith(name + "{") and label in line:
            return line.rsplit(" ", 1)[1]
    return "0"


def print_capacity(rows: list[dict], args) -> None:
    tol = args.tolerance
    print(f"\n## 2p4d emulated cluster ({'one shared process' if args.shared else 'one process per engine'}) "
          f"on {os.cpu_count()} CPU cores with {args.hog} busy-loop hog(s), {args.workload} at {rows[0]['rate']:g} "
          f"requests per physics second; engines and driver: niceness {args.nice}, scheduling {args.sched}")
    print("| time scale | requests | failed | mean TTFT ref / meas (ms) | err | p90 TTFT err | "
          "mean TPOT ref / meas (ms) | err | harness latency p50 / added (ms) | wall s | valid |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    best = None
    for r in rows:
        ok = abs(r["ttft_err"]) <= tol and abs(r["tpot_err"]) <= tol and r["errors"] == 0 and r["valid"]
        if ok and (best is None or r["scale"] > best):
            best = r["scale"]
        print(f"| {r['scale']:g} | {r['n']} | {r['errors']} | {r['ttft_ref'] * 1e3:.1f} / {r['ttft_meas'] * 1e3:.1f} | "
              f"{r['ttft_err'] * 100:+.1f}% | {r['ttft_p90_err'] * 100:+.1f}% | {r['tpot_ref'] * 1e3:.2f} / "
              f"{r['tpot_meas'] * 1e3:.2f} | {r['tpot_err'] * 100:+.1f}% | {r['ttft_excess_p50'] * 1e3:.1f} / "
              f"{r['measured']['harness_added_latency_s'] * 1e3:.1f} | {r['wall_s']:.1f} | "
              f"{'yes' if r['valid'] else 'no: ' + '; '.join(r['reasons'])} |")
    print(f"\nhighest valid time scale with |mean TTFT err| and |mean TPOT err| <= {tol * 100:.0f}%: "
          f"{best if best is not None else 'none in the sweep'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["all", "fidelity", "capacity"], default="all")
    ap.add_argument("--lengths", default="128,512,1024,2048,4096,8192")
    ap.add_argument("--out-tokens", type=int, default=32)
    ap.add_argument("--concurrency", default="1,2,4,8,16,32")
    ap.add_argument("--conc-prompt", type=int, default=512)
    ap.add_argument("--conc-out", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--scales", default="1,2,4,8")
    ap.add_argument("--rate", type=float, default=24.0, help="requests per physics second")
    ap.add_argument("--duration", type=float, default=20.0, help="physics seconds of arrivals per scale")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--workload", default="mixed", help="the trace whose arrivals and lengths drive the cluster")
    ap.add_argument("--hog", type=int, default=0, help="busy-loop processes running meanwhile (background load)")
    ap.add_argument("--shared", action="store_true", help="every engine in one process (default: one process each)")
    ap.add_argument("--nice", default=None,
                    help="niceness of the engines and this driver (default: $REPRO_LIVE_NICE, else -5; 'off': "
                         "leave it); run the script under `setsid` so that the driver's session is its own")
    ap.add_argument("--sched", default=None, choices=["rr", "normal"],
                    help="scheduling of the engines and this driver (default: $REPRO_LIVE_SCHED, else rr)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.nice is not None:
        os.environ[LIVE_NICE_ENV] = args.nice
    if args.sched is not None:
        os.environ[LIVE_SCHED_ENV] = args.sched
    args.nice = live_nice()
    args.sched = "rr" if live_realtime() else "normal"
    set_priority(args.nice)
    args.lengths = [int(x) for x in args.lengths.split(",")]
    args.concurrency = [int(x) for x in args.concurrency.split(",")]
    args.scales = [float(x) for x in args.scales.split(",")]
    if args.part in ("all", "fidelity"):
        rows = asyncio.run(fidelity(args))
        print_fidelity(rows)
    if args.part in ("all", "capacity"):
        print("\ncapacity sweep:", flush=True)
        with hogs(args.hog):
            rows = asyncio.run(capacity(args))
        print_capacity(rows, args)
    return 0


@contextlib.contextmanager
def hogs(n: int):
    """``n`` busy-loop processes (``while True: pass``, each in a session of its own at niceness 0,
    like another user's job) for the block; killed after it."""
    procs = [subprocess.Popen([sys.executable, "-c", "import os; os.setpriority(os.PRIO_PROCESS, 0, 0)\n"
                               "while True: pass"], start_new_session=True) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
