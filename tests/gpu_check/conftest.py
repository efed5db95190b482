"""The gpu_check tests reuse the collector's recorded fixtures and its simulated collector (tests/collect/)."""

import sys
from pathlib import Path

COLLECT_TESTS = Path(__file__).resolve().parents[1] / "collect"
if str(COLLECT_TESTS) not in sys.path:
    sys.path.insert(0, str(COLLECT_TESTS))
