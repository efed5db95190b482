"""``import baselines`` in an installed kbench: the old name of ``kbench_baselines``, deprecated.

``pyproject.toml`` installs this file as the top-level package ``baselines``; it warns and hands
back ``kbench_baselines`` itself (see :mod:`kbench_baselines._old_name`).
"""

from kbench_baselines._old_name import redirect

redirect()
