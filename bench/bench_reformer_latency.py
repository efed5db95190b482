"""CPU inference latency of the Reformer (PyTorch and the lean numpy path) and Γ-block vs
transformer-block training / inference time; writes JSON.

    python bench/bench_reformer_latency.py [--dataset mi100] [--split random] [--model SAVED_DIR]
        [--epochs 2] [--calls 10000] [--train-rows 8192] [--out bench/results/reformer_latency.json]

Everything runs on one thread (``torch.set_num_threads(1)``; numpy's BLAS is
limited through the usual environment variables, set before numpy loads).

Latency ("model only"): the network on a precomputed feature vector of one
test problem (batch 1), ``--calls`` calls cycling over test problems, p50 and
p99 of the per-call wall time; and on a batch of 1,024 problems (``--batch-calls``
calls), per batch and per problem. PyTorch runs the module under
``torch.inference_mode()``; numpy runs :class:`kbench_baselines.reformer.NumpyReformer`;
ONNX Runtime runs :class:`kbench_baselines.reformer.OnnxReformer` (the same folded
graph, one thread, I/O binding for batch 1).
"End to end" is ``model.predict(ds, [problem_id])``: feature table, network
and the ranking string, for one problem (fewer calls: pandas dominates).

The weights do not change the latency, so by default the networks are trained
for ``--epochs`` epochs only (``--model`` loads a saved, fully trained one).

Training time: one Γ network and one transformer-block network are trained for
``--epochs`` epochs of ``--train-rows`` training problems each (no valid
scoring inside the timed epochs); the JSON gives the measured seconds per
epoch, per 1,000 rows, and that rate times the training-part size (a full
epoch, computed from the measured rate, not timed).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import machine  # noqa: E402


def loadavg() -> list[float] | None:
    """1, 5 and 15 minute load averages: the machine is shared, so timings depend on them."""
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def percentiles_us(times_ns: list[int]) -> dict:
    a = np.asarray(times_ns, dtype=np.float64) / 1000.0
    return {"p50_us": float(np.percentile(a, 50)), "p99_us": float(np.percentile(a, 99)),
            "mean_us": float(a.mean()), "min_us": float(a.min()), "calls": int(len(a))}


def time_calls(fn, inputs, calls: int, warmup: int = 50) -> list[int]:
    for i in range(min(warmup, calls)):
        fn(inputs[i % len(inputs)])
    out = []
    clock = time.perf_counter_ns
    for i in range(calls):
        x = inputs[i % len(inputs)]
        t0 = clock()
        fn(x)
        out.append(clock() - t0)
    return out


def latency_block(model, x: np.ndarray, calls: int, batch_calls: int, numpy_path: bool) -> dict:
    import torch
    net = model.net
    net.eval()
    singles = [torch.from_numpy(np.array(x[i:i + 1])) for i in range(min(len(x), 1000))]
    batch = torch.from_numpy(np.array(x[:1024]))

    def torch_call(t):
        with torch.inference_mode():
            return net(t)

    out = {"torch": {"batch1": percentiles_us(time_calls(torch_call, singles, calls))}}
    b = percentiles_us(time_calls(torch_call, [batch], batch_calls, warmup=5))
    out["torch"]["batch1024"] = {**b, "per_problem_us_p50": b["p50_us"] / 1024}
    if numpy_path:
        lean = model.numpy_model()
        rows = [np.array(x[i]) for i in range(min(len(x), 1000))]
        out["numpy"] = {"batch1": percentiles_us(time_calls(lean.logits, rows, calls))}
        b = percentiles_us(time_calls(lean.logits, [np.array(x[:1024])], batch_calls, warmup=5))
        out["numpy"]["batch1024"] = {**b, "per_problem_us_p50": b["p50_us"] / 1024}
        diff = float(np.abs(lean.logits(x[:1024]) - torch_call(batch).numpy()).max())
        out["numpy"]["max_abs_logit_diff_vs_torch"] = diff
        try:
            fast = model.onnx_model()
        except Exception as exc:  # noqa: BLE001 - the [onnx] extra may be missing
            out["onnxruntime"] = {"skipped": str(exc)}
        else:
            import onnxruntime
            out["onnxruntime"] = {"version": onnxruntime.__version__,
                                  "batch1": percentiles_us(time_calls(fast.logits, rows, calls))}
            b = percentiles_us(time_calls(fast.logits, [np.array(x[:1024])], batch_calls, warmup=5))
            out["onnxruntime"]["batch1024"] = {**b, "per_problem_us_p50": b["p50_us"] / 1024}
            diff = float(np.abs(fast.logits(x[:1024]) - torch_call(batch).numpy()).max())
            out["onnxruntime"]["max_abs_logit_diff_vs_torch"] = diff
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="mi100")
    ap.add_argument("--split", default="random")
    ap.add_argument("--model", default=None, help="a saved reformer folder (else train --epochs epochs)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--train-rows", type=int, default=8192)
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--batch-calls", type=int, default=200)
    ap.add_argument("--e2e-calls", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "reformer_latency.json"))
    args = ap.parse_args()

    import torch

    import kbench
    from kbench_baselines.base import Baseline, problems_of
    from kbench_baselines.reformer import Reformer, TransformerBlock
    torch.set_num_threads(1)
    ds = kbench.load(args.dataset)
    parts = ds.split(args.split)
    result = {"benchmark": "reformer_latency", "dataset": args.dataset, "split": args.split,
              "loadavg_start": loadavg(),
              "threads": torch.get_num_threads(), "torch_version": torch.__version__, "machine": machine(),
              "settings": vars(args)}

    # -- training time per epoch: Γ-block vs transformer-block, same rows, no valid part ----------
    training = {}
    models = {}
    for cls in (Reformer, TransformerBlock):
        m = cls(max_epochs=args.epochs, rows_per_epoch=args.train_rows, threads=1, verbose=False,
                schedule="constant")
        m.fit(ds, parts["train"], None, seed=args.seed)
        ep = [h["epoch_s"] for h in m.fit_info["history"]]
        rate = float(np.median(ep)) / args.train_rows * 1000.0
        training[cls.name] = {"n_parameters": m.n_parameters(), "architecture": m.fit_info["architecture"],
                              "rows_per_epoch": args.train_rows, "epoch_s": ep,
                              "s_per_1000_rows": rate, "n_train": int(m.fit_info["n_train"]),
                              "full_epoch_s_from_rate": rate * m.fit_info["n_train"] / 1000.0}
        models[cls.name] = m
    result["training"] = training
    if args.model:
        models["reformer"] = Baseline.load(args.model)
        result["reformer_model"] = args.model
    else:
        result["reformer_model"] = (f"trained {args.epochs} epochs of {args.train_rows} rows "
                                    "(the weights do not change the latency)")

    # -- inference latency ------------------------------------------------------------------------
    test = problems_of(ds, parts["test"])
    inference = {}
    for name, m in models.items():
        x = m._features(ds, test)
        inference[name] = latency_block(m, x, args.calls if name == "reformer" else max(args.calls // 10, 100),
                                        args.batch_calls if name == "reformer" else max(args.batch_calls // 4, 10),
                                        numpy_path=(name == "reformer"))
        ids = np.asarray(parts["test"][:1000], dtype=object)
        backends = (["torch", "numpy"] + (["onnx"] if "batch1" in inference[name].get("onnxruntime", {}) else [])
                    if name == "reformer" else ["torch"])
        inference[name]["end_to_end_predict_batch1"] = {}
        for backend in backends:
            def fn(pid, b=backend, mm=m):
                return mm.predict(ds, [pid], backend=b)
            inference[name]["end_to_end_predict_batch1"][backend] = percentiles_us(
                time_calls(fn, ids, args.e2e_calls, warmup=5))
    result["inference"] = inference
    result["loadavg_end"] = loadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
