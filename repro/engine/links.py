"""Mechanism ``shared_link``: KV pulls whose bytes share the links at both of their ends.

vLLM's NIXL connector posts every READ of a decode engine at once, without waiting for the ones in flight
(vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py: ``NixlConnectorWorker.start_load_kv`` ->
``_read_blocks``), and polls them all each step (``_pop_done_transfers``): concurrent pulls move their bytes
together. Here each pull in flight moves at its prefill engine's ``transfer_bandwidth_bytes_per_s`` divided by
the pulls in flight at the busier of its two ends (the prefill engine's outgoing link, the decode engine's
incoming one), recomputed whenever a pull starts or ends (processor sharing; exact between those events). The
first pull between a prefill and a decode engine waits for the pair's handshake
(``NixlConnectorWorker._background_nixl_handshake``: one per remote engine, the requests that need it wait for
the same future).

Units: seconds, bytes, bytes/s.
"""

from __future__ import annotations

import math


class Links:
    """The pulls whose bytes are moving, and the pairs' handshakes (the simulator's own state)."""

    __slots__ = ("left", "rate", "src", "dst", "bandwidth", "out", "inn", "clock", "version", "first",
                 "handshake_done", "n_dec")

    def __init__(self, n_prefill: int, n_decode: int) -> None:
        self.left: dict[int, float] = {}  # request -> bytes still to move
        self.rate: dict[int, float] = {}  # request -> bytes/s now
        self.src: dict[int, int] = {}  # request -> prefill engine
        self.dst: dict[int, int] = {}  # request -> decode engine
        self.bandwidth: dict[int, float] = {}  # request -> its link's bandwidth alone (bytes/s)
        self.out = [0] * n_prefill  # pulls leaving each prefill engine
        self.inn = [0] * n_decode  # pulls entering each decode engine
        self.clock = 0.0  # the time the bytes left were counted at (s)
        self.version = 0  # bumped at every reschedule: an event of an older version is stale
        self.first = -1  # the pull the next completion event completes
        self.handshake_done: dict[int, float] = {}  # p * n_decode + d -> when the pair's handshake is done (s)
        self.n_dec = n_decode

    def handshake_wait(self, p: int, d: int, handshake_s: float, now: float) -> float:
        """Seconds a pull from prefill engine ``p`` into decode engine ``d`` starting at ``now`` waits for the
        pair's handshake: its first pull starts one of ``handshake_s``; later ones wait for the same."""
        key = p * self.n_dec + d
        done = self.handshake_done.get(key, -1.0)
        if done < 0.0:
            done = now + handshake_s
            self.handshake_done[key] = done
        return done - now if done > now else 0.0

    def advance(self, now: float) -> None:
        """Move every pull's bytes on to ``now`` at its current rate."""
        dt = now - self.clock
        if dt > 0.0:
            rate = self.rate
            left = self.left
            for r in left:
                left[r] -= rate[r] * dt
        self.clock = now

    def add(self, r: int, nbytes: float, p: int, d: int, bandwidth: float, now: float) -> None:
        """Request ``r``'s ``nbytes`` start to move from prefill engine ``p`` to decode engine ``d`` at ``now``
        (`reschedule` next)."""
        self.advance(now)
        self.left[r] = nbytes
        self.rate[r] = 0.0
        self.src[r] = p
        self.dst[r] = d
        self.bandwidth[r] = bandwidth
        self.out[p] += 1
        self.inn[d] += 1

    def remove(self, r: int, now: float) -> None:
        """Request ``r``'s pull stops (done or cancelled) at ``now`` (`reschedule` next)."""
        self.advance(now)
        del self.left[r]
        del self.rate[r]
        del self.bandwidth[r]
        self.out[self.src.pop(r)] -= 1
        self.inn[self.dst.pop(r)] -= 1

    def reschedule(self) -> float:
        """Each pull's rate now; returns in how many seconds the first of them is through (inf: none moves) and
        bumps `version`."""
        self.version += 1
        best = math.inf
        first = -1
        for r, left in self.left.items():
            n = self.out[self.src[r]]
            m = self.inn[self.dst[r]]
            rate = self.bandwidth[r] / (n if n > m else m)
            self.rate[r] = rate
            t = left / rate
            if t < best:
                best = t
                first = r
        self.first = first
        return best if best > 0.0 else 0.0

    def done(self, now: float) -> list[int]:
        """At the completion event: the pulls through by ``now`` (the one it was for, and any other within a
        byte), removed."""
        self.advance(now)
        out = [r for r, left in self.left.items() if r == self.first or left <= 1.0]
        for r in out:
            self.remove(r, now)
        return out
