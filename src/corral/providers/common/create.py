"""Create a cloud's machine once per launch key, even when the create call's answer is lost.

A container cloud's create (a group, a pod, a deployment) is not idempotent, and its answer
can be lost after the request arrived: a timeout, a dropped connection, a 5xx. Each such
ambiguous failure is followed by a look for the machine named for the key (adopted if there),
then, after a backoff, by another create. When every try failed so and no machine of the key
is listed, the launch failed (:class:`~corral.errors.ProviderUnavailable`): the controller
tries the next offer, so a cloud whose API is down does not hold a run back. A machine that
shows up later all the same (a listing that lagged behind a create) is named for a key no
attempt uses: the provider's leak sweep deletes it. (:class:`~corral.errors.MaybeLaunched`,
where the key is kept and launched again, is for a single call whose outcome stays unknown
and that the provider can repeat safely: EC2's ``run_instances`` with its client token.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from corral.errors import CorralError, ProviderError, ProviderUnavailable

log = logging.getLogger(__name__)
#: what a create makes: an Instance, or a cloud's own record of it (RunPod's cluster)
T = TypeVar("T")


def create_or_adopt(
    what: str,
    *,
    provider: str,
    key: str,
    attempts: int,
    sleep: Callable[[float], None],
    create: Callable[[], T],
    adopt: Callable[[], T | None],
    ambiguous: tuple[type[CorralError], ...] = (ProviderUnavailable,),
    refuse: Callable[[CorralError], ProviderError | None] | None = None,
) -> T:
    """``create()``'s instance, or ``adopt()``'s after an ``ambiguous`` failure (the machine
    ``what`` existed after all), in at most ``attempts`` creates. ``refuse``: after a failure
    and no machine found, the error to raise at once instead of trying again (a name another
    machine holds, say), or None. ``adopt`` must not raise (a failed look is a miss)."""
    last: CorralError | None = None
    for attempt in range(1, attempts + 1):
        try:
            return create()
        except ambiguous as exc:
            last = exc
            log.warning("%s: create of %s was ambiguous (%s)", provider, what, exc)
        found = adopt()
        if found is not None:
            log.info("%s: %s for %s existed after all: adopted", provider, what, key)
            return found
        stop = refuse(last) if refuse is not None else None
        if stop is not None:
            raise stop
        if attempt < attempts:
            sleep(min(2.0**attempt, 10.0))
    message = last.message if last is not None else "no try"
    raise ProviderUnavailable(
        f"{provider}: could not create {what} in {attempts} tries, and none is listed: {message}",
        fields={"key": key},
    )
