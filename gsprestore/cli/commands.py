"""Every command family, one import line each (this order is the order of ``--help``): importing
this module fills :data:`gsprestore.cli.command_table.COMMANDS` (no command module imports the app)."""

from . import restore_cmds  # noqa: F401
from . import models_cmd  # noqa: F401
from . import benchmark_cmd  # noqa: F401
from . import train_cmd  # noqa: F401
from . import visual_cmds  # noqa: F401
