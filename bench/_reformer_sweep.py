"""Temporary: valid-only hyper-parameter sweep (one process per config)."""
import json, sys, time, os
import kbench
from baselines.reformer import Reformer, TransformerBlock
cfg = json.loads(sys.argv[1]); split = cfg.pop("split", "random"); cls = TransformerBlock if cfg.pop("tb", False) else Reformer
ds = kbench.load("mi100"); sp = ds.split(split)
t = time.time(); m = cls(verbose=False, **cfg).fit(ds, sp["train"], sp["valid"], seed=0)
info = {k: v for k, v in m.fit_info.items() if k != "history"}
info["curve"] = [round(h["valid_top1"], 4) for h in m.fit_info["history"]]
info["cfg"] = cfg; info["split"] = split; info["wall"] = time.time() - t
print(json.dumps(info))
