"""`python -m sandbox` runs the sandbox rail without the full `interlock` CLI (used by sandbox.testing)."""

from __future__ import annotations

from sandbox.cli import sandbox_command

if __name__ == "__main__":
    sandbox_command(prog_name="python -m sandbox")
