"""first schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('runs',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('started_at', sa.String(length=40), nullable=False),
    sa.Column('t0_epoch_s', sa.Float(), nullable=False),
    sa.Column('ended_at', sa.String(length=40), nullable=True),
    sa.Column('heartbeat_at', sa.String(length=40), nullable=True),
    sa.Column('planned_duration_s', sa.Float(), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=True),
    sa.Column('warmup_s', sa.Float(), nullable=False),
    sa.Column('window_s', sa.Float(), nullable=False),
    sa.Column('soak_pid', sa.Integer(), nullable=True),
    sa.Column('server_pgid', sa.Integer(), nullable=True),
    sa.Column('server_cmd', sa.Text(), nullable=True),
    sa.Column('out_dir', sa.Text(), nullable=False),
    sa.Column('target_kind', sa.String(length=16), nullable=False),
    sa.Column('target_url', sa.Text(), nullable=True),
    sa.Column('model', sa.Text(), nullable=True),
    sa.Column('schedule_name', sa.String(length=128), nullable=True),
    sa.Column('config_json', sa.Text(), nullable=False),
    sa.Column('environment_json', sa.Text(), nullable=False),
    sa.Column('verdict', sa.String(length=16), nullable=True),
    sa.Column('verdict_reason', sa.Text(), nullable=True),
    sa.Column('summary_json', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_status'), ['status'], unique=False)

    op.create_table('events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('t_s', sa.Float(), nullable=False),
    sa.Column('at', sa.String(length=40), nullable=False),
    sa.Column('kind', sa.String(length=40), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('data_json', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_run_t', ['run_id', 't_s'], unique=False)

    op.create_table('gpu_process_samples',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('t_s', sa.Float(), nullable=False),
    sa.Column('gpu_index', sa.Integer(), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('used_bytes', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('gpu_process_samples', schema=None) as batch_op:
        batch_op.create_index('ix_gpu_process_samples_run_t', ['run_id', 't_s'], unique=False)

    op.create_table('gpu_samples',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('t_s', sa.Float(), nullable=False),
    sa.Column('gpu_index', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=True),
    sa.Column('mem_used_bytes', sa.BigInteger(), nullable=True),
    sa.Column('mem_total_bytes', sa.BigInteger(), nullable=True),
    sa.Column('util_pct', sa.Float(), nullable=True),
    sa.Column('temp_c', sa.Float(), nullable=True),
    sa.Column('power_w', sa.Float(), nullable=True),
    sa.Column('sm_clock_mhz', sa.Float(), nullable=True),
    sa.Column('throttle_reasons', sa.Integer(), nullable=True),
    sa.Column('ecc_errors', sa.Integer(), nullable=True),
    sa.Column('xid_errors', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('gpu_samples', schema=None) as batch_op:
        batch_op.create_index('ix_gpu_samples_run_t', ['run_id', 't_s'], unique=False)

    op.create_table('latency_windows',
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('window_index', sa.Integer(), nullable=False),
    sa.Column('scenario', sa.String(length=200), nullable=False),
    sa.Column('metric', sa.String(length=16), nullable=False),
    sa.Column('start_s', sa.Float(), nullable=False),
    sa.Column('end_s', sa.Float(), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('mean_ms', sa.Float(), nullable=True),
    sa.Column('p50_ms', sa.Float(), nullable=True),
    sa.Column('p90_ms', sa.Float(), nullable=True),
    sa.Column('p95_ms', sa.Float(), nullable=True),
    sa.Column('p99_ms', sa.Float(), nullable=True),
    sa.Column('max_ms', sa.Float(), nullable=True),
    sa.Column('hist', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'window_index', 'scenario', 'metric')
    )
    op.create_table('metric_samples',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('t_s', sa.Float(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('labels_json', sa.Text(), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('metric_samples', schema=None) as batch_op:
        batch_op.create_index('ix_metric_samples_run_name_t', ['run_id', 'name', 't_s'], unique=False)

    op.create_table('process_samples',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('t_s', sa.Float(), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('ppid', sa.Integer(), nullable=True),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('rss_bytes', sa.BigInteger(), nullable=True),
    sa.Column('pss_bytes', sa.BigInteger(), nullable=True),
    sa.Column('uss_bytes', sa.BigInteger(), nullable=True),
    sa.Column('fds', sa.Integer(), nullable=True),
    sa.Column('threads', sa.Integer(), nullable=True),
    sa.Column('cpu_percent', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('process_samples', schema=None) as batch_op:
        batch_op.create_index('ix_process_samples_run_t', ['run_id', 't_s'], unique=False)

    op.create_table('request_windows',
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('window_index', sa.Integer(), nullable=False),
    sa.Column('scenario', sa.String(length=200), nullable=False),
    sa.Column('start_s', sa.Float(), nullable=False),
    sa.Column('end_s', sa.Float(), nullable=False),
    sa.Column('requests', sa.Integer(), nullable=False),
    sa.Column('ok', sa.Integer(), nullable=False),
    sa.Column('cancelled', sa.Integer(), nullable=False),
    sa.Column('expected_errors', sa.Integer(), nullable=False),
    sa.Column('err_connect', sa.Integer(), nullable=False),
    sa.Column('err_timeout', sa.Integer(), nullable=False),
    sa.Column('err_http_4xx', sa.Integer(), nullable=False),
    sa.Column('err_http_5xx', sa.Integer(), nullable=False),
    sa.Column('err_bad_stream', sa.Integer(), nullable=False),
    sa.Column('output_tokens', sa.BigInteger(), nullable=False),
    sa.Column('prompt_tokens', sa.BigInteger(), nullable=False),
    sa.Column('late_sends_1s', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'window_index', 'scenario')
    )
    op.create_table('requests',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('scenario', sa.String(length=200), nullable=False),
    sa.Column('intended_s', sa.Float(), nullable=False),
    sa.Column('lag_ms', sa.Float(), nullable=True),
    sa.Column('queue_ms', sa.Float(), nullable=True),
    sa.Column('ttft_ms', sa.Float(), nullable=True),
    sa.Column('e2e_ms', sa.Float(), nullable=True),
    sa.Column('output_tokens', sa.BigInteger(), nullable=True),
    sa.Column('status_code', sa.Integer(), nullable=True),
    sa.Column('error_class', sa.String(length=16), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('requests', schema=None) as batch_op:
        batch_op.create_index('ix_requests_run_t', ['run_id', 'intended_s'], unique=False)

    op.create_table('server_samples',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('t_s', sa.Float(), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('scrape_ok', sa.Boolean(), nullable=False),
    sa.Column('health_ok', sa.Boolean(), nullable=True),
    sa.Column('running', sa.Float(), nullable=True),
    sa.Column('waiting', sa.Float(), nullable=True),
    sa.Column('kv_usage', sa.Float(), nullable=True),
    sa.Column('preemptions_total', sa.Float(), nullable=True),
    sa.Column('prompt_tokens_total', sa.Float(), nullable=True),
    sa.Column('generation_tokens_total', sa.Float(), nullable=True),
    sa.Column('request_success_total', sa.Float(), nullable=True),
    sa.Column('prefix_cache_queries_total', sa.Float(), nullable=True),
    sa.Column('prefix_cache_hits_total', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('server_samples', schema=None) as batch_op:
        batch_op.create_index('ix_server_samples_run_t', ['run_id', 't_s'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('server_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_server_samples_run_t')

    op.drop_table('server_samples')
    with op.batch_alter_table('requests', schema=None) as batch_op:
        batch_op.drop_index('ix_requests_run_t')

    op.drop_table('requests')
    op.drop_table('request_windows')
    with op.batch_alter_table('process_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_process_samples_run_t')

    op.drop_table('process_samples')
    with op.batch_alter_table('metric_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_metric_samples_run_name_t')

    op.drop_table('metric_samples')
    op.drop_table('latency_windows')
    with op.batch_alter_table('gpu_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_gpu_samples_run_t')

    op.drop_table('gpu_samples')
    with op.batch_alter_table('gpu_process_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_gpu_process_samples_run_t')

    op.drop_table('gpu_process_samples')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_run_t')

    op.drop_table('events')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_status'))

    op.drop_table('runs')
