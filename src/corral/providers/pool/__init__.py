"""The pool provider: attempts go to a queue of GPU workers (``corral worker``) on Celery and
Redis; see :mod:`corral.queue` for the workers' side and ``docs/pool.md``."""

from corral.providers.pool.provider import PoolProvider

__all__ = ["PoolProvider"]
