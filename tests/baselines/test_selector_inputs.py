"""What ``kbench.selector`` accepts: one ``choose(problem, candidates=None)`` for both kinds of selector, every
field checked against the dataset's vocabulary (with the value a PyTorch-style spelling means), empty
candidate sets refused, and the shipped selectors loading on a fresh install. The toy selectors are built by
hand, so their rankings are worked out on paper below."""

import numpy as np
import pytest

from kbench import selector, selector_inputs
from kbench.core.errors import KbenchInputError

VOCABULARY = {"direction": ["B", "F", "W"], "dtype": ["BF16", "FP16", "FP32"],
              "layout_x": ["NCHW", "NHWC"], "layout_w": ["NCHW", "NHWC"], "layout_y": ["NCHW", "NHWC"],
              "spatial_dims": [2]}


def toy_problem(**changes) -> dict:
    """A 3x3, stride-1 convolution of 64 channels on 56x56, batch 32, forward FP32 NCHW."""
    p = {"direction": "F", "dtype": "FP32", "layout_x": "NCHW", "layout_w": "NCHW", "layout_y": "NCHW",
         "spatial_dims": 2, "n": 32, "c": 64, "k": 64, "groups": 1}
    for axis, (x, fil, pad) in {"d": (1, 1, 0), "h": (56, 3, 1), "w": (56, 3, 1)}.items():
        p.update({f"x_{axis}": x, f"y_{axis}": x, f"fil_{axis}": fil, f"pad_{axis}": pad,
                  f"stride_{axis}": 1, f"dil_{axis}": 1})
    p.update(changes)
    return p


def toy_kernel_selector() -> selector.Selector:
    """No trees, so the ranking is the prior's: FP32 forward has seen B twice, C once, A never, so
    B (score 1 + 2/3) > C (1 + 1/3) > A (0)."""
    meta = {"kernels": ["A", "B", "C"], "columns": [], "classes": {}, "directions": {"F": ["A", "B", "C"]},
            "prior": {"F|FP32": [0.0, 2.0, 1.0]}, "dataset": "toy", "vocabulary": VOCABULARY}
    return selector.Selector(meta, {})


def toy_plan_selector(safe_margin: float) -> selector.PlanSelector:
    """One stump on knob k2: k2 < 1.5 predicts log(t / t_best) = 0.5, else -0.5 (lower is better), so a
    k2=2 plan outranks a k2=1 plan unless the safe margin keeps mode A's first plan first."""
    forest = selector.Forest(left=[1, -1, -1], right=[2, -1, -1], feature=[0, 0, 0], threshold=[1.5, 0.5, -0.5],
                             default_left=[True, True, True], roots=[0], group=[0], base=[0.0], depth=1)
    meta = {"kind": "plans", "columns": ["knob_k2", "rank_cudnn_mode_a"], "kernel_columns": ["knob_k2"],
            "params": {"safe_margin": safe_margin, "candidates": "all", "max_ranking": 30,
                       "objective": "log_ratio"}, "dataset": "toy-pytorch", "vocabulary": VOCABULARY}
    return selector.PlanSelector(meta, forest)


def test_kernel_selector_ranks_by_prior_and_keeps_the_candidates_order():
    sel = toy_kernel_selector()
    assert sel.choose(toy_problem()) == ["B", "C", "A"]
    assert sel.choose(toy_problem(), candidates=["A", "C"]) == ["C", "A"]
    assert sel.choose(toy_problem(layout="NCHW") | {}) == ["B", "C", "A"]


def test_kernel_selector_refuses_empty_and_unknown_candidates():
    sel = toy_kernel_selector()
    with pytest.raises(KbenchInputError, match=r"^selector: the candidate set is empty; give the kernel names"):
        sel.choose(toy_problem(), candidates=[])
    with pytest.raises(KbenchInputError, match=r"unknown kernel\(s\) 'b' \(did you mean 'B'\?\)"):
        sel.choose(toy_problem(), candidates=["b"])


def test_plan_selector_reranks_the_lists_and_keeps_mode_a_first_within_the_margin():
    lists = {"cudnn_mode_a": ["eng1_k2=1", "eng1_k2=2"]}
    assert toy_plan_selector(0.0).choose(toy_problem(), lists) == ["eng1_k2=2", "eng1_k2=1"]
    # a gain of 1.0 (0.5 - -0.5) is within a margin of 2: mode A's first plan stays first
    assert toy_plan_selector(2.0).choose(toy_problem(), lists) == ["eng1_k2=1", "eng1_k2=2"]
    # the collector's form: one ';'-separated string per list
    assert toy_plan_selector(0.0).choose(toy_problem(), {"cudnn_mode_a": "eng1_k2=1;eng1_k2=2"}) == \
        ["eng1_k2=2", "eng1_k2=1"]


