"""``tunanet``: MIOpen's shipped kernel-selection network, as a reference baseline.

MIOpen ships a small fully-connected network per GPU ("TunaNet", files
``src/kernels/<arch>.tn.model`` + ``<arch>_metadata.tn.model``) that ranks
convolution solvers when the find-db has no entry for a problem (its
"immediate mode AI fallback"). This module runs those networks on kbench's
canonical problems, building the input features exactly as MIOpen's
``src/conv/heuristics/ai_heuristics.cpp`` does (classes ``Gfx908Model``,
``Gfx90aModel``, ``Gfx942Model``; read in the ROCm/MIOpen sources):

Features (``ToFeatures``)
    MIOpen's ``conv::ProblemDescription`` is direction-relative: its "in"
    tensor is x for forward but y (dy) for both backward directions. Every
    ``ToFeatures`` undoes that with ``isFwd ? GetIn*() : GetOut*()`` so the
    network always sees the *true* x sizes as ``In*`` and the true y sizes as
    ``Out*``. kbench's canonical columns are already in true x/y terms, so
    here ``In*`` is simply ``c, x_*`` and ``Out*`` is ``k, y_*`` for every
    direction. The feature names and their order are the metadata's
    ``conv_params_used_as_features``; categorical features use the metadata's
    ``encodings`` (Direction, Precision, Layout); each feature is z-normalised
    in float32 with the metadata's ``stats.<part>.features.mean/std``, where
    MIOpen uses part ``overall`` for gfx908 and gfx90a and part ``test`` for
    gfx942. Two gfx908 features are constants in MIOpen (``Padding0`` and
    ``Stride0`` are fed as 1: "TunaNet was trained on a dataset of 2D problems
    where PadD [StrideD] was incorrectly set to 1"); depth features are the
    2D depth of 1.

Support check (``IsProblemSupported``)
    gfx908: 2D; group count 1; "in" layout NCHW (or NCDHW); square filter;
    equal padding and equal stride along H and W; dilation 1; "in" data type
    FP32, FP16 or BF16.
    gfx90a: 2D; "in" layout NCHW; equal stride and equal dilation along H and
    W; bias 0; "in" data type FP32/FP16/BF16 (grouped problems are allowed).
    gfx942: as gfx90a, but "in" layout NCHW or NHWC.
    "in" is direction-relative (x for F, y for B/W), so the layout checked is
    ``layout_x`` for forward and ``layout_y`` otherwise, and the data type is
    the first type of the key's data-type field (MIOpen writes one name when
    x, w and y agree, else the three names concatenated in in/w/out order).
    MIOpen finally requires that at least one of the model's solvers
    ``IsApplicable``; that needs MIOpen itself and is not reproduced, except
    for the direction part (see below).

Output (``Forward`` / ``PredictSolver``)
    The network's output vector minus its first ``num_outputs - num_solvers``
    entries (gfx908 and gfx90a models also emit other heads first) are solver
    scores, index ``i`` being the solver whose metadata encoding is ``i``.
    MIOpen sorts them in descending order and tries solvers in that order,
    skipping the ones that are not applicable to the problem. ``predict``
    returns that order, joined with ``;``, keeping only solvers that can apply
    to the problem's direction (from the dataset's ``kernels.directions``, or
    failing that the directions each kernel was measured in) and that are in
    the dataset's kernel vocabulary; the evaluator then skips the remaining
    inapplicable ones as MIOpen would.

Known discrepancy
    The shipped gfx942 model (metadata dated 12 Sep 2024) takes 18 inputs and
    its metadata lists 18 features without ``Layout``, while every stored
    version of MIOpen's ``Gfx942Model::ToFeatures`` builds 19 values including
    ``EncodeLayout`` (written for the earlier 19-input gfx942 model). Here the
    feature list is taken from the metadata (the model's own contract), so
    gfx942 gets the 18 metadata features in metadata order (the same order as
    MIOpen's list with Layout removed).

The model files are byte-identical copies of MIOpen's (see
``tunanet_models/SOURCES.json``; MIT license), shipped next to this module.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

try:  # kbench's user-facing error type when the package is importable
    from kbench.core.errors import KbenchInputError
except Exception:  # pragma: no cover - standalone use of this module
    class KbenchInputError(ValueError):
        pass

from kbench_baselines.fdeep import FdeepModel

__all__ = ["TunaNet", "TunaNetArch", "DEVICE_ARCH", "MODEL_DIR", "in_dtype", "in_layout"]

MODEL_DIR = Path(__file__).resolve().parent / "tunanet_models"

# kbench dataset names and MIOpen find-db ids -> the TunaNet model MIOpen uses there.
DEVICE_ARCH = {
    "mi100": "gfx908", "gfx90878": "gfx908", "gfx908": "gfx908",
    "mi210": "gfx90a", "gfx90a68": "gfx90a",
    "mi250x": "gfx90a", "gfx90a6e": "gfx90a", "gfx90a": "gfx90a",
    "mi300x": "gfx942", "gfx942130": "gfx942", "gfx942": "gfx942",
}

# MIOpen data-type names (GetDataTypeName), longest first for prefix matching.
_MIOPEN_TYPES = ["INT8x4", "INT32", "INT8", "FP32", "FP16", "FP64", "BF16", "BFP8", "FP8"]
_SUPPORTED_TYPES = ("FP32", "FP16", "BF16")


@dataclass(frozen=True)
class _Rules:
    """The per-model support conditions of MIOpen's ``IsProblemSupported``."""

    stats_part: str            # metadata stats part used to normalise features
    layouts: tuple[str, ...]   # accepted "in" layouts
    groups_one: bool           # group count must be 1
    square_filter: bool        # fil_h == fil_w
    equal_pad: bool            # pad_h == pad_w
    dilation_one: bool         # dil_h == dil_w == 1 (else only dil_h == dil_w)
    bias_zero: bool            # bias must be 0


