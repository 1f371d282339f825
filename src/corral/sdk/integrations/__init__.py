"""Integrations with training frameworks. Each lives in its own module and imports its
framework only when that module is imported: ``corral.sdk.integrations.hf`` (Hugging Face
``Trainer``: :class:`~corral.sdk.integrations.hf.CorralCallback`)."""
