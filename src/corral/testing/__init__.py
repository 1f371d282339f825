"""Test support shipped with corral: stand-ins for what tests cannot have (cloud machines that
boot), for corral's own tests and for third-party provider authors. No production module
imports this package; it is reached only through test code or a provider plugin a test
registers (``CORRAL_PROVIDER_PLUGINS``, see :mod:`corral.providers.registry`)."""