_RULES = {
    "gfx908": _Rules("overall", ("NCHW", "NCDHW"), True, True, True, True, False),
    "gfx90a": _Rules("overall", ("NCHW",), False, False, False, False, True),
    "gfx942": _Rules("test", ("NCHW", "NHWC"), False, False, False, False, True),
}


def in_dtype(dtype: pd.Series) -> pd.Series:
    """MIOpen's "in" data type: the key's type field, or its first name when mixed."""
    s = pd.Series(dtype)
    codes, uniq = pd.factorize(s.astype(str))  # a handful of distinct values: parse those once
    u = pd.Series(uniq, dtype="string")
    first = u.str.extract(r"^(" + "|".join(_MIOPEN_TYPES) + ")", expand=False).fillna(u)
    return pd.Series(first.to_numpy(dtype=object)[codes], index=s.index, dtype=object)


def in_layout(problems: pd.DataFrame) -> pd.Series:
    """MIOpen's ``GetInLayout()``: x's layout for forward, y's for backward (B, W)."""
    if "layout_x" in problems and "layout_y" in problems:
        fwd = problems["direction"].to_numpy() == "F"
        return pd.Series(np.where(fwd, problems["layout_x"].astype(str), problems["layout_y"].astype(str)),
                         index=problems.index, dtype=object)
    # The key's layout field(s) are direction-relative, "in" first.
    return problems["layout"].astype(str).str.split("-").str[0].astype(object)


def _col(problems: pd.DataFrame, name: str, default: float | None = None) -> np.ndarray:
    if name in problems:
        return problems[name].to_numpy(dtype=np.float64)
    if default is None:
        raise KbenchInputError(f"tunanet: the problems table has no {name!r} column")
    return np.full(len(problems), default, dtype=np.float64)


