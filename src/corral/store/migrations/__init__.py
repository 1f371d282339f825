"""alembic migrations of the store (a package so that env.py ships in wheels)."""
