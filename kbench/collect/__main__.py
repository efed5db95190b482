"""``python -m kbench.collect WHAT ...``: the ``kbench collect`` commands without the main CLI."""

import sys

from kbench.cli.collect import main

sys.exit(main())
