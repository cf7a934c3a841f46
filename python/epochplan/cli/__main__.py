"""``python -m epochplan.cli``: the ``epochplan`` command."""

import sys

from epochplan.cli.main import main

sys.exit(main())
