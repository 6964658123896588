"""run labels: KEY=VALUE tags of a run (--label)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('run_labels',
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('value', sa.String(length=200), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'key')
    )
    with op.batch_alter_table('run_labels', schema=None) as batch_op:
        batch_op.create_index('ix_run_labels_key_value', ['key', 'value'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('run_labels', schema=None) as batch_op:
        batch_op.drop_index('ix_run_labels_key_value')

    op.drop_table('run_labels')
