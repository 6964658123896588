"""Alembic environment: runs migrations on the engine soak hands over, in one transaction."""

from alembic import context

from soak.store.models import Base

target_metadata = Base.metadata


def run_migrations() -> None:
    """Upgrade on the connection of the engine passed in `config.attributes["engine"]`."""
    engine = context.config.attributes["engine"]
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            transactional_ddl=True,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run_migrations()
