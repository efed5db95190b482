"""The valid-only sweep behind the Reformer's training settings: one config per call, one JSON line out.

    python experiments/reformer_sweep.py '{"lr": 0.003, "max_epochs": 30}' >> experiments/results/reformer_sweep.jsonl

Trains seed 0 on mi100 (``"split"`` key, default random) and prints the best valid top-1, the
per-epoch valid top-1 curve and the wall time; ``"tb": true`` sweeps transformer-block instead.
The test part is never read.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
import json
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kbench
from kbench_baselines.reformer import Reformer, TransformerBlock

cfg = json.loads(sys.argv[1])
split = cfg.pop("split", "random")
cls = TransformerBlock if cfg.pop("tb", False) else Reformer
ds = kbench.load("mi100")
sp = ds.split(split)
t = time.time()
m = cls(verbose=False, **cfg).fit(ds, sp["train"], sp["valid"], seed=0)
info = {k: v for k, v in m.fit_info.items() if k != "history"}
info["curve"] = [round(h["valid_top1"], 4) for h in m.fit_info["history"]]
info["cfg"] = cfg
info["split"] = split
info["wall"] = time.time() - t
print(json.dumps(info))
