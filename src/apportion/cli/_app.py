"""The click application and the one place where errors become exit codes.

Exit codes: 0 success, 2 a user mistake (InvalidRequest, bad options), 1 a runtime fault. A user mistake prints one
line on stderr, never a traceback; ``--debug`` anywhere on the command line shows the traceback.
"""

from __future__ import annotations

import sys
import traceback

import click

from apportion.errors import ApportionError


@click.group(
    name="apportion",
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(package_name="apportion")
def app() -> None:
    """Assign the partitions of a resource to a changing fleet of workers: balanced, sticky, exclusive.

    Add --debug to any command to see a traceback on error.
    """


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the command, map errors to one stderr line and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        result = app.main(args=args, prog_name="apportion", standalone_mode=False)
    except ApportionError as exc:
        if debug:
            traceback.print_exc()
        print(f"apportion: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        print("apportion: aborted", file=sys.stderr)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return int(result) if isinstance(result, int) else 0
