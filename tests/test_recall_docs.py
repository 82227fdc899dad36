"""docs/recall.md: every Python example runs as written, in a fresh directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "recall.md").read_text("utf-8"), re.S)


def test_the_page_has_its_examples():
    assert len(BLOCKS) == 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