class TunaNetArch:
    """One shipped TunaNet (model + metadata) for a GPU architecture."""

    def __init__(self, arch: str, model_dir: str | Path | None = None):
        if arch not in _RULES:
            raise KbenchInputError(f"tunanet: no model for {arch!r}; MIOpen ships {sorted(_RULES)}")
        self.arch = arch
        self.rules = _RULES[arch]
        d = Path(model_dir) if model_dir is not None else MODEL_DIR
        meta_path = d / f"{arch}_metadata.tn.model"
        model_path = next((p for p in (d / f"{arch}.tn.model", d / f"{arch}.tn.model.gz") if p.exists()), None)
        if model_path is None or not meta_path.exists():
            raise KbenchInputError(f"tunanet: {arch} model files not found in {d}")
        self.metadata = json.loads(meta_path.read_text())
        self.model = FdeepModel.load(model_path)
        m = self.metadata
        self.features = list(m["conv_params_used_as_features"])
        n_in, n_out, n_solvers = int(m["num_inputs"]), int(m["num_outputs"]), int(m["num_solvers"])
        if len(self.features) != n_in or self.model.input_shapes != [(n_in,)]:
            raise KbenchInputError(
                f"tunanet: {arch} metadata lists {len(self.features)} features (num_inputs {n_in}) "
                f"but the model takes {self.model.input_shapes}")
        if self.model.output_shapes != [(n_out,)]:
            raise KbenchInputError(f"tunanet: {arch} model outputs {self.model.output_shapes}, metadata says {n_out}")
        self.offset = n_out - n_solvers
        enc = m["encodings"]["solver"]
        by_index = {int(v): k for k, v in enc.items()}
        if sorted(by_index) != list(range(n_solvers)):
            raise KbenchInputError(f"tunanet: {arch} solver encodings are not 0..{n_solvers - 1}")
        self.solvers: list[str] = [by_index[i] for i in range(n_solvers)]
        stats = m["stats"][self.rules.stats_part]["features"]
        self.mean = np.array([stats["mean"][f] for f in self.features], dtype=np.float32)
        self.std = np.array([stats["std"][f] for f in self.features], dtype=np.float32)

    # ------------------------------------------------------------------ support
    def supports(self, problems: pd.DataFrame) -> pd.Series:
        """MIOpen's ``IsProblemSupported`` (all but its solver-applicability step), per row."""
        r = self.rules
        p = problems
        ok = p["spatial_dims"].to_numpy() == 2
        if r.groups_one:
            ok &= p["groups"].to_numpy() == 1
        ok &= in_layout(p).isin(r.layouts).to_numpy()
        if r.square_filter:
            ok &= p["fil_h"].to_numpy() == p["fil_w"].to_numpy()
        if r.equal_pad:
            ok &= p["pad_h"].to_numpy() == p["pad_w"].to_numpy()
        ok &= p["stride_h"].to_numpy() == p["stride_w"].to_numpy()
        if r.dilation_one:
            ok &= (p["dil_h"].to_numpy() == 1) & (p["dil_w"].to_numpy() == 1)
        else:
            ok &= p["dil_h"].to_numpy() == p["dil_w"].to_numpy()
        if r.bias_zero:
            ok &= _col(p, "bias", 0) == 0
        ok &= in_dtype(p["dtype"]).isin(_SUPPORTED_TYPES).to_numpy()
        ok &= p["direction"].isin(["F", "B", "W"]).to_numpy()
        # Rows whose categorical values the metadata cannot encode would make
        # MIOpen throw inside ToFeatures; they are not supported either.
        ok &= ~np.isnan(self.raw_features(p)).any(axis=1)
        return pd.Series(ok, index=p.index, name="tunanet_supported")

    # ----------------------------------------------------------------- features
    def raw_features(self, problems: pd.DataFrame) -> np.ndarray:
        """The un-normalised feature matrix (rows x metadata features), float32.

        Categorical values the metadata does not encode come out as NaN.
        """
        p = problems
        enc = self.metadata["encodings"]

        def encode(kind: str, values: pd.Series) -> np.ndarray:
            table = enc.get(kind, {})
            return pd.Series(values).map(table).to_numpy(dtype=np.float64, na_value=np.nan)

        ones = np.ones(len(p))
        source = {
            # gfx908 names (TunaNet v1)
            "InChannels": lambda: _col(p, "c"),
            "InDepth": lambda: _col(p, "x_d", 1),
            "InHeight": lambda: _col(p, "x_h"),
            "InWidth": lambda: _col(p, "x_w"),
            "FilterDim0": lambda: _col(p, "fil_d", 1),
            "FilterDim1": lambda: _col(p, "fil_h"),
            "FilterDim2": lambda: _col(p, "fil_w"),
            "OutChannels": lambda: _col(p, "k"),
            "OutDepth": lambda: _col(p, "y_d", 1),
            "OutHeight": lambda: _col(p, "y_h"),
            "OutWidth": lambda: _col(p, "y_w"),
            "BatchSize": lambda: _col(p, "n"),
            "Padding0": lambda: ones,   # MIOpen feeds 1 (see module docstring)
            "Padding1": lambda: _col(p, "pad_h"),
            "Padding2": lambda: _col(p, "pad_w"),
            "Stride0": lambda: ones,    # MIOpen feeds 1 (see module docstring)
            "Stride1": lambda: _col(p, "stride_h"),
            "Stride2": lambda: _col(p, "stride_w"),
            "Dilation1": lambda: _col(p, "dil_h"),
            "Dilation2": lambda: _col(p, "dil_w"),
            "Layout": lambda: encode("Layout", in_layout(p)),
            "Precision": lambda: encode("Precision", in_dtype(p["dtype"])),
            "Direction": lambda: encode("Direction", p["direction"].astype(str)),
            "GroupSize": lambda: _col(p, "groups", 1),
            # gfx90a / gfx942 names (tuna_net2): <tensor>_<dim>, dim 0 = C, 1 = D, 2 = H, 3 = W
            "Inp_0": lambda: _col(p, "c"),
            "Inp_1": lambda: _col(p, "x_d", 1),
            "Inp_2": lambda: _col(p, "x_h"),
            "Inp_3": lambda: _col(p, "x_w"),
            "Out_0": lambda: _col(p, "k"),
            "Out_1": lambda: _col(p, "y_d", 1),
            "Out_2": lambda: _col(p, "y_h"),
            "Out_3": lambda: _col(p, "y_w"),
            "Fil_0": lambda: _col(p, "fil_d", 1),
            "Fil_1": lambda: _col(p, "fil_h"),
            "Fil_2": lambda: _col(p, "fil_w"),
            "Pad_1": lambda: _col(p, "pad_h"),
            "Pad_2": lambda: _col(p, "pad_w"),
            "Str_1": lambda: _col(p, "stride_h"),
            "Str_2": lambda: _col(p, "stride_w"),
            "Dil_1": lambda: _col(p, "dil_h"),
            "Dil_2": lambda: _col(p, "dil_w"),
        }
        missing = [f for f in self.features if f not in source]
        if missing:
            raise KbenchInputError(f"tunanet: {self.arch} metadata uses unknown feature(s) {missing}")
        cols = [source[f]() for f in self.features]
        return np.stack(cols, axis=1).astype(np.float32) if cols else np.zeros((len(p), 0), np.float32)

    def features_of(self, problems: pd.DataFrame) -> np.ndarray:
        """The normalised network input, float32 ``(x - mean) / std`` as MIOpen computes it."""
        return (self.raw_features(problems) - self.mean) / self.std

    def scores(self, problems: pd.DataFrame) -> np.ndarray:
        """Solver scores (rows x ``self.solvers``), the network output after the offset."""
        x = self.features_of(problems)
        if len(x) == 0:
            return np.zeros((0, len(self.solvers)), dtype=np.float32)
        return self.model.predict(x)[0][:, self.offset:]


