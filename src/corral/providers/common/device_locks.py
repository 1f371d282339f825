"""Machine-wide GPU locks live in :mod:`corral.device_locks` (the pool's workers take them
too); re-exported here for the providers' agent hosts."""

from corral.device_locks import ACQUIRE_PATIENCE_S, DeviceLocks

__all__ = ["ACQUIRE_PATIENCE_S", "DeviceLocks"]