def test_plan_selector_without_lists_says_what_it_needs():
    sel = toy_plan_selector(0.0)
    with pytest.raises(KbenchInputError, match=r"^selector: the toy-pytorch selector re-ranks cuDNN's plan lists "
                                               r"for the problem and needs them: choose\(problem, "):
        sel.choose(toy_problem())
    with pytest.raises(KbenchInputError, match=r"^selector: the candidate set is empty \(every list of "
                                               r"cudnn_mode_a, cudnn_mode_b, cudnn_fallback is empty or missing\)"):
        sel.choose(toy_problem(), {"cudnn_mode_a": [], "cudnn_mode_b": []})
    with pytest.raises(KbenchInputError, match="cuDNN's lists as a mapping"):
        sel.choose(toy_problem(), ["eng1_k2=1"])


@pytest.mark.parametrize("field, value, message", [
    ("dtype", "half", "dtype='half' is not one of toy's values (BF16, FP16, FP32); did you mean 'FP16'?"),
    ("dtype", "bfloat16", "dtype='bfloat16' is not one of toy's values (BF16, FP16, FP32); did you mean 'BF16'?"),
    ("dtype", "torch.float32", "did you mean 'FP32'?"),
    ("dtype", "fp16", "did you mean 'FP16'?"),
    ("layout_x", "channels_last", "layout_x='channels_last' is not one of toy's values (NCHW, NHWC); "
                                  "did you mean 'NHWC'?"),
    ("layout_w", "contiguous_format", "did you mean 'NCHW'?"),
    ("direction", "forward", "direction='forward' is not one of toy's values (B, F, W); did you mean 'F'?"),
    ("direction", "dgrad", "did you mean 'B'?"),
    ("direction", "backward", "did you mean B (backward data) or W (backward weights)?"),
    ("n", "32", "n='32' is not a whole number >= 1"),
    ("pad_h", -1, "pad_h=-1 is not a whole number >= 0"),
    ("c", 2.5, "c=2.5 is not a whole number >= 1"),
    ("spatial_dims", 3, "spatial_dims=3 is not one of toy's values (2)"),
])
def test_every_field_is_checked_with_a_did_you_mean(field, value, message):
    with pytest.raises(KbenchInputError) as raised:
        toy_kernel_selector().choose(toy_problem(**{field: value}))
    assert message in str(raised.value)


def test_every_bad_field_is_named_at_once_and_layout_spreads():
    with pytest.raises(KbenchInputError) as raised:
        toy_kernel_selector().choose(toy_problem(dtype="half", direction="forward"))
    assert "direction='forward'" in str(raised.value) and "dtype='half'" in str(raised.value)
    problem = toy_problem()
    for t in "xwy":
        del problem[f"layout_{t}"]
    with pytest.raises(KbenchInputError, match="layout_x='channels_last'.*did you mean 'NHWC'"):
        toy_kernel_selector().choose({**problem, "layout": "channels_last"})
    assert toy_kernel_selector().choose({**problem, "layout": "NHWC"}) == ["B", "C", "A"]


def test_a_3d_problem_maps_channels_last_to_ndhwc():
    assert selector_inputs._layout_alias("channels_last", 3) == "NDHWC"
    assert selector_inputs._layout_alias("torch.channels_last_3d", None) == "NDHWC"
    assert selector_inputs._layout_alias("contiguous_format", 2) == "NCHW"


def test_the_right_model_per_dataset():
    assert selector.model_for("h200-pytorch") == "xgboost-plans-compact"
    assert selector.model_for("h100") == "xgboost-plans-compact"
    assert selector.model_for("gfx90878") == "xgboost-compact"  # mi100's alias


@pytest.mark.parametrize("name, kind", [("mi100", selector.Selector), ("h200-pytorch", selector.PlanSelector),
                                        ("h100-pytorch", selector.PlanSelector),
                                        ("h200-3d-pytorch", selector.PlanSelector)])
def test_shipped_selectors_load_on_a_fresh_install(name, kind, tmp_path, monkeypatch):
    """An empty cache: the selector comes from the package, small enough to ship (<= 6 MB), with its
    dataset's vocabulary and its model."""
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path))
    sel = selector.load(name, export_if_missing=False)
    assert isinstance(sel, kind) and sel.dataset == name
    assert sel.size_bytes() <= 6_000_000
    assert sel.meta["model"] == selector.model_for(name)
    assert sel.vocabulary["dtype"] and sel.vocabulary["direction"] == ["B", "F", "W"]


def test_shipped_plan_selector_ranks_a_dataset_problem_from_its_lists():
    import kbench
    ds = kbench.load("h200-pytorch")
    heur = ds.heuristics
    pid = ds.split("random")["test"][0]
    problem = ds.problems.set_index("problem_id").loc[pid].to_dict()
    h = heur[(heur["problem_id"] == pid) & heur["heuristic"].isin(selector.HEURISTIC_LISTS)]
    lists = {str(k): g.sort_values("rank")["kernel"].astype(str).tolist() for k, g in h.groupby("heuristic",
                                                                                                 observed=True)}
    ranking = selector.load("h200-pytorch", export_if_missing=False).choose(problem, lists)
    assert ranking and set(ranking) <= {p for v in lists.values() for p in v}
    with pytest.raises(KbenchInputError, match="did you mean 'FP16'"):
        selector.load("h200-pytorch", export_if_missing=False).choose({**problem, "dtype": "half"}, lists)


