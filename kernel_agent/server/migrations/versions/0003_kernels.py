"""Thread kernels on a gateway: which kernel a thread runs in, and which replica owns it.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kernels",
        sa.Column("thread_id", sa.String(100), primary_key=True),
        sa.Column("kernel_id", sa.String(100), nullable=False),
        sa.Column("holder", sa.String(100), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("kernels")
