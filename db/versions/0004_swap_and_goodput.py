"""swap per process sample; requests that met every SLO per request window

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('process_samples', schema=None) as batch_op:
        batch_op.add_column(sa.Column('swap_bytes', sa.BigInteger(), nullable=True))
    with op.batch_alter_table('request_windows', schema=None) as batch_op:
        batch_op.add_column(sa.Column('slo_met', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('request_windows', schema=None) as batch_op:
        batch_op.drop_column('slo_met')
    with op.batch_alter_table('process_samples', schema=None) as batch_op:
        batch_op.drop_column('swap_bytes')
