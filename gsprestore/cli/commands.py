"""Registers every command family on the app. One import line per family module."""

from . import app as _app  # noqa: F401
from . import benchmark_cmd  # noqa: F401
from . import train_cmd  # noqa: F401
from . import models_cmd  # noqa: F401
from . import restore_cmds  # noqa: F401
from . import visual_cmds  # noqa: F401
