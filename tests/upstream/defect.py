"""How a defect repro pins its failure.

Each test asserts the *correct* behaviour and is ``xfail(strict=True, raises=KnownDefect)``.
The part that hits the defect runs inside ``with pinned(pattern):``, which turns the known
wrong behaviour (an exception whose "Type: message" matches ``pattern``) into
:class:`KnownDefect` and lets every other failure through unchanged, so a different
failure is an error, not an xfail, and a fix upstream turns the test red (XPASS strict).
"""

import re
from contextlib import contextmanager


class KnownDefect(Exception):
    """The pinned failure of an upstream defect (the only exception the xfails accept)."""


@contextmanager
def pinned(pattern: str, *errors):
    """Re-raise an exception of ``errors`` (default AssertionError) as KnownDefect when
    ``re.search(pattern, "Type: message")`` matches; anything else propagates as is."""
    try:
        yield
    except (errors or (AssertionError,)) as err:
        message = f"{type(err).__name__}: {err}"
        if re.search(pattern, message):
            raise KnownDefect(message) from err
        raise
