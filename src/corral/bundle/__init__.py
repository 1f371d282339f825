"""Code bundles: what reaches a node that does not share the controller's filesystem.

A bundle is one ``.tar.gz`` whose sha256 names it (content-addressed): the job's workdir under
``work/`` (``.gitignore`` and ``.corralignore`` respected, ``.git`` left out), the spec's
``files:`` under ``files/<n>``, and a ``git.diff`` when local changes travel as a patch.
Members are written in sorted order with zeroed owners and times, so the same content gives the
same archive, and an unchanged workdir (same paths, sizes, modes and modification times) is
recognised from its fingerprint without reading or packing it again.

* :mod:`.ignore`  gitignore rules and the walk that applies them;
* :mod:`.pack`    the controller's side: walk, fingerprint, pack into the cache, size limit;
* :mod:`.unpack`  the node's side: verify the sha256 while receiving, then extract safely.

Standard library only (plus :mod:`corral.errors` and :mod:`corral.files`): the agent imports
it on the node.
"""

from __future__ import annotations

#: member prefix of the workdir inside a bundle
WORK_PREFIX = "work/"
#: member prefix of the spec's ``files:`` inside a bundle
FILES_PREFIX = "files/"
#: the member holding local changes to apply on top of a git checkout
DIFF_MEMBER = "git.diff"
#: gzip level of bundles: 1 packs about 3x faster than ``gzip -6`` for a few % more bytes
COMPRESS_LEVEL = 1
