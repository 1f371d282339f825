"""Machinery several providers share, written once: launch keys and atomic files
(:mod:`.files`), detached processes and process groups (:mod:`.process`), an agent host that
runs instances' agents as local processes (:mod:`.host`; the local provider's machine, the fake
cloud's machines), one listing of an account's objects shared by every run's status
(:mod:`.listing_cache`), and settings read from the environment (:mod:`.env_settings`). No
provider folder imports another provider's folder; what two of them need lives here."""