def test_the_shipped_3d_selector_says_what_it_was_trained_on_and_held_out():
    """h200-3d-pytorch's selector is fitted on the networks split's train part only: its record names the
    dataset version, the split and the parts' sizes, which are the dataset's, and the held-out networks."""
    import kbench
    from kbench.sources.splits import HELD_OUT_NETWORKS_3D
    ds = kbench.load("h200-3d-pytorch")
    sel = selector.load("h200-3d-pytorch", export_if_missing=False)
    training = sel.meta["training"]
    parts = ds.split("networks")
    assert (training["dataset"], training["version"], training["split"]) == ("h200-3d-pytorch",
                                                                             ds.manifest["version"], "networks")
    assert training["problems"] == {part: len(ids) for part, ids in parts.items()}
    assert (training["fitted_on"], training["early_stopping_on"], training["held_out"]) == ("train", "valid", "test")
    assert training["held_out_networks"] == list(HELD_OUT_NETWORKS_3D) and "r3d_18" in training["held_out_networks"]
    pid = parts["test"][0]
    problem = ds.problems.set_index("problem_id").loc[pid].to_dict()
    h = ds.heuristics[(ds.heuristics["problem_id"] == pid) & ds.heuristics["heuristic"].isin(selector.HEURISTIC_LISTS)]
    lists = {str(k): g.sort_values("rank")["kernel"].astype(str).tolist() for k, g in h.groupby("heuristic",
                                                                                                 observed=True)}
    ranking = sel.choose(problem, lists)
    assert ranking and set(ranking) <= {p for v in lists.values() for p in v}


def test_the_training_record_of_an_export():
    """What ``training_record`` writes follows from the split it is given; a 2D networks split names the
    network lists instead of the 3D held-out networks."""
    import kbench
    ds = kbench.load("h200-pytorch")
    parts = {"train": ds.problems["problem_id"][:3], "valid": ds.problems["problem_id"][3:4],
             "test": ds.problems["problem_id"][4:9]}
    record = selector.training_record(ds, "networks", parts, "xgboost-plans-compact", 7)
    assert record["problems"] == {"train": 3, "valid": 1, "test": 5} and record["seed"] == 7
    assert record["held_out_networks"].startswith("every layer of MITuna's network lists")
    assert "held_out_networks" not in selector.training_record(ds, "random", parts, "m", 0)


def test_forest_stores_feature_indices_in_int16(tmp_path):
    forest = selector.Forest(left=[1, -1, -1], right=[2, -1, -1], feature=[3, 0, 0], threshold=[1.5, 0.5, -0.5],
                             default_left=[True, True, True], roots=[0], group=[0], base=[0.0], depth=1)
    assert forest.arrays("t")["t.feature"].dtype == np.int16
    folder = selector.save(tmp_path / "s", {"kind": "x"}, {"F": forest})
    from safetensors.numpy import load_file
    back = selector.Forest.from_arrays(load_file(str(folder / "trees.safetensors")), "F", 1)
    assert back.feature.dtype == np.int32 and back.feature.tolist() == [3, 0, 0]


def test_lists_from_raw_are_the_datasets_heuristics_table():
    """The lists read from the collector's raw folder are, problem by problem, the ones the packaged
    dataset holds: what a user's own `kbench collect cudnn` run gives the plans selector."""
    import kbench
    from kbench.data.registry import DATASETS
    lists = selector.lists_from_raw("raw/h200-3d", variant="pytorch")
    # a problem-direction measured again (the registry's `retimed` folders: a cap cut the first
    # measurement short, lists included) takes the later run's lists, as its measurements do
    for folder in DATASETS["h200-3d-pytorch"].retimed:
        lists.update(selector.lists_from_raw(folder, variant="pytorch"))
    ds = kbench.load("h200-3d-pytorch")
    heur = ds.heuristics
    heur = heur[heur["heuristic"].isin(selector.HEURISTIC_LISTS)].sort_values(["problem_id", "heuristic", "rank"])
    want: dict = {}
    for (pid, name), group in heur.groupby(["problem_id", "heuristic"], observed=True):
        want.setdefault(str(pid), {})[str(name)] = group["kernel"].astype(str).tolist()
    assert len(want) == len(ds.problems)  # every packaged problem has its lists
    # the raw folder may hold runs past the version's last (collected_through): they wait for the next one
    assert set(want) <= set(lists) and {pid: lists[pid] for pid in want} == want
