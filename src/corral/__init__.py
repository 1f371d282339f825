import os as _os
import sys as _sys

__version__ = "0.1.0"

# corral shipped beside a job's own python (a machine's runtime, providers/common/runtime.py):
# the packages the SDK imports are in a folder next to this package, searched *after* the
# job's own site-packages, so whatever the image has wins and nothing of it is replaced.
_deps = _os.path.join(
    _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "corral-sdk-deps"
)
if _os.path.isdir(_deps) and _deps not in _sys.path:
    _sys.path.append(_deps)
del _deps
