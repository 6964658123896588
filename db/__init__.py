"""Alembic migrations of soak's database schema."""
