"""`python -m apportion.cli`: the same entry point as the `apportion` command."""

from apportion.cli import run

run()
