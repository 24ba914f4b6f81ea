"""Scheduled runs: jobs whose occurrences are sub-agent runs announced to a chat target.

Modules, each imported by its own path (this ``__init__`` stays light because
:mod:`gateway.settings` composes :mod:`gateway.schema.schedules`):

- :mod:`~gateway.schema.triggers`: ``cron``/``every``/``at`` and their fire times;
- :mod:`~gateway.schema.schedules`: the ``schedules`` section and its checks;
- :mod:`~gateway.schedules.store`: jobs and occurrences in the state database;
- :mod:`~gateway.schedules.scheduler`: the loop that starts due occurrences;
- :mod:`~gateway.schedules.service`: create, list, delete, pause, resume, run now (checked);
- :mod:`~gateway.schedules.views`: how a job is shown;
- :mod:`~gateway.schedules.tool`: the agent's ``schedule`` tool;
- :mod:`~gateway.schedules.reach`: jobs whose chat cannot be reached (``herald doctor``);
- :mod:`~gateway.schedules.setup`: the scheduler's life in the gateway, its keys.
"""

from gateway.schema.schedules import JobConfig, SchedulesConfig
from gateway.schema.triggers import Trigger, TriggerError

__all__ = ["JobConfig", "SchedulesConfig", "Trigger", "TriggerError"]
