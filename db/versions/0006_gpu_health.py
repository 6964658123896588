"""gpu_health: gpu_samples read from dcgm-exporter (source, UUID, last XID, ECC and row-remap counters)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

COLUMNS = (
    ('source', sa.Text()),
    ('uuid', sa.String(length=96)),
    ('last_xid', sa.Integer()),
    ('ecc_sbe_errors', sa.BigInteger()),
    ('remapped_rows_uncorrectable', sa.Integer()),
    ('remapped_rows_correctable', sa.Integer()),
    ('row_remap_failure', sa.Integer()),
)


def upgrade() -> None:
    with op.batch_alter_table('gpu_samples', schema=None) as batch_op:
        for name, kind in COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('gpu_samples', schema=None) as batch_op:
        for name, _ in reversed(COLUMNS):
            batch_op.drop_column(name)
