"""Every script of benchmarks/ and examples/ answers --help (exit status 0) from the
repository root, without the package installed or the repository on the path."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

import fused_ops
from helpers import REPO_DIR

SCRIPTS = sorted(
    p
    for folder in ("benchmarks", "examples")
    for p in glob.glob(os.path.join(REPO_DIR, folder, "*.py"))
    if 'if __name__ == "__main__"' in open(p).read()
)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: os.path.relpath(p, REPO_DIR))
def test_script_help(script):
    env = dict(os.environ)
    env["FUSED_OPS_LIBRARY"] = fused_ops.library_path
    env.pop("PYTHONPATH", None)
    r = subprocess.run(
        [sys.executable, script, "--help"],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "usage" in r.stdout.lower(), r.stdout
