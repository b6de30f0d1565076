"""Configure refuses a C++ compiler that links libstdc++ statically into shared libraries (a
second libstdc++ beside PyTorch's crashes on the first error message), before building
anything, and says what to pass instead."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from helpers import REPO_DIR


@pytest.mark.skipif(
    shutil.which("cmake") is None or not os.path.exists("/usr/bin/g++"),
    reason="needs cmake and /usr/bin/g++",
)
def test_configure_refuses_a_compiler_that_links_libstdcxx_statically(tmp_path):
    compiler = tmp_path / "g++"
    # A g++ that links libstdc++ statically, as some toolchains do by default.
    compiler.write_text('#!/bin/sh\nexec /usr/bin/g++ "$@" -static-libstdc++\n')
    compiler.chmod(0o755)
    r = subprocess.run(
        [
            "cmake",
            "-S",
            REPO_DIR,
            "-B",
            str(tmp_path / "build"),
            f"-DCMAKE_CXX_COMPILER={compiler}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode != 0, out
    assert "links libstdc++ statically" in out, out
    assert "-DCMAKE_CXX_COMPILER=/usr/bin/g++" in out, out
    # Stopped before anything else: PyTorch was never looked for.
    assert "CUDA kernels" not in out, out
