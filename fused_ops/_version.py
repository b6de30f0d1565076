"""The version of fused-ops (read by pyproject.toml and CMakeLists.txt too: one place)."""

__version__ = "0.1.0"
