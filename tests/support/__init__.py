"""Helpers shared by every test folder. ``tests/`` is on ``sys.path`` under pytest (its
``conftest.py`` sits in a folder without ``__init__.py``), so a test imports them as
``from support.waiting import wait_until``."""
