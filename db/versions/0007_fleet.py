"""fleet: a replica's run names the fleet run it belongs to (runs.fleet_id) and its replica (runs.replica)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fleet_id', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('replica', sa.String(length=64), nullable=True))
        batch_op.create_index('ix_runs_fleet_id', ['fleet_id'])


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_fleet_id')
        batch_op.drop_column('replica')
        batch_op.drop_column('fleet_id')
