"""``corral server``: an HTTP API over :mod:`corral.service` (FastAPI on uvicorn).

A front door like the CLI: every endpoint is one service call and its view's ``to_json()``;
no logic of its own. Modules: ``app`` (the factory), ``auth`` (bearer tokens), ``errors``
(CorralError -> JSON and a status), ``deps`` (the shared store), ``routes/`` (one per
resource).
"""
