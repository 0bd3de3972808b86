"""The `interlock` command's table names every command's module as a string (imported only when the
command runs), so a moved module would break it silently: every entry must resolve to a click command."""

from __future__ import annotations

import click
import pytest

from interlock.cli import COMMANDS, cli


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_in_the_table_resolves(name: str) -> None:
    with click.Context(cli) as ctx:
        command = cli.get_command(ctx, name)
    assert isinstance(command, click.Command)
    assert command.name == name
