"""pytest setup for the braid_torch tests: the launcher is importable, and the extension must be
built (these tests run ranks as processes; they skip when torch or the extension is missing)."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))


def pytest_collection_modifyitems(config, items):
    try:
        import braid_torch  # noqa: F401
    except ImportError as e:
        skip = pytest.mark.skip(reason=f"braid_torch is not importable ({e}); build it first")
        for item in items:
            item.add_marker(skip)
