"""The KV cache as vLLM's block pool: fixed-size blocks, prefix caching by block hash, LRU eviction.

A request holds a list of blocks covering its computed tokens. A full prompt block is
registered under the hash of its tokens chained with the previous block's hash, so two prompts
that share a prefix share the hashes of that prefix's blocks. When a request finishes its blocks
return to the free queue *with* their hashes: a later request can take them back (a prefix-cache
hit) until allocation evicts them, least recently freed first — vLLM's ``FreeKVCacheBlockQueue``.

Usage is the fraction of blocks held by requests; free cached blocks count as free, as in vLLM.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def prompt_block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``token_ids`` (a trailing partial block has none)."""
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, *token_ids[start : start + block_size]))
        hashes.append(parent)
    return hashes


class KVCache:
    """Block allocator with prefix caching. Requests are identified by their block lists."""

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"need positive blocks and block size: {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}  # block hash → block id
        # Free blocks, least recently freed first; cached ones stay here until evicted.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests, 0..1 (``vllm:kv_cache_usage_perc``)."""
        return 1.0 - len(self._free) / self.num_blocks

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def longest_cached_prefix(self, block_hashes: Sequence[int], max_blocks: int) -> list[int]:
        """Blocks holding the longest cached prefix of ``block_hashes`` (at most ``max_blocks``)."""
        if not self.enable_prefix_caching:
            return []
        hit: list[int] = []
        cached = self._cached
        for block_hash in block_hashes[:max_blocks]:
            block = cached.get(block_hash)
            if block is None:
                break
            hit.append(block)
        return hit

    def allocate(self, blocks: list[int], num_tokens: int, hit: Sequence[int] = ()) -> bool:
        """Grow ``blocks`` (a request's list, extended in place) to cover ``num_tokens``.

        ``hit`` are cached blocks the request takes first (its prefix-cache hit). Returns
        False, changing nothing, when the free blocks do not suffice.
        """
        needed = self.blocks_for(num_tokens) - len(blocks) - len(hit)
        # Hit blocks nobody holds sit in the free queue: taking them uses free blocks too.
        reclaimed = sum(1 for block in hit if self._ref[block] == 0)
        if needed + reclaimed > len(self._free):
            return False
        ref = self._ref
        for block in hit:
            if ref[block] == 0:
                del self._free[block]
            ref[block] += 1
            blocks.append(block)
        for _ in range(needed):
            block, _none = self._free.popitem(last=False)
            evicted = self._hash[block]
            if evicted is not None:
                self._hash[block] = None
                if self._cached.get(evicted) == block:
                    del self._cached[evicted]
            ref[block] = 1
            blocks.append(block)
        return True

    def register(self, block: int, block_hash: int) -> None:
        """Mark a full block as holding the tokens ``block_hash`` names (first writer wins)."""
        if not self.enable_prefix_caching or self._hash[block] is not None:
            return
        if block_hash not in self._cached:
            self._cached[block_hash] = block
            self._hash[block] = block_hash

    def free(self, blocks: list[int]) -> None:
        """Release a request's blocks (the list is emptied); tail blocks are evicted first."""
        ref, free = self._ref, self._free
        for block in reversed(blocks):
            ref[block] -= 1
            if ref[block] == 0:
                free[block] = None
        blocks.clear()

    def reset_prefix_cache(self) -> None:
        """Forget every cached hash (vLLM's ``reset_prefix_cache``)."""
        for block in self._cached.values():
            self._hash[block] = None
        self._cached.clear()
