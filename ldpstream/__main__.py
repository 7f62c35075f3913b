"""``python -m ldpstream``: the ``ldpstream`` command."""

import sys

from ldpstream.cli.main import main

sys.exit(main())
