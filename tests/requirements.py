"""A missing dependency fails the test that needs it, for everyone.

`make test` installs every Debian package, pip package and model file the
suite uses, so a test that finds one missing has found a broken install: it
fails with the reason, never skips (a skipped test would hide the breakage).
Hardware is another matter: a test that needs a CUDA device is skipped where
there is none, with a reason that says so.
"""

import pytest


def missing(reason: str) -> None:
    """Fail the calling test: a dependency ``make test`` should have installed is not there."""
    pytest.fail(f"missing dependency: {reason}", pytrace=False)
