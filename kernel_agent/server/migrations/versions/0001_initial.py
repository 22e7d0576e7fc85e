"""The service's first schema: files, threads, runs, their events, and meta (what was imported once).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(100), primary_key=True),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_table(
        "threads",
        sa.Column("id", sa.String(100), primary_key=True),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("status", sa.String(40), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(100), primary_key=True),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("thread_id", sa.String(100), nullable=False),
        sa.Column("status", sa.String(40), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("runs_by_thread", "runs", ["thread_id"])
    op.create_index("runs_by_status", "runs", ["status"])
    op.create_table(
        "events",
        sa.Column("run_id", sa.String(100), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_table(
        "meta", sa.Column("key", sa.String(100), primary_key=True), sa.Column("value", sa.Text, nullable=False)
    )


def downgrade() -> None:
    for table in ("meta", "events", "runs", "threads", "files"):
        op.drop_table(table)
