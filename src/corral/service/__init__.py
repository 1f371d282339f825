"""The service layer: what a user can do with corral, with no knowledge of typer, rich, click
or HTTP. The CLI (``corral.cli``), the HTTP server and the worker pool call these same
functions and render what they return.

Modules, each small and importable on its own (the CLI imports them inside its commands):

* :mod:`corral.service.views` - the typed, strict values every function returns; their
  ``to_json()`` is exactly what ``corral ... --json`` prints.
* :mod:`corral.service.submit` - submit a run (``corral launch`` without the following).
* :mod:`corral.service.runs` - list runs; a watched run's snapshot (light: ``corral ls``).
* :mod:`corral.service.details` - one run in detail (``corral status``).
* :mod:`corral.service.actions` - ask for a stop or a cancel; wait for the end of a run.
* :mod:`corral.service.preempt` - preempt a run's machine on request (fake and local clouds).
* :mod:`corral.service.logs` - a run's stage logs: lines for following, chunks from an offset.
* :mod:`corral.service.events` - a run's events after a cursor.
* :mod:`corral.service.secrets` - set, list (names and dates only), delete, rotate secrets.
* :mod:`corral.service.webhooks` - check a webhook request's signature.
* :mod:`corral.service.watch` - watch one run: new log lines and snapshots from one store.
* :mod:`corral.service.controller` - run, start, stop or inspect the controller; make sure a
  background controller babysits the runs.
* :mod:`corral.service.offers` - the offers that fit a GPU request (``corral offers``).
* :mod:`corral.service.estimate` - a job's cost on each offer that fits it (``corral
  estimate``).
* :mod:`corral.service.plan_views` - the typed values of those two.
* :mod:`corral.service.tokens` - API tokens of the HTTP server, stored hashed.
* :mod:`corral.service.session` - the store a long-lived front door holds.
* :mod:`corral.service.artifacts` - a run's manifest, files and results archive from
  artifact storage.
* :mod:`corral.service.monitoring` - what every GPU of this machine and of each running node
  reads, judged by :mod:`corral.service.gpu_health`'s thresholds.
* :mod:`corral.service.metrics` - everything ``/metrics`` shows, in one snapshot.
* :mod:`corral.service.overview` - the dashboard's runs table (runs with their progress).
* :mod:`corral.service.run_charts` - a run's curves, cost line and attempt timeline.
* :mod:`corral.service.log_hub` - one reader of a run's logs for many live followers.

Every error is a :class:`corral.errors.CorralError` subclass with a one-line message.
Functions that read or write runs take an optional ``store`` (default: ``Store.open()``,
closed again before returning) so that tests and a server can inject theirs.
"""
