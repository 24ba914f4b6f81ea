"""``herald <command>`` builds its command's parser alone: the map from command to module
must name, for every command, the module that registers it."""

from __future__ import annotations

import argparse
import importlib

import pytest

from gateway.cli import COMMAND_MODULES, COMMANDS, build_parser


def registered(module: str) -> list[str]:
    parser = argparse.ArgumentParser()
    importlib.import_module(module).add_commands(parser.add_subparsers())
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(subparsers.choices)


def test_each_command_maps_to_the_module_that_registers_it() -> None:
    by_module = {command: module for module in COMMAND_MODULES for command in registered(module)}
    assert by_module == COMMANDS


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "show", "abc", "--json", "-c", "x.json"],
        ["spawn", "do it", "--wait"],
        ["transcripts", "show", "k", "--follow"],
        ["schedules", "add", "--every", "5m", "--to", "webchat:c", "tick"],
    ],
)
def test_a_commands_own_parser_reads_it_as_the_whole_parser_does(argv: list[str]) -> None:
    whole = vars(build_parser().parse_args(argv))
    own = vars(build_parser(argv).parse_args(argv))
    assert own == whole


def test_an_unknown_command_is_refused_naming_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser(["runz"]).parse_args(["runz"])
    err = capsys.readouterr().err
    assert all(f"'{command}'" in err for command in COMMANDS)
