"""server token latency: the server's own inter-token latency histogram, its running sum and count
(server_samples.itl_sum_s, server_samples.itl_count), so a replica behind a router has latency of its own

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('server_samples', schema=None) as batch_op:
        batch_op.add_column(sa.Column('itl_sum_s', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('itl_count', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('server_samples', schema=None) as batch_op:
        batch_op.drop_column('itl_count')
        batch_op.drop_column('itl_sum_s')
