"""Scheduled runs: cron parsing, the job table, schedule events, the daemon and its notifications.

`fire_scheduled` is stored by reference in APScheduler's job table, so its import path must stay stable.
"""

from soak.schedule.daemon import *  # noqa: F401,F403 - temporary while the module is split
from soak.schedule.daemon import fire_scheduled  # noqa: F401
