"""The KV block pool: allocation, freeing, prefix hits by block hash, LRU eviction."""

from __future__ import annotations

import pytest

from governor.inference.engines.sim.kv import KVCache, prompt_block_hashes


def make(num_blocks: int = 8, *, caching: bool = True) -> KVCache:
    return KVCache(num_blocks, 4, enable_prefix_caching=caching)


def test_allocation_covers_the_tokens_and_counts_usage() -> None:
    kv = make()
    blocks: list[int] = []
    assert kv.allocate(blocks, 9)  # 9 tokens of 4 per block → 3 blocks
    assert len(blocks) == 3
    assert kv.usage == pytest.approx(3 / 8)
    assert kv.allocate(blocks, 12)  # still 3 blocks
    assert len(blocks) == 3
    kv.free(blocks)
    assert blocks == []
    assert kv.usage == 0.0


def test_allocation_that_does_not_fit_changes_nothing() -> None:
    kv = make(4)
    held: list[int] = []
    assert kv.allocate(held, 12)
    other: list[int] = []
    assert not kv.allocate(other, 8)
    assert other == []
    assert kv.num_free_blocks == 1


def test_prompt_hashes_chain_so_only_shared_prefixes_match() -> None:
    a = prompt_block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    b = prompt_block_hashes([1, 2, 3, 4, 5, 6, 7, 0], 4)
    c = prompt_block_hashes([0, 2, 3, 4, 5, 6, 7, 8], 4)
    assert len(a) == 2  # the partial third block has no hash
    assert a[0] == b[0]
    assert a[1] != b[1]
    assert c[1] != a[1]  # same block content, different prefix


def test_freed_registered_blocks_are_found_again() -> None:
    kv = make()
    hashes = prompt_block_hashes(list(range(12)), 4)
    blocks: list[int] = []
    kv.allocate(blocks, 12)
    for block, block_hash in zip(blocks, hashes, strict=True):
        kv.register(block, block_hash)
    first = list(blocks)
    kv.free(blocks)
    hit = kv.longest_cached_prefix(hashes, max_blocks=2)
    assert hit == first[:2]
    again: list[int] = []
    assert kv.allocate(again, 12, hit)
    assert again[:2] == first[:2]
    assert kv.usage == pytest.approx(3 / 8)


def test_a_hit_is_shared_while_both_requests_hold_it() -> None:
    kv = make()
    hashes = prompt_block_hashes(list(range(8)), 4)
    a: list[int] = []
    kv.allocate(a, 8)
    kv.register(a[0], hashes[0])
    b: list[int] = []
    kv.allocate(b, 8, kv.longest_cached_prefix(hashes, 2))
    assert b[0] == a[0]
    assert kv.usage == pytest.approx(3 / 8)
    kv.free(a)
    assert kv.usage == pytest.approx(2 / 8)  # b still holds the shared block


def test_eviction_takes_the_least_recently_freed_block_and_forgets_its_hash() -> None:
    kv = make(2)
    old, new = prompt_block_hashes(list(range(4)), 4), prompt_block_hashes(list(range(4, 8)), 4)
    first: list[int] = []
    kv.allocate(first, 4)
    kv.register(first[0], old[0])
    second: list[int] = []
    kv.allocate(second, 4)
    kv.register(second[0], new[0])
    kv.free(first)
    kv.free(second)
    assert kv.num_cached_blocks == 2
    taker: list[int] = []
    kv.allocate(taker, 4)  # evicts the block freed first
    assert kv.longest_cached_prefix(old, 1) == []
    assert kv.longest_cached_prefix(new, 1) != []


def test_caching_off_finds_nothing() -> None:
    kv = make(caching=False)
    hashes = prompt_block_hashes(list(range(4)), 4)
    blocks: list[int] = []
    kv.allocate(blocks, 4)
    kv.register(blocks[0], hashes[0])
    kv.free(blocks)
    assert kv.longest_cached_prefix(hashes, 1) == []


def test_reset_forgets_every_cached_prefix() -> None:
    kv = make()
    hashes = prompt_block_hashes(list(range(4)), 4)
    blocks: list[int] = []
    kv.allocate(blocks, 4)
    kv.register(blocks[0], hashes[0])
    kv.reset_prefix_cache()
    assert kv.longest_cached_prefix(hashes, 1) == []


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        KVCache(0, 16, enable_prefix_caching=True)
