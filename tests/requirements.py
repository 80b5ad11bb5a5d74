"""Skipping for a missing dependency is for a developer's partial setup only.

Under CI (``CI=true``, where `make test` has installed everything) a missing
dependency is a failure: a silently skipped test would hide a broken install.
"""

import os

import pytest


def missing(reason: str, allow_module_level: bool = False) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"required for CI: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=allow_module_level)
