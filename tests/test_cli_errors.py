import subprocess
import sys


def test_unknown_command_exits_2_with_one_message() -> None:
    proc = subprocess.run([sys.executable, "-m", "apportion.cli", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "No such command" in proc.stderr
    assert "Traceback" not in proc.stderr
