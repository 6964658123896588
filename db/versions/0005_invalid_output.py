"""invalid_output: answers that failed a scenario's validation, per request window

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('request_windows', schema=None) as batch_op:
        batch_op.add_column(sa.Column('err_invalid_output', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('request_windows', schema=None) as batch_op:
        batch_op.drop_column('err_invalid_output')
