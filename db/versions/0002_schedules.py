"""schedules: daemon events, run-now requests, APScheduler job store

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('schedule_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('schedule_name', sa.String(length=128), nullable=False),
    sa.Column('at', sa.String(length=40), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('trigger', sa.String(length=16), nullable=True),
    sa.Column('scheduled_for', sa.String(length=40), nullable=True),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('verdict', sa.String(length=16), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('schedule_events', schema=None) as batch_op:
        batch_op.create_index('ix_schedule_events_name_id', ['schedule_name', 'id'], unique=False)

    op.create_table('schedule_requests',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('schedule_name', sa.String(length=128), nullable=False),
    sa.Column('requested_at', sa.String(length=40), nullable=False),
    sa.Column('handled_at', sa.String(length=40), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('schedule_requests', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_schedule_requests_handled_at'), ['handled_at'], unique=False)

    # Same layout as APScheduler 3's SQLAlchemyJobStore, which then finds it and creates nothing itself
    # (a job store pointed at this database by hand before this migration may already have made it).
    if sa.inspect(op.get_bind()).has_table('apscheduler_jobs'):
        return
    op.create_table('apscheduler_jobs',
    sa.Column('id', sa.Unicode(length=191), nullable=False),
    sa.Column('next_run_time', sa.Float(precision=25), nullable=True),
    sa.Column('job_state', sa.LargeBinary(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('apscheduler_jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_apscheduler_jobs_next_run_time'), ['next_run_time'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('apscheduler_jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_apscheduler_jobs_next_run_time'))

    op.drop_table('apscheduler_jobs')
    with op.batch_alter_table('schedule_requests', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_schedule_requests_handled_at'))

    op.drop_table('schedule_requests')
    with op.batch_alter_table('schedule_events', schema=None) as batch_op:
        batch_op.drop_index('ix_schedule_events_name_id')

    op.drop_table('schedule_events')