def _dataset_arch(dataset) -> str:
    """Which shipped model applies to a dataset: from its name or info (device, gfx id)."""
    candidates: list[str] = []
    for attr in ("name", "device", "arch"):
        v = getattr(dataset, attr, None)
        if isinstance(v, str):
            candidates.append(v)
    info = getattr(dataset, "info", None)
    for key in ("name", "dataset", "arch", "gfx", "device", "source_file", "source"):
        v = info.get(key) if isinstance(info, dict) else getattr(info, key, None)
        if isinstance(v, str):
            candidates.append(v)
    for c in candidates:
        key = c.strip().lower()
        if key in DEVICE_ARCH:
            return DEVICE_ARCH[key]
    for c in candidates:  # a longer string naming the device or the find-db file
        low = c.lower()
        for key in sorted(DEVICE_ARCH, key=len, reverse=True):
            if key in low:
                return DEVICE_ARCH[key]
    raise KbenchInputError(
        "tunanet: cannot tell which MIOpen model applies to this dataset "
        f"(looked at {candidates or 'no name/info'}); MIOpen ships models for "
        f"{sorted(set(DEVICE_ARCH.values()))} = datasets {sorted(k for k in DEVICE_ARCH if k.startswith('mi'))}. "
        "Pass TunaNet(arch=...) to force one.")


