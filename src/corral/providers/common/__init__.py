"""Machinery several providers share, written once: launch keys and atomic files
(:mod:`.files`), detached processes and process groups (:mod:`.process`), and an agent host
that runs instances' agents as local processes (:mod:`.host`; the local provider's machine,
the fake cloud's machines). No provider folder imports another provider's folder; what two of
them need lives here."""
