"""The emulated engine's KV cache: blocks and the prefix cache (vLLM v1's block pool).

Blocks are numbered ``1..num_blocks`` (block 0 is vLLM's reserved null block) and hold
``Physics.block_size`` tokens each; the scheduler (`repro.emulator.core.EngineCore`) decides who
gets them and computes the content hashes (one per full block of prompt token ids, chained over the
prompt's blocks). A registered hash makes its block a prefix-cache entry, kept while the block sits
free until it is handed out again. No clock, no HTTP: block numbers, reference counts and hashes only.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """KV blocks ``1..num_blocks`` (block 0 is vLLM's reserved null block), with a prefix cache.

    Free blocks sit in an LRU queue; a freed block keeps its content hash (a cache entry) until
    it is handed out again. Requests free their blocks tail first, as vLLM does, so the tail of
    a prompt is evicted before its head.
    """

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks + 1))
        self.ref = [0] * (num_blocks + 1)
        self.hash_of: list[int | None] = [None] * (num_blocks + 1)
        self.cached: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free)

    def usage(self) -> float:
        return (self.num_blocks - len(self.free)) / self.num_blocks if self.num_blocks else 0.0

    def allocate(self, k: int) -> list[int]:
        if k > len(self.free):
            raise RuntimeError(f"allocate({k}) with {len(self.free)} free blocks")
        out = []
        free, ref, hash_of, cached = self.free, self.ref, self.hash_of, self.cached
        for _ in range(k):
            b, _ = free.popitem(last=False)
            h = hash_of[b]
            if h is not None:
                if cached.get(h) == b:
                    del cached[h]
                hash_of[b] = None
            ref[b] = 1
            out.append(b)
        return out

    def touch_prefix(self, hashes: list[int], max_blocks: int) -> list[int]:
        """Take a reference on the longest cached prefix (at most ``max_blocks`` blocks)."""
        out = []
        cached, ref, free = self.cached, self.ref, self.free
        for h in hashes[:max_blocks]:
            b = cached.get(h)
            if b is None:
                break
            if ref[b] == 0:
                del free[b]
            ref[b] += 1
            out.append(b)
        return out

    def release(self, blocks: list[int]) -> None:
        ref, free = self.ref, self.free
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None

    def register(self, block: int, h: int) -> None:
        if self.hash_of[block] is None and h not in self.cached:
            self.cached[h] = block
            self.hash_of[block] = h

    def reset_cache(self) -> int:
        """Forget every cached hash (vLLM's reset_prefix_cache). Returns the number dropped."""
        n = len(self.cached)
        for b in self.cached.values():
            self.hash_of[b] = None
        self.cached.clear()
        return n
