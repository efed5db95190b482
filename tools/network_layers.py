"""Write kbench/sources/network_layers.csv, the layers of MITuna's network lists that the network
end-to-end time sums, from the raw lists (../shared/data/mituna by default).

    python tools/network_layers.py [MITUNA_FOLDER]
"""

from __future__ import annotations

import sys
from pathlib import Path

from kbench.sources.mituna import write_network_layers

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "data" / "mituna"
    path, left_out = write_network_layers(folder)
    print(f"wrote {path}")
    for name, why in left_out.items():
        print(f"  left out {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
