"""What corral's own processes (the CLI, the controller, the agent) do before their first model.

:func:`skip_pydantic_plugins`: pydantic looks for third-party plugins on the first model class
a process creates, by reading the metadata of every installed distribution: about 35 million
instructions (15-20 ms) with a few hundred packages installed, as a training environment has,
paid by every ``corral`` command and every agent before the job's first line. corral's models
are its own; no plugin is meant to observe them. Not called in a user's process (the SDK
inside a training script, a program that imports corral): plugins there stay as they are.
"""

from __future__ import annotations

import os

#: pydantic's own switch; set by the user, it is left to decide
PYDANTIC_PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"


def skip_pydantic_plugins() -> bool:
    """Make this process's models load no pydantic plugin, without reading every installed
    distribution's metadata. True if done; False when the user's own
    ``PYDANTIC_DISABLE_PLUGINS`` decides, when plugins were already looked for, or when this
    pydantic keeps its plugins elsewhere (then nothing changes: plugins load as pydantic
    decides). The environment is untouched, so nothing reaches a child process."""
    if os.environ.get(PYDANTIC_PLUGINS_ENV) is not None:
        return False
    try:
        from pydantic.plugin import _loader
    except ImportError:  # pragma: no cover - a pydantic without plugins
        return False
    if getattr(_loader, "_plugins", False) is not None:  # looked for already, or renamed
        return False
    _loader._plugins = {}
    return True
