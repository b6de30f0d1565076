"""README.md's "Use" snippet runs as written (in a fresh interpreter, from outside the
repository, with the library this test session loaded)."""

from __future__ import annotations

import os
import subprocess
import sys

import fused_ops
from helpers import REPO_DIR


def _use_snippet() -> str:
    with open(os.path.join(REPO_DIR, "README.md")) as f:
        text = f.read()
    section = text[text.index("\n## Use\n") :]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_use_snippet_runs(tmp_path):
    env = dict(os.environ)
    env["FUSED_OPS_LIBRARY"] = fused_ops.library_path
    # The package this session imported (installed, or the source checkout's).
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(fused_ops.__file__))
    r = subprocess.run(
        [sys.executable, "-c", _use_snippet()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
