"""Block pool accounting and prefix-cache reuse of the reference server's KV cache."""

import pytest

from soak.refserver.kvcache import BlockPool, BlockTable, KVCacheManager, block_hash


def test_allocate_and_free_account_exactly():
    pool = BlockPool(8)
    first = pool.allocate(3)
    second = pool.allocate(5)
    assert len(set(first + second)) == 8 and pool.num_free == 0 and pool.usage() == 1.0
    assert pool.allocate(1) is None
    pool.free(first)
    assert pool.num_used == 5 and pool.usage() == 5 / 8
    pool.free(second)
    assert pool.num_used == 0 and pool.usage() == 0.0


def test_double_free_is_an_error():
    pool = BlockPool(2)
    blocks = pool.allocate(1)
    pool.free(blocks)
    with pytest.raises(ValueError):
        pool.free(blocks)


def test_grow_allocates_only_at_block_boundaries():
    manager = KVCacheManager(BlockPool(4), block_size=4)
    table = BlockTable()
    assert manager.admit(table, list(range(5))) == 0  # 5 tokens → 2 blocks
    assert len(table.blocks) == 2
    assert manager.grow(table, 8) and len(table.blocks) == 2
    assert manager.grow(table, 9) and len(table.blocks) == 3
    assert manager.grow(table, 16) and len(table.blocks) == 4
    assert not manager.grow(table, 17)  # pool exhausted
    manager.release(table)
    assert manager.pool.num_used == 0 and table.blocks == []


def test_admit_refuses_without_taking_anything():
    manager = KVCacheManager(BlockPool(2), block_size=4)
    assert manager.admit(BlockTable(), list(range(9))) is None  # needs 3 blocks
    assert manager.pool.num_used == 0


def test_block_hash_is_chained():
    a, b = block_hash(None, [1, 2]), block_hash(None, [3, 4])
    assert block_hash(a, [3, 4]) != b  # same tokens, different prefix
    assert block_hash(a, [3, 4]) == block_hash(block_hash(None, [1, 2]), [3, 4])


def _served(manager: KVCacheManager, tokens: list[int]) -> tuple[BlockTable, int]:
    """Admit, 'compute' every token, commit: what the engine does for a prefill."""
    table = BlockTable()
    cached = manager.admit(table, tokens)
    manager.commit(table, tokens, len(tokens))
    return table, cached


def test_prefix_reuse_shares_blocks_with_refcounts():
    manager = KVCacheManager(BlockPool(16, enable_prefix_caching=True), block_size=4)
    prompt = list(range(10))  # 2 full blocks + 2 tokens
    first, cached = _served(manager, prompt)
    assert cached == 0
    second, cached = _served(manager, prompt + [99])
    assert cached == 8 and second.blocks[:2] == first.blocks[:2]
    assert all(manager.pool.refcount(b) == 2 for b in first.blocks[:2])
    assert manager.pool.num_used == 3 + 1  # 3 blocks of the first, 1 fresh block of the second
    manager.release(first)
    manager.release(second)
    assert manager.pool.num_used == 0


def test_last_token_is_always_recomputed():
    manager = KVCacheManager(BlockPool(16, enable_prefix_caching=True), block_size=4)
    prompt = list(range(8))  # exactly 2 full blocks
    table, _ = _served(manager, prompt)
    manager.release(table)
    _, cached = _served(manager, prompt)
    assert cached == 4  # the second block holds the last token, whose logits are needed


def test_freed_cached_blocks_revive_until_evicted():
    manager = KVCacheManager(BlockPool(4, enable_prefix_caching=True), block_size=4)
    prompt = list(range(9))
    table, _ = _served(manager, prompt)
    manager.release(table)
    assert manager.pool.num_used == 0  # cached but free: not counted as used
    revived, cached = _served(manager, prompt)
    assert cached == 8
    manager.release(revived)
    crowd, _ = _served(manager, [500 + i for i in range(16)])  # takes all 4 blocks: evicts the cache
    manager.release(crowd)
    _, cached = _served(manager, prompt)
    assert cached == 0


def test_without_prefix_caching_nothing_is_reused():
    manager = KVCacheManager(BlockPool(8), block_size=4)
    table, _ = _served(manager, list(range(9)))
    manager.release(table)
    assert _served(manager, list(range(9)))[1] == 0


def test_release_can_leak_tail_blocks():
    manager = KVCacheManager(BlockPool(8), block_size=4)
    table = BlockTable()
    manager.admit(table, list(range(12)))
    tail = table.blocks[-1]
    manager.release(table, leak_last=1)
    assert manager.pool.num_used == 1 and manager.pool.refcount(tail) == 1 and table.blocks == []
