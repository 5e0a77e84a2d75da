"""Commands load lazily (``apportion.cli._app.COMMANDS``): `apportion assign` imports only what it needs, while
``--help`` still lists every command and each name in the map registers exactly that command."""

from __future__ import annotations

import importlib
import subprocess
import sys

from apportion.cli import app
from apportion.cli._app import COMMANDS
from tests.cli.run import cli


def test_each_command_module_registers_the_command_it_is_mapped_to() -> None:
    for name, module in COMMANDS.items():
        importlib.import_module(module)
        assert name in app.commands, f"{module} did not register `apportion {name}`"
    assert set(app.commands) == set(COMMANDS), "a command registered on app is missing from COMMANDS"


def test_help_lists_every_command_with_its_help_line() -> None:
    result = cli("--help")
    assert result.code == 0
    listed = result.stdout.split("Commands:")[1].splitlines()
    names = [line.split()[0] for line in listed if line.strip()]
    assert names == sorted(COMMANDS)
    assert all(len(line.split()) > 1 for line in listed if line.strip()), "a command without its help line"


def test_assign_loads_neither_other_commands_nor_the_group_layers_nor_rich() -> None:
    code = (
        "import sys\n"
        "from apportion.cli import main\n"
        "code = main(['assign'])\n"
        "unwanted = ('apportion.group', 'apportion.worker', 'apportion.sim', 'rich', 'apportion.cli._worker')\n"
        "print(code, sorted(m for m in unwanted if m in sys.modules))\n"
    )
    request = '{"strategy": "sticky", "resources": {"t": 4}, "members": {"a": {}, "b": {}}}'
    done = subprocess.run([sys.executable, "-c", code], input=request, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr
    assert '"assignment"' in done.stdout
