"""Alembic's environment for the service's database: run on the connection ``database.migrate`` hands over."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection)
with context.begin_transaction():
    context.run_migrations()
