"""The one base class of every mistake a user can make (a file, a flag, a model the library
cannot take): the command line prints its message as one line and exits 2 (``tir_adreno.cli.main``).

It lives at the bottom of the layers, so every layer raises its own kind (``ModelError``,
``PrecisionError``, ``DeviceNotFoundError``, ...) as a subclass of it, and nobody converts one
error into another on the way up.
"""


class UserError(Exception):
    """A mistake in what the user asked for: its message names the culprit, in one line."""


class SettingError(UserError, ValueError):
    """A ``TIR_ADRENO_*`` environment setting holds a value it cannot take."""
