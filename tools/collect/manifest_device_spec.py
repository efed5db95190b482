"""Write ``device_spec`` into the manifests of the packaged NVIDIA datasets, from their raw folders.

``kbench.collect.packaging.package`` writes it into every manifest it packages. The datasets packaged
before it did (h100, h200 and their ``pytorch`` variants, 1.5.0 and 1.4.0) get it here, from the same
records the packager reads: the environment records of ``raw/<gpu>/`` and of the re-timing folders
their manifest names. The tables, their checksums and the dataset checksum do not change.

    python tools/collect/manifest_device_spec.py [DATASET ...]      # default: every dataset of the collector
    python tools/collect/manifest_device_spec.py --check            # exit 1 where a manifest differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kbench.collect.packaging.package import device_spec  # noqa: E402
from kbench.collect.raw_store.writer import load_env  # noqa: E402

DATASETS = ROOT / "kbench" / "datasets"


def collected_manifests() -> list[Path]:
    """The manifests of the datasets kbench's cuDNN collector measured."""
    return sorted(p for p in DATASETS.glob("*/manifest.json")
                  if (json.loads(p.read_text()).get("source") or {}).get("collector") == "kbench collect cudnn")


def spec_of(manifest: dict) -> dict[str, int]:
    """The device_spec the packager would write: the GPU's raw folder and the re-timing folders named."""
    gpu = manifest["name"].removesuffix(f"-{manifest.get('variant', 'default')}")
    raws = [ROOT / "raw" / gpu] + [ROOT / r for r in (manifest.get("retimed") or {}).get("raw", [])]
    return device_spec(pd.concat([load_env(r) for r in raws], ignore_index=True))


def with_spec(manifest: dict, spec: dict) -> dict:
    """The manifest with ``device_spec`` after ``arch`` (the packager's order), every other key as it was."""
    out = {}
    for key, value in manifest.items():
        if key != "device_spec":
            out[key] = value
        if key == "arch":
            out["device_spec"] = spec
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", nargs="*")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    paths = [DATASETS / d / "manifest.json" for d in args.datasets] or collected_manifests()
    differ = 0
    for path in paths:
        manifest = json.loads(path.read_text())
        new = with_spec(manifest, spec_of(manifest))
        if new == manifest and list(new) == list(manifest):
            print(f"{path.relative_to(ROOT)}: up to date")
            continue
        differ += 1
        if args.check:
            print(f"{path.relative_to(ROOT)}: device_spec differs from the raw records")
        else:
            path.write_text(json.dumps(new, indent=2, sort_keys=False) + "\n")
            print(f"{path.relative_to(ROOT)}: device_spec {new['device_spec']}")
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
