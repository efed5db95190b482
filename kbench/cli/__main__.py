"""``python -m kbench.cli ...`` runs the ``kbench`` command."""

import sys

from kbench.cli import main

sys.exit(main())
