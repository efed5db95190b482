"""Print what the installed cuDNN frontend offers (run on the CUDA machine before collecting).

Versions, the enums the collector relies on (heuristic modes, numerical and
behaviour notes, knob types, build policies), and for one small convolution:
each heuristic mode's plan list, what a note-probe build error says, and how
long each step takes. Output is plain text for the run log.
"""

from __future__ import annotations

import time


def main() -> int:
    import cudnn
    import torch

    from kbench.collect.measure import cudnn as cudnn_collector

    print("torch", torch.__version__, "cuda", torch.version.cuda, "torch cudnn", torch.backends.cudnn.version())
    print("frontend", cudnn.__version__, "backend", cudnn.backend_version_string())
    for enum in ("heur_mode", "numerical_note", "behavior_note", "knob_type", "build_plan_policy"):
        e = getattr(cudnn, enum, None)
        members = [m for m in dir(e) if m.isupper()] if e is not None else None
        print(enum, members)
    col = cudnn_collector.CudnnCollector(cudnn_collector.Options())
    print("env", col.env())
    for geo, dt, lay, d in [
        (dict(n=8, c=64, k=64, x_h=28, x_w=28, fil_h=3, fil_w=3, pad_h=1, pad_w=1), "FP32", "NCHW", "F"),
        (dict(n=8, c=64, k=64, x_h=28, x_w=28, fil_h=3, fil_w=3, pad_h=1, pad_w=1), "FP16", "NHWC", "W"),
    ]:
        p = {**cudnn_collector.DEFAULTS, **geo, "dtype": dt, "layout": lay, "direction": d, "y_h": 28, "y_w": 28}
        x, w, y, out = col._tensors(p)
        for tag, mode in col.modes.items():
            t0 = time.perf_counter()
            g, pack, names, err = col._plan_list(p, x, w, y, [mode])
            print(f"{dt} {lay} {d} mode {tag}: {len(names)} plans in {1e3*(time.perf_counter()-t0):.1f} ms "
                  f"{err} {names[:12]}")
        t0 = time.perf_counter()
        g, pack, names, err = col._plan_list(p, x, w, y, list(col.modes.values()))
        print(f"union {len(names)} plans in {1e3*(time.perf_counter()-t0):.1f} ms")
        for note_name, note in col.notes.items():
            t0 = time.perf_counter()
            gn, _, pn, err = col._plan_list(p, x, w, y, list(col.modes.values()), note=note)
            msgs = []
            for i in range(len(pn)):
                try:
                    gn.build_plan_at_index(i)
                    msgs.append("BUILT")
                except Exception as exc:  # noqa: BLE001
                    msgs.append(str(exc).strip().splitlines()[0][:90] if str(exc).strip() else type(exc).__name__)
            flags = [cudnn_collector.classify_note_probe(m) for m in msgs]
            print(f"note {note_name}: {sum(f is True for f in flags)} with, {sum(f is False for f in flags)} "
                  f"without, {sum(f is None for f in flags)} unclear, {1e3*(time.perf_counter()-t0):.1f} ms; "
                  f"e.g. {sorted(set(msgs))[:3]}")
            print("   with:", [n for n, f in zip(pn, flags) if f][:10])
        for i, n in enumerate(names[:40]):
            try:
                print("  ", n, "behavior", [str(b) for b in g.get_behavior_notes_for_plan_at_index(i)],
                      "knobs", g.get_engine_and_knobs_at_index(i))
            except Exception as exc:  # noqa: BLE001
                print("  ", n, "ERR", exc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
