"""KV-cache block accounting: a fixed pool of blocks, per-sequence block tables, prefix caching.

This module only counts and maps block ids; the tensors that hold keys and values live in
`model.PagedKVCache`, indexed by these ids. `BlockPool.usage` is what `vllm:kv_cache_usage_perc`
reports, so it must be exact: a block is used while any sequence holds a reference to it.
"""

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field


def block_hash(parent: bytes | None, tokens: Sequence[int]) -> bytes:
    """Chained hash of one full block: depends on its tokens and on every block before it."""
    return hashlib.blake2b((parent or b"") + array("I", tokens).tobytes(), digest_size=16).digest()


class BlockPool:
    """A fixed number of blocks with reference counts.

    Free blocks wait in least-recently-freed order. With prefix caching a free block keeps its
    content hash until it is handed out again, so a later request with the same prefix can revive it.
    """

    def __init__(self, num_blocks: int, enable_prefix_caching: bool = False) -> None:
        if num_blocks <= 0:
            raise ValueError("num_blocks must be > 0")
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self._refcount = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._hash_of_block: dict[int, bytes] = {}
        self._block_of_hash: dict[bytes, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def usage(self) -> float:
        """Fraction of blocks held by at least one sequence (0–1)."""
        return self.num_used / self.num_blocks

    def refcount(self, block: int) -> int:
        return self._refcount[block]

    def allocate(self, count: int) -> list[int] | None:
        """Take `count` blocks, evicting the oldest cached ones first; None if too few are free."""
        if count > len(self._free):
            return None
        blocks = []
        for _ in range(count):
            block, _ = self._free.popitem(last=False)
            self._forget_hash(block)
            self._refcount[block] = 1
            blocks.append(block)
        return blocks

    def share(self, blocks: Sequence[int]) -> None:
        """Add a reference to each (cached) block, taking it off the free queue if needed."""
        for block in blocks:
            if self._refcount[block] == 0:
                del self._free[block]
            self._refcount[block] += 1

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block; unreferenced blocks go back to the free queue.

        Tail blocks are queued first so they are evicted first: a prefix is worth more than a suffix.
        """
        for block in reversed(blocks):
            if self._refcount[block] <= 0:
                raise ValueError(f"block {block} freed more often than taken")
            self._refcount[block] -= 1
            if self._refcount[block] == 0:
                self._free[block] = None

    def cached_prefix(self, hashes: Sequence[bytes]) -> list[int]:
        """Blocks caching the longest run of `hashes` from the start."""
        blocks = []
        if self.enable_prefix_caching:
            for digest in hashes:
                block = self._block_of_hash.get(digest)
                if block is None:
                    break
                blocks.append(block)
        return blocks

    def count_free_among(self, blocks: Sequence[int]) -> int:
        """How many of `blocks` sit on the free queue (sharing them uses up free capacity)."""
        return sum(1 for block in blocks if self._refcount[block] == 0)

    def register(self, block: int, digest: bytes) -> None:
        """Record that `block` holds the full block hashed `digest` (first holder of a hash wins)."""
        if self.enable_prefix_caching and digest not in self._block_of_hash and block not in self._hash_of_block:
            self._block_of_hash[digest] = block
            self._hash_of_block[block] = digest

    def _forget_hash(self, block: int) -> None:
        digest = self._hash_of_block.pop(block, None)
        if digest is not None:
            del self._block_of_hash[digest]


@dataclass
class BlockTable:
    """The blocks one sequence holds, in position order, and the hashes of its full blocks."""

    blocks: list[int] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)
    num_registered: int = 0  # leading blocks already offered to the prefix cache

    def extend_hashes(self, tokens: Sequence[int], block_size: int) -> None:
        """Hash every full block of `tokens` not hashed yet (tokens only ever grow)."""
        for index in range(len(self.hashes), len(tokens) // block_size):
            parent = self.hashes[-1] if self.hashes else None
            self.hashes.append(block_hash(parent, tokens[index * block_size:(index + 1) * block_size]))


class KVCacheManager:
    """Block-level operations on sequences: admit with prefix reuse, grow, commit, release."""

    def __init__(self, pool: BlockPool, block_size: int) -> None:
        self.pool = pool
        self.block_size = block_size

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def admit(self, table: BlockTable, tokens: Sequence[int]) -> int | None:
        """Give an empty table blocks for all of `tokens`; return how many tokens were found cached.

        At least the last token is always recomputed (its logits are needed), as in vLLM.
        Returns None, holding nothing, when the pool cannot fit the sequence now.
        """
        table.extend_hashes(tokens, self.block_size)
        reusable = (len(tokens) - 1) // self.block_size
        hits = self.pool.cached_prefix(table.hashes[:reusable])
        fresh_count = self.blocks_needed(len(tokens)) - len(hits)
        if fresh_count + self.pool.count_free_among(hits) > self.pool.num_free:
            return None
        self.pool.share(hits)
        fresh = self.pool.allocate(fresh_count)
        assert fresh is not None  # capacity was checked above
        table.blocks = hits + fresh
        table.num_registered = len(hits)
        return len(hits) * self.block_size

    def grow(self, table: BlockTable, num_tokens: int) -> bool:
        """Make room for `num_tokens` positions; False when the pool is exhausted."""
        missing = self.blocks_needed(num_tokens) - len(table.blocks)
        if missing <= 0:
            return True
        fresh = self.pool.allocate(missing)
        if fresh is None:
            return False
        table.blocks.extend(fresh)
        return True

    def commit(self, table: BlockTable, tokens: Sequence[int], num_computed: int) -> None:
        """Offer blocks whose every position now holds computed keys/values to the prefix cache."""
        if not self.pool.enable_prefix_caching:
            return
        table.extend_hashes(tokens, self.block_size)
        full = min(num_computed // self.block_size, len(table.hashes))
        for index in range(table.num_registered, full):
            self.pool.register(table.blocks[index], table.hashes[index])
        table.num_registered = max(table.num_registered, full)

    def release(self, table: BlockTable, leak_last: int = 0) -> None:
        """Return the table's blocks to the pool and empty it (hashes stay: the tokens did not change).

        `leak_last` > 0 plants the kv-leak-on-abort bug: that many tail blocks keep their reference
        and are simply forgotten, so nobody will ever free them.
        """
        self.pool.free(table.blocks[:len(table.blocks) - leak_last])
        table.blocks = []
        table.num_registered = 0