def _kernel_directions(dataset) -> dict[str, set[str]] | None:
    """kernel -> directions it can run in, from the dataset (None if it has no such table)."""
    kernels = getattr(dataset, "kernels", None)
    if isinstance(kernels, pd.DataFrame) and {"kernel", "directions"} <= set(kernels.columns):
        dirs = kernels["directions"].fillna("").astype(str).str.split(",")
        return {k: {d.strip() for d in ds if d.strip()} for k, ds in zip(kernels["kernel"], dirs)}
    runtimes = getattr(dataset, "runtimes", None)
    problems = getattr(dataset, "problems", None)
    if isinstance(runtimes, pd.DataFrame) and isinstance(problems, pd.DataFrame):
        pairs = runtimes[["problem_id", "kernel"]].merge(
            problems[["problem_id", "direction"]], on="problem_id", how="inner")
        pairs = pairs[["kernel", "direction"]].drop_duplicates()
        return pairs.groupby("kernel")["direction"].agg(set).to_dict()
    return None


class TunaNet:
    """MIOpen's pre-trained TunaNet as a kbench baseline (no training).

    >>> tn = TunaNet().fit(kbench.load("mi100"), train_ids, valid_ids)   # doctest: +SKIP
    >>> tn.predict(ds, test_ids).head()                                   # doctest: +SKIP

    ``arch`` forces a model (``gfx908``/``gfx90a``/``gfx942``); by default
    ``fit`` picks it from the dataset (mi100 -> gfx908, mi210/mi250x ->
    gfx90a, mi300x -> gfx942). ``filter_direction`` drops solvers that cannot
    run in the problem's direction (MIOpen's applicability check skips them).
    """

    name = "tunanet"
    # Pre-trained by AMD outside kbench, and it predicts only the problems MIOpen's own support
    # check accepts, so it is scored on that subset (with the other models on the same subset)
    # rather than in the full-coverage default `kbench run`.
    benchmark = False
    external_data = True
    description = "MIOpen's shipped TunaNet solver-selection network (pre-trained reference; 2D, supported problems only)"

    def __init__(self, arch: str | None = None, model_dir: str | Path | None = None,
                 filter_direction: bool = True):
        self.arch = arch
        self.model_dir = model_dir
        self.filter_direction = filter_direction
        self._net: TunaNetArch | None = None
        self._kernel_dirs: dict[str, set[str]] | None = None
        if arch is not None:
            self._net = TunaNetArch(arch, model_dir)

    # ----------------------------------------------------------------- fitting
    def fit(self, dataset, train_ids: Iterable[str] | None = None,
            valid_ids: Iterable[str] | None = None) -> TunaNet:
        """No training (the model is MIOpen's); load the model for the dataset's device.

        Also reads the dataset's kernel vocabulary and the directions each
        kernel runs in, used to filter rankings. ``train_ids``/``valid_ids``
        are accepted for the common baseline interface and not used.
        """
        arch = self.arch or _dataset_arch(dataset)
        if self._net is None or self._net.arch != arch:
            self._net = TunaNetArch(arch, self.model_dir)
        self.arch = arch
        self._kernel_dirs = _kernel_directions(dataset)
        return self

    @property
    def net(self) -> TunaNetArch:
        if self._net is None:
            raise KbenchInputError("tunanet: call fit(dataset, ...) first (or pass arch=...)")
        return self._net

    @property
    def solvers(self) -> list[str]:
        """The model's solver list, in encoding order."""
        return list(self.net.solvers)

    # ---------------------------------------------------------------- predict
    def supports(self, problems: pd.DataFrame) -> pd.Series:
        """Boolean Series (same index): MIOpen would consult TunaNet for this problem."""
        return self.net.supports(problems)

    def supported_ids(self, dataset, ids: Iterable[str]) -> list[str]:
        """The ids among ``ids`` that TunaNet supports (to score other models on the same subset)."""
        if self._net is None:
            self.fit(dataset)
        problems = dataset.problems
        rows = problems[problems["problem_id"].isin(pd.Index(list(ids)))]
        return rows.loc[self.supports(rows).to_numpy(), "problem_id"].tolist()

    def features(self, problems: pd.DataFrame) -> pd.DataFrame:
        """Normalised network inputs, one column per metadata feature (for inspection)."""
        return pd.DataFrame(self.net.features_of(problems), index=problems.index, columns=self.net.features)

    def scores(self, problems: pd.DataFrame) -> pd.DataFrame:
        """Solver scores (higher = preferred) for the supported rows, indexed by problem_id."""
        sup = self.supports(problems).to_numpy()
        rows = problems[sup]
        s = self.net.scores(rows)
        return pd.DataFrame(s, index=pd.Index(rows["problem_id"].to_numpy(), name="problem_id"),
                            columns=self.net.solvers)

    def rank_problems(self, problems: pd.DataFrame) -> pd.DataFrame:
        """``problem_id, ranking`` for the supported rows of a problems table."""
        net = self.net
        sup = self.supports(problems).to_numpy()
        rows = problems[sup]
        scores = net.scores(rows)
        n, s = scores.shape
        # Descending scores; a stable sort keeps the lower encoding first on exact ties.
        order = np.argsort(-scores, axis=1, kind="stable")
        names = np.asarray(net.solvers, dtype=object)
        allowed = np.ones((n, s), dtype=bool)
        if self._kernel_dirs is not None:
            dirs = rows["direction"].to_numpy()
            for d in ("F", "B", "W"):
                ok = np.array([sv in self._kernel_dirs and
                               (not self.filter_direction or d in self._kernel_dirs[sv])
                               for sv in net.solvers])
                allowed[dirs == d] = ok
        keep = np.take_along_axis(allowed, order, axis=1)
        ranked = names[order]
        # Join column by column (S <= 23 steps), vectorised over problems.
        out = np.full(n, "", dtype=object)
        for j in range(s):
            col = np.where(keep[:, j], ranked[:, j], "")
            sep = np.where(keep[:, j] & (out != ""), ";", "")
            out = out + sep + col
        res = pd.DataFrame({"problem_id": rows["problem_id"].to_numpy(), "ranking": out})
        return res[res["ranking"] != ""].reset_index(drop=True)

    def predict(self, dataset, ids: Iterable[str]) -> pd.DataFrame:
        """``DataFrame[problem_id, ranking]`` for the supported problems among ``ids``.

        ``ranking`` lists the model's solvers in its preference order,
        separated by ``;``. Unsupported problems are left out (MIOpen would
        fall back to its other heuristics there).
        """
        if self._net is None or self._kernel_dirs is None:
            self.fit(dataset)
        problems = dataset.problems
        ids = pd.Index(pd.unique(pd.Series(list(ids), dtype=object)))
        rows = problems[problems["problem_id"].isin(ids)]
        return self.rank_problems(rows)

    # -------------------------------------------------------------- save/load
    def to_dict(self) -> dict:
        """Everything needed to rebuild this baseline (the weights are MIOpen's shipped files)."""
        return {"baseline": self.name, "arch": self.arch, "filter_direction": self.filter_direction}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path, model_dir: str | Path | None = None) -> TunaNet:
        d = json.loads(Path(path).read_text())
        if d.get("baseline") != cls.name:
            raise KbenchInputError(f"{path}: not a saved tunanet baseline")
        return cls(arch=d["arch"], model_dir=model_dir, filter_direction=d.get("filter_direction", True))
