"""``python -m kbench.collect WHAT ...``: the ``kbench collect`` commands without the main CLI."""

import sys

from kbench.collect.command import main

sys.exit(main())
