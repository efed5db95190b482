"""How much of what PyTorch runs each candidate-set variant holds, per raw folder.

    python tools/collect/variant_coverage.py raw/h100 raw/h200 --out experiments/results/variant_coverage.json

For every variant of :data:`kbench.collect.packaging.package.VARIANTS`: of the problem-directions whose PyTorch
choice the collector matched (``torch.backends.cudnn.benchmark = False``, its default flags), the
share whose choice is in the variant's candidate set (:func:`kbench.collect.packaging.package.torch_choice_coverage`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kbench.collect.packaging.package import VARIANTS, candidate_runtimes, load_raw, torch_choice_coverage


def coverage(raw: str) -> dict:
    problems, plans, _ = load_raw(raw)
    return {v: torch_choice_coverage(problems, candidate_runtimes(problems, plans, v)) for v in VARIANTS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raws", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    res = {raw: coverage(raw) for raw in a.raws}
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
