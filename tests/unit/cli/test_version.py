"""``ldpstream --version`` answers before any subcommand module (and so numpy, scipy, Kafka) is imported."""

from __future__ import annotations

import subprocess
import sys

from ldpstream import __version__
from ldpstream.cli.main import main


def test_version_prints_the_installed_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"ldpstream {__version__}\n"


def test_version_imports_no_subcommand_and_no_numerical_library():
    check = ("import sys\n"
             "from ldpstream.cli.main import main\n"
             "try:\n"
             "    main(['--version'])\n"
             "except SystemExit:\n"
             "    pass\n"
             "heavy = sorted(m for m in sys.modules\n"
             "               if m.split('.')[0] in ('numpy', 'scipy', 'confluent_kafka', 'redis')\n"
             "               or m.startswith('ldpstream.cli.') and m != 'ldpstream.cli.main')\n"
             "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"ldpstream {__version__}\n"
