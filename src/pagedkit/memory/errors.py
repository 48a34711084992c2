"""Errors a learner (or a buggy scheduler) can cause in paged memory.

Each message names the value at fault and the limit it broke.
"""


class PagedMemoryError(Exception):
    """Base class for errors raised by `pagedkit.memory`."""


class OutOfBlocksError(PagedMemoryError):
    """More blocks were asked for than the pool has free."""


class BlockStateError(PagedMemoryError, ValueError):
    """An operation does not fit the block's state (freeing a free block,
    writing into a shared block, forking a free block, ...)."""
