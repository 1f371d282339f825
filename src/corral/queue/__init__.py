"""The GPU worker pool on Celery and Redis: the queue's contract and the worker side.

``corral worker`` (:mod:`.supervisor`) starts one Celery worker per GPU (:mod:`.slot`), each
pinned with ``CUDA_VISIBLE_DEVICES``, prefetching one task, acking it late and forking a fresh
process for each. The task (:mod:`.tasks`) claims its attempt in Redis (:mod:`.attempts`) and
runs corral's agent for it (:mod:`.runner`), so checkpoints, progress, logs, events and
recovery work as on any other provider. The controller's side, the ``pool`` provider, enqueues
attempts and reads their state through :mod:`.attempts` and :mod:`.registry`.

This package is on the node's side of corral (like the agent): it imports the wire contract,
never the controller's side (control, store, spec, providers). Celery is imported only where a
Celery app is built (:mod:`.app`), so reading the pool's state needs only ``redis``.
"""
