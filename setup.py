"""Build hook for the one optional C extension (everything else is in pyproject.toml).

``corral.sdk._fastcopy`` speeds up checkpoint snapshots with streaming stores. It is optional:
without a C compiler the install still succeeds and corral falls back to ``ctypes.memmove``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "corral.sdk._fastcopy",
            sources=["src/corral/sdk/_fastcopy.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
