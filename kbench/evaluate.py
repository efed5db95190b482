"""The Evaluator: validate a predictions file and score it on a dataset part.

>>> from kbench import Evaluator
>>> ev = Evaluator("mi100", split="random")          # test part
>>> print(ev.expected_format())                     # doctest: +SKIP
>>> result = ev(preds_df)                            # doctest: +SKIP
>>> result.overall["top1"], result.overall["geomean_slowdown"]   # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from kbench.errors import KbenchInputError, suggest
from kbench.metrics import (
    DEEPEST,
    LOP_AT,
    TOP_K,
    ScoringTable,
    build_scoring_table,
    lean_rows,
    score_rankings,
    summarize,
)
from kbench.records import Counts, DatasetRef, EvaluationResult, PredictionsRef
from kbench.version import __version__

EXPECTED_FORMAT = """\
Predictions: a CSV file (or a pandas DataFrame) with a header row, comma-separated,
one row per problem, joined to the dataset by problem_id (never by row position).

Required column
  problem_id   the dataset's problem id (the MIOpen problem key), e.g.
               64-28-28-3x3-128-14-14-32-1x1-2x2-1x1-0-NCHW-FP16-F
and ONE of
  ranking      kernels in preference order separated by ';', e.g.
               ConvBinWinogradRxSf2x3g1;ConvMlirIgemmFwdXdlops;GemmFwdRest
  kernel       the top-1 kernel only (LoP@n then equals LoP@1)
or the long form, one row per (problem, kernel):
  problem_id,kernel,score   higher score = preferred; the ranking is the score order

Every problem of the scored part must be present (or pass --allow-partial to score
what is there). Kernel names must be in the dataset's vocabulary (ds.kernels). A kernel
listed twice for one problem counts at its first position (long form: its highest score).
Long-form scores must be finite numbers; negative ones are fine.
UTF-8 with or without BOM (UTF-16/32 with a BOM is converted), LF or CRLF line endings.
gzip-compressed files are read too (recognised by content, so `<(zcat f.gz)` and f.gz both
work); at most 2 GiB after decompression (KBENCH_MAX_PREDICTIONS_BYTES overrides).

Scoring rules
  1. The choice for a problem is the first kernel of the ranking that the library could
     run. Where the problem's measured list is complete, a kernel outside it is known to
     be inapplicable and is skipped, as the library itself would skip it; if nothing
     applicable remains the prediction is a failure (timed at the slowest listed kernel).
     Where the list is censored (find-db: the 4 fastest only), a kernel outside the list
     is "slower than the 4th or inapplicable": it is taken as the choice and its time is
     censored at the 4th time, a lower bound. A kernel never measured on a problem of the
     same direction and dimensionality (2D / 3D) anywhere in the dataset is inapplicable
     there and skipped.
  2. top-1: the choice is a fastest kernel (ties: either counts). top-k: a fastest
     kernel is among the first k applicable candidates. within 5%: t <= 1.05 t_best.
  3. LoP = (t_choice - t_best) / t_best (mean, median, p90, max); geometric-mean
     slowdown exp(mean(log(t_choice / t_best))); LoP@n: LoP of the best of the first n
     applicable candidates (n = 1, 5, 10, 30).
  4. Speed-up over the heuristic: geomean of t_heuristic / t_choice and the total-time
     ratio sum(t_heuristic) / sum(t_choice).
  Censored choices make LoP and slowdown lower bounds and within-5% and speed-up upper
  bounds; the report shows the shares of exact, censored and failed choices.
"""

MAX_LISTED = 5  # how many offending ids/names an error message shows
#: recorded heuristics used as a dataset's reference for speed-up, first found wins
REFERENCE_PRIORITY = ("cudnn_mode_a",)


#: longest value an error message quotes in full (a 100 MB id is shown by its start and length)
MAX_SHOWN_CHARS = 80


def shown(values) -> list[str]:
    """Values for an error message, each cut to MAX_SHOWN_CHARS (with its full length said)."""
    return [v if len(v) <= MAX_SHOWN_CHARS else f"{v[:MAX_SHOWN_CHARS]}… ({len(v):,} characters)"
            for v in map(str, values)]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: the largest predictions file kbench reads, in bytes after decompression (2 GiB). The largest
#: legitimate file is the long form over every kernel of h100's train part, about 1.25 GB
#: (estimated by ``bench/bench_large_predictions.py``); anything bigger is refused before it is
#: parsed, so a gzip bomb costs at most this much memory. Override with KBENCH_MAX_PREDICTIONS_BYTES.
MAX_PREDICTIONS_BYTES = 2 * 1024 ** 3

#: leading bytes of formats that are not (gzip) CSV, and how to name them in a message
FOREIGN_MAGIC = {b"PAR1": "a Parquet file", b"PK\x03\x04": "a zip archive", b"BZh": "bzip2-compressed",
                 b"\xfd7zXZ\x00": "xz-compressed", b"\x28\xb5\x2f\xfd": "zstd-compressed"}
#: byte-order marks of UTF-16/32 text (longest first): such a file is transcoded to UTF-8
UNICODE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
                (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))
FORMAT_HINT = " Run `kbench evaluate --explain` for the expected format."


def max_predictions_bytes() -> int:
    """The size limit in force (KBENCH_MAX_PREDICTIONS_BYTES, else MAX_PREDICTIONS_BYTES)."""
    import os
    value = os.environ.get("KBENCH_MAX_PREDICTIONS_BYTES")
    if value is None:
        return MAX_PREDICTIONS_BYTES
    try:
        limit = int(value)
    except ValueError:
        raise KbenchInputError(f"KBENCH_MAX_PREDICTIONS_BYTES={value!r} is not a whole number of bytes.") from None
    if limit <= 0:
        raise KbenchInputError(f"KBENCH_MAX_PREDICTIONS_BYTES={value!r} must be positive.")
    return limit


def _too_big(path: Path, what: str, limit: int) -> KbenchInputError:
    return KbenchInputError(
        f"{path}: {what} is larger than the {limit:,}-byte limit on predictions files (no real predictions "
        "file is this big: check that it is the right file). If it is, raise the limit with "
        "KBENCH_MAX_PREDICTIONS_BYTES=<bytes>.")


def read_input_bytes(path: Path, limit: int, what: str = "predictions file") -> bytes:
    """The bytes of a regular file, FIFO or pipe (``<(zcat f.gz)``), at most ``limit`` of them.

    Every way the path can fail to be a readable file becomes one KbenchInputError naming it.
    """
    import errno
    import os
    import stat
    path = Path(path)
    try:
        st = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        if path.is_symlink():
            raise KbenchInputError(f"{path}: a broken symbolic link (it points to {os.readlink(path)!r}, "
                                   f"which does not exist); give the {what} itself.") from None
        raise KbenchInputError(f"{path}: {what} not found.") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise KbenchInputError(f"{path}: a symbolic link loop (following the links leads back to the start); "
                                   f"give the {what} itself.") from None
        raise KbenchInputError(f"{path}: cannot read the {what} ({exc.strerror}).") from None
    if stat.S_ISDIR(st.st_mode):
        raise KbenchInputError(f"{path}: is a directory; give the {what} inside it (e.g. {path}/preds.csv).")
    if stat.S_ISREG(st.st_mode) and st.st_size > limit:
        raise _too_big(path, f"the file ({st.st_size:,} bytes)", limit)
    try:
        with open(path, "rb") as fh:
            if stat.S_ISREG(st.st_mode):
                raw = fh.read()  # its size was checked above (a file still growing is caught below)
            else:  # a FIFO or a pipe has no size: read in blocks, at most limit + 1 bytes
                raw = _read_blocks(fh, limit)
    except PermissionError:
        raise KbenchInputError(f"{path}: permission denied; make the {what} readable "
                               f"(chmod u+r {path}).") from None
    except OSError as exc:
        raise KbenchInputError(f"{path}: cannot read the {what} ({exc.strerror or exc}).") from None
    if len(raw) > limit:
        raise _too_big(path, "the stream", limit)
    return raw


def _read_blocks(stream, limit: int, block: int = 1 << 20) -> bytes:
    """At most ``limit + 1`` bytes of a stream, read in blocks (no buffer of the limit's size up front)."""
    chunks, total = [], 0
    while total <= limit:
        chunk = stream.read(min(block, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def decode_csv_bytes(path: Path, raw: bytes, limit: int) -> bytes:
    """UTF-8 CSV bytes from a file's content: gunzipped (by its magic bytes, so a pipe works
    too), UTF-16/32 transcoded, BOM dropped; other formats are refused by name."""
    import gzip
    import io
    import zlib
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:  # reads every member of a multi-member file
                data = _read_blocks(gz, limit)
        except (OSError, EOFError, zlib.error) as exc:
            raise KbenchInputError(f"{path}: a damaged gzip file ({exc}); compress it again, "
                                   "or give the CSV uncompressed.") from None
        if len(data) > limit:
            raise _too_big(path, "the decompressed content", limit)
        raw = data
    for magic, name in FOREIGN_MAGIC.items():
        if raw.startswith(magic):
            fix = ("pandas.read_parquet(path).to_csv('preds.csv', index=False)" if magic == b"PAR1"
                   else "decompress it, or compress it with gzip (.csv.gz)")
            raise KbenchInputError(f"{path}: is {name}, not a CSV file; kbench reads CSV, plain or gzip-"
                                   f"compressed. Convert it: {fix}.")
    for bom, codec in UNICODE_BOMS:
        if raw.startswith(bom):
            try:
                return raw.decode(codec).removeprefix("\ufeff").encode("utf-8")
            except UnicodeDecodeError as exc:
                raise KbenchInputError(f"{path}: starts with a {codec.upper()} byte-order mark but is not "
                                       f"valid {codec.upper()} ({exc}). Save the file as UTF-8 CSV.") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 BOM is accepted silently
    return raw


def _parse_header(path: Path, raw: bytes) -> list[str]:
    import csv
    header_bytes = raw.split(b"\n", 1)[0].rstrip(b"\r")  # CRLF accepted silently (the CSV reader handles it)
    try:
        header = header_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KbenchInputError(f"{path}: not UTF-8 text ({exc}). Save the file as UTF-8 CSV.") from exc
    if not raw.strip():
        raise KbenchInputError(f"{path}: the file is empty; expected a header row with problem_id."
                               + FORMAT_HINT)
    if "problem_id" in header and "," not in header:
        delim = next((d for d in ("\t", ";", "|", " ") if d in header), None)
        if delim is not None:
            name = {"\t": "tab", ";": "semicolon", "|": "pipe", " ": "space"}[delim]
            raise KbenchInputError(
                f"{path}: the header is separated by {name}s ({header[:80]!r}); kbench expects commas. "
                "Write it with a comma delimiter (pandas: df.to_csv(path, index=False)); ';' is only "
                "used inside the ranking column.")
    names = [c.strip() for c in next(csv.reader([header]), [])]  # a quoted header ("problem_id") is fine
    if any(not n for n in names):
        raise KbenchInputError(f"{path}: the header {header[:120]!r} has an empty column name; "
                               "name every column (problem_id, ranking | kernel [, score])." + FORMAT_HINT)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise KbenchInputError(f"{path}: column(s) {dup} appear more than once in the header; "
                               "keep one of each.")
    return names


def read_predictions(path: str | Path) -> tuple[pd.DataFrame, str]:
    """Read a predictions CSV (never modifying it); returns (frame, sha256 of the file's bytes).

    Accepts a regular file, a symlink to one, a FIFO or a pipe; plain or gzip-compressed (detected
    from the content, not the name); UTF-8 with or without BOM, or UTF-16/32 with a BOM. At most
    :func:`max_predictions_bytes` bytes, before and after decompression.
    """
    path = Path(path)
    limit = max_predictions_bytes()
    raw = read_input_bytes(path, limit)
    digest = sha256_bytes(raw)
    raw = decode_csv_bytes(path, raw, limit)
    names = _parse_header(path, raw)
    import pyarrow as pa
    import pyarrow.csv as pacsv

    def parse(block_size: int | None):
        # pyarrow's reader: multi-threaded C++, every column kept as text (ids are never numbers)
        read = pacsv.ReadOptions(column_names=names, skip_rows=1,
                                 **({"block_size": block_size} if block_size else {}))
        return pacsv.read_csv(pa.py_buffer(raw), read_options=read,
                              parse_options=pacsv.ParseOptions(newlines_in_values=True),
                              convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in names},
                                                                   strings_can_be_null=False))
    try:
        try:
            table = parse(None)
        except pa.ArrowInvalid as exc:
            if "straddl" not in str(exc) and "block size" not in str(exc):
                raise
            table = parse(len(raw) + 1)  # a line longer than a block: one block holds the whole file
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise KbenchInputError(f"{path}: not a valid CSV file ({exc})." + FORMAT_HINT) from exc
    df = table.to_pandas()
    return df, digest


#: rankings are exploded in chunks of about this many rows, one thread per chunk
#: (pyarrow's kernels release the GIL, so the chunks run in parallel)
EXPLODE_CHUNK_ROWS = 8192


def _explode(values, vocabulary: np.ndarray, split: bool):
    """Explode ranking strings into (row index, kernel index, names) with pyarrow.

    ``values`` is a pyarrow string array with one ranking per row (``split``) or one kernel
    name per row. Names are matched against ``vocabulary`` in C++; kernel index -1 marks a
    name outside it (after trimming surrounding whitespace). ``names`` is the flat pyarrow
    array of names, for error messages.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.compute as pc
    if isinstance(values, pa.ChunkedArray):  # the CSV reader hands over several chunks
        values = values.combine_chunks()
    vocab = pa.array(list(vocabulary), type=pa.string())

    def one(start: int, stop: int):
        part = values.slice(start, stop - start)
        if split:
            lists = pc.split_pattern(part, ";")
            names, parents = lists.flatten(), pc.list_parent_indices(lists).to_numpy() + start
        else:
            names, parents = part, np.arange(start, stop)
        kidx = pc.fill_null(pc.index_in(names, value_set=vocab), -1).to_numpy(zero_copy_only=False)
        if (kidx < 0).any():  # only then pay for trimming every name: " a ; b" is accepted
            names = pc.utf8_trim_whitespace(names)
            kidx = pc.fill_null(pc.index_in(names, value_set=vocab), -1).to_numpy(zero_copy_only=False)
        return parents, kidx, names

    n = len(values)
    bounds = list(range(0, n, EXPLODE_CHUNK_ROWS)) + [n]
    spans = list(zip(bounds[:-1], bounds[1:])) or [(0, 0)]
    workers = min(len(spans), os.cpu_count() or 1)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(lambda span: one(*span), spans))
    else:
        parts = [one(*span) for span in spans]
    parents = np.concatenate([q[0] for q in parts]).astype(np.int64)
    kidx = np.concatenate([q[1] for q in parts]).astype(np.int64)
    names = pa.chunked_array([q[2] for q in parts], type=pa.string())  # combined only for error messages
    return parents, kidx, names


def _prediction_columns(preds, source: str) -> tuple[bool, str]:
    """Check the columns of a predictions table before any row is read: (long form?, the column of kernel names).

    These problems stop validation at once (nothing else can be read without the columns).
    """
    if not isinstance(preds, pd.DataFrame):
        raise KbenchInputError(f"{source}: expected a pandas DataFrame or a CSV path, got {type(preds).__name__}.")
    cols = set(preds.columns)
    if "problem_id" not in cols:
        import difflib
        close = difflib.get_close_matches("problem_id", list(map(str, cols)), n=1, cutoff=0.6)
        hint = f" Column {close[0]!r} looks like it: rename it to 'problem_id'." if close else ""
        raise KbenchInputError(
            f"{source}: missing required column 'problem_id' (columns: {sorted(map(str, cols))})."
            f"{hint} Run `kbench evaluate --explain` for the format.")
    long_form = "score" in cols and "kernel" in cols
    if not long_form and not ({"ranking", "kernel"} & cols):
        raise KbenchInputError(
            f"{source}: needs a 'ranking' column (kernels separated by ';'), a 'kernel' column, or "
            f"'kernel' + 'score' (long form); found {sorted(map(str, cols))}.")
    if "ranking" in cols and "kernel" in cols:
        # which one to score would be a guess: the two may disagree
        raise KbenchInputError(
            f"{source}: has both a 'ranking' and a 'kernel' column; keep one ('ranking' for the "
            "full preference order, 'kernel' for the top-1 only, or 'kernel' + 'score' without "
            "'ranking' for the long form)." + FORMAT_HINT)
    if not len(preds):
        raise KbenchInputError(f"{source}: has a header but no rows; give one row per problem."
                               + FORMAT_HINT)
    return long_form, "kernel" if (long_form or "ranking" not in cols) else "ranking"


def _unknown_kernels_message(names: np.ndarray, vocabulary, dataset: str) -> str:
    """One issue line for the kernel names not in the dataset's vocabulary, with the closest valid name of each."""
    bad_names = pd.unique(names)
    empties = int((names == "").sum())
    hints = "; ".join(f"{shown([b])[0]!r}{suggest(b[:200], vocabulary, n=1)}" for b in bad_names[:MAX_LISTED] if b)
    msg = f"{len([b for b in bad_names if b])} kernel name(s) not in the {dataset} vocabulary"
    msg += f": {hints}" if hints else ""
    if empties:
        msg += f" ({empties} empty name(s): check for ';;' or a trailing ';')"
    return msg + ". See ds.kernels for the valid names."


class Evaluator:
    """Scores kernel rankings on one part of a dataset split.

    Parameters
    ----------
    dataset : name, alias or :class:`kbench.Dataset`
    split : standard split name (``random``, ``networks``, ...)
    part : ``test`` (default), ``valid`` or ``train``
    reference : heuristic for speed-up: ``"default"`` (the dataset's reference heuristic, read
        from its ``heuristics`` table: the vendor heuristic on collected NVIDIA sets, the
        ``rules`` decision list on AMD sets; else its measured ``references``), ``None``, or a
        predictions DataFrame / CSV path.
    """

    def __init__(self, dataset="mi100", split: str = "random", part: str = "test", reference="default"):
        from kbench.dataset import load
        self.dataset = load(dataset) if isinstance(dataset, str) else dataset
        if part not in ("train", "valid", "test"):
            raise KbenchInputError(f"unknown part {part!r}; use train, valid or test.{suggest(part, ['train', 'valid', 'test'])}")
        self.split, self.part = split, part
        self.ids = self.dataset.split(split)[part]
        ds = self.dataset
        from kbench.metrics import index_in
        problems = ds.problems[index_in(ds.problems["problem_id"], pd.Series(self.ids)) >= 0].reset_index(drop=True)
        self.table: ScoringTable = build_scoring_table(problems, ds.runtimes, ds.kernels, ds.problems)
        self._pindex = pd.Index(self.table.problem_ids)
        self._kindex = pd.Index(self.table.kernels)
        self.reference_name, self._t_ref = self._resolve_reference(reference)

    # -- format ---------------------------------------------------------------
    @staticmethod
    def expected_format() -> str:
        """The predictions format and the scoring rules, as ``kbench evaluate --explain`` prints them."""
        return EXPECTED_FORMAT

    # -- reference heuristic ----------------------------------------------------
    def _resolve_reference(self, reference):
        if reference is None:
            return None, None
        if isinstance(reference, str) and reference == "default":
            heur = self.dataset.heuristics
            if heur is not None and len(heur):
                names = list(heur["heuristic"].unique())
                # the vendor's default choice (cuDNN heuristic mode A's first plan); on the AMD
                # sets the only recorded one, the `rules` decision list written by build-data
                name = self.dataset.info.get("reference_heuristic") or next(
                    (n for n in REFERENCE_PRIORITY if n in names), sorted(names)[0])
                # rows of this part; a kernel outside the vocabulary (a dataset cut by align or
                # subset) can never be the choice, so it is skipped as scoring would skip it
                h = heur[(self._pindex.get_indexer(heur["problem_id"]) >= 0) & (heur["heuristic"] == name)
                         & (self._kindex.get_indexer(heur["kernel"]) >= 0)]
                h = h.sort_values(["problem_id", "rank"])
                preds = h.groupby("problem_id", sort=False)["kernel"].agg(";".join).rename("ranking").reset_index()
                return name, self._reference_times(preds)
            refs = self.dataset.tables.get("references")
            if refs is not None and len(refs):
                # measured reference times (tile sets: the best cuDNN algorithm per layer)
                names = list(self.dataset.info.get("references", {})) or sorted(refs["reference"].unique())
                chosen = refs[refs["reference"] == names[0]].set_index("problem_id")["time_ms"]
                return names[0], chosen.reindex(self._pindex).to_numpy(dtype=np.float64)
            return None, None
        if isinstance(reference, (str, Path)):
            frame, _ = read_predictions(reference)
            return str(reference), self._reference_times(frame)
        return "custom", self._reference_times(reference)

    def _reference_times(self, preds: pd.DataFrame) -> np.ndarray:
        prob, kern, _ = self._to_long(preds, allow_partial=True, source="reference heuristic")
        ch = score_rankings(self.table, prob, kern)
        return np.where(ch.predicted, ch.t_choice, np.nan)

    # -- validation -----------------------------------------------------------
    def _to_long(self, preds: pd.DataFrame, allow_partial: bool, source: str = "predictions"):
        """Validate and turn predictions into (problem index, kernel index) rows in preference order.

        Collects every problem with the input and raises one KbenchInputError listing them all.
        """
        long_form, value_col = _prediction_columns(preds, source)
        issues: list[str] = []
        df = preds.copy()
        df["problem_id"] = df["problem_id"].astype(str).str.strip()
        values = df[value_col].astype("string")
        # whitespace around names is trimmed later, per name, in C++ (pyarrow); emptiness is
        # read from the arrow offsets, not from Python strings
        import pyarrow as pa
        import pyarrow.compute as pc
        value_arr = pa.array(values, type=pa.string())
        value_len = pc.fill_null(pc.binary_length(value_arr), 0).to_numpy(zero_copy_only=False)
        empty = df["problem_id"].isin(["", "nan", "None", "<NA>"]) | (value_len == 0)
        if long_form:
            score = pd.to_numeric(df["score"], errors="coerce")
            infinite = np.isinf(score.to_numpy(dtype=np.float64))
            if infinite.any():  # +-inf ties with itself: the order among such kernels would be arbitrary
                rows = (np.flatnonzero(infinite) + 2)[:MAX_LISTED].tolist()
                issues.append(f"{int(infinite.sum())} score(s) are infinite (file rows {rows}); "
                              "give finite numbers (negative scores are fine: higher = preferred).")
            empty |= score.isna() & ~infinite
        if empty.any():
            rows = (np.flatnonzero(empty.to_numpy()) + 2)[:MAX_LISTED].tolist()  # +2: header, 1-based
            issues.append(f"{int(empty.sum())} row(s) with an empty or NaN cell (file rows {rows}).")
        drop = empty.to_numpy() | (infinite if long_form else False)
        if drop.any():
            df, values = df[~drop], values[~drop]
            value_arr = value_arr.filter(pa.array(~drop))
            if long_form:
                score = score[~drop]
        if not long_form:
            dup = df["problem_id"].duplicated(keep=False)
            if dup.any():
                ex = shown(df.loc[dup, "problem_id"].unique()[:MAX_LISTED])
                issues.append(f"{int(df['problem_id'].duplicated().sum())} duplicated problem_id(s), e.g. {ex}; "
                              "give one row per problem.")
        pidx = self._pindex.get_indexer(df["problem_id"])
        unknown_mask = pidx < 0
        if unknown_mask.any():
            all_ids = pd.Index(self.dataset.problems["problem_id"])
            in_dataset = all_ids.get_indexer(df["problem_id"][unknown_mask]) >= 0
            other_part = int(in_dataset.sum())
            ex = shown(df["problem_id"][unknown_mask].unique()[:3])
            where = f" ({other_part} belong to other parts of split {self.split!r})" if other_part else ""
            if not allow_partial or other_part < unknown_mask.sum():
                issues.append(f"{int(unknown_mask.sum())} problem id(s) not in {self.dataset.name} "
                              f"{self.split}/{self.part}{where}, e.g. {ex}.")
        # explode the rankings into long rows
        if long_form:
            long = pd.DataFrame({"p": pidx, "kernel": values.to_numpy(), "score": score.to_numpy()})
            long = long.sort_values(["p", "score"], ascending=[True, False], kind="stable")
            prob, names = long["p"].to_numpy(), long["kernel"].astype(str).to_numpy()
        else:
            prob_parent, kidx, names = _explode(value_arr, self.table.kernels, split=value_col == "ranking")
            prob = pidx[prob_parent]
        if isinstance(names, np.ndarray):
            kidx = self._kindex.get_indexer(pd.Index(names))
        bad_k = kidx < 0
        if bad_k.any():
            names_arr = (names[bad_k] if isinstance(names, np.ndarray)
                         else np.asarray(names.combine_chunks().filter(pa.array(bad_k)).to_pylist(), dtype=object))
            issues.append(_unknown_kernels_message(names_arr, self.table.kernels, self.dataset.name))
        predicted = np.zeros(len(self._pindex), dtype=bool)
        predicted[pidx[pidx >= 0]] = True
        missing = int((~predicted).sum())
        if missing and not allow_partial:
            ex = self.table.problem_ids[~predicted][:3].tolist()
            issues.append(f"{missing} of {len(predicted)} problems of {self.split}/{self.part} have no prediction "
                          f"(coverage {predicted.mean():.1%}), e.g. {ex}; predict all of them or pass "
                          "--allow-partial to score what is there.")
        if issues:
            raise KbenchInputError(f"{source} is invalid:\n  - " + "\n  - ".join(issues))
        ok = (prob >= 0) & (kidx >= 0)
        return prob[ok], kidx[ok], predicted

    def validate(self, preds, allow_partial: bool = False) -> dict:
        """Check predictions without scoring; raises KbenchInputError listing every problem."""
        source = str(preds) if isinstance(preds, (str, Path)) else "predictions"
        frame = read_predictions(preds)[0] if isinstance(preds, (str, Path)) else preds
        _, _, predicted = self._to_long(frame, allow_partial, source=source)
        return {"rows": int(len(frame)), "problems_in_part": int(len(predicted)),
                "covered": int(predicted.sum()), "coverage": float(predicted.mean())}

    def lean_predictions(self, preds, keep: int = DEEPEST) -> pd.DataFrame:
        """``preds`` with each ranking cut to its first ``keep`` applicable candidates.

        No metric reads a ranking past its 30th applicable candidate (``DEEPEST``), so the cut
        predictions score exactly as the full ones: the leaderboard stores these. Problems keep
        their order; predictions without a ``ranking`` column are returned as they are.
        """
        frame = read_predictions(preds)[0] if isinstance(preds, (str, Path)) else preds
        if "ranking" not in frame.columns or {"kernel", "score"} <= set(frame.columns):
            return frame
        frame = frame[["problem_id", "ranking"]].reset_index(drop=True)
        rankings = frame["ranking"].astype(str).str.split(";")
        lengths = rankings.str.len().to_numpy()
        names = pd.Index(np.concatenate(rankings.to_numpy()) if len(frame) else np.zeros(0, dtype=object)).str.strip()
        row = np.repeat(np.arange(len(frame)), lengths)
        prob = self._pindex.get_indexer(frame["problem_id"].astype(str).str.strip())[row]
        kern = self._kindex.get_indexer(names)
        known = (prob >= 0) & (kern >= 0)
        kept = np.flatnonzero(known)[lean_rows(self.table, prob[known], kern[known], keep)]
        # problems of other parts or unknown names are not this part's to cut: keep those rows whole
        whole = np.isin(row, row[~known])
        kept = np.union1d(kept, np.flatnonzero(whole))
        lean = pd.Series(np.asarray(names, dtype=object)[kept]).groupby(row[kept], sort=True).agg(";".join)
        out = frame.copy()
        out["ranking"] = lean.reindex(np.arange(len(frame))).fillna(frame["ranking"]).to_numpy()
        return out

    # -- scoring ----------------------------------------------------------------
    def __call__(self, preds, *, allow_partial: bool = False, method: str | None = None,
                 predictions_path: str | None = None, predictions_sha256: str | None = None) -> EvaluationResult:
        if isinstance(preds, (str, Path)):
            predictions_path = str(preds)
            preds, predictions_sha256 = read_predictions(preds)
        prob, kern, predicted = self._to_long(preds, allow_partial, source=predictions_path or "predictions")
        choices = score_rankings(self.table, prob, kern)
        scored = predicted
        metrics = summarize(self.table, choices, scored, self._t_ref)
        n = int(scored.sum())
        counts = Counts(problems_in_part=len(predicted), predicted=int(predicted.sum()), scored=n,
                        coverage=float(predicted.mean()) if len(predicted) else 0.0,
                        choices_exact=int((choices.exact & scored).sum()),
                        choices_censored=int((choices.censored & scored).sum()),
                        failures=int((choices.failed & scored).sum()))
        bounds = {}
        if counts.choices_censored:
            bounds = {"lop_*, geomean_slowdown": "lower bound (censored choices timed at the last listed time)",
                      "within5, speedup_*": "upper bound", "top1, topk": "exact (a censored choice is never fastest)"}
        ds = self.dataset
        return EvaluationResult(
            kbench_version=__version__, method=method,
            dataset=DatasetRef(name=ds.name, version=ds.version, checksum=ds.checksum),
            split=self.split, part=self.part, reference=self.reference_name,
            predictions=PredictionsRef(path=predictions_path, sha256=predictions_sha256, rows=int(len(preds))),
            counts=counts, metrics=metrics, bounds=bounds)

    score = __call__


def evaluate_tuning(dataset, preds, solver: str = "ConvAsm1x1U", split: str = "random", part: str = "test",
                    allow_partial: bool = False, method: str | None = None):
    """Score predicted parameter tuples on a tuning dataset; returns a TuningResult record."""
    from kbench.dataset import load
    from kbench.records import TuningResult
    from kbench.tuning.metrics import score_tuning

    ds = load(dataset) if isinstance(dataset, str) else dataset
    path = sha = None
    if isinstance(preds, (str, Path)):
        path = str(preds)
        preds, sha = read_predictions(preds)
    if "problem_id" not in preds.columns:
        raise KbenchInputError(f"predictions: missing required column 'problem_id' (columns: {list(preds.columns)}).")
    ids = ds.split(split)[part]
    problems = ds.problems[ds.problems["problem_id"].isin(ids)]
    metrics = score_tuning(preds, ds.targets, solver, problems)
    if metrics.get("n_missing") and not allow_partial:
        raise KbenchInputError(
            f"predictions: {metrics['n_missing']} {solver} problems of {split}/{part} have no prediction; "
            "predict all of them or pass --allow-partial (missing ones count as wrong and invalid).")
    return TuningResult(
        kbench_version=__version__, method=method,
        dataset=DatasetRef(name=ds.name, version=ds.version, checksum=ds.checksum), split=split, part=part,
        solver=solver, predictions=PredictionsRef(path=path, sha256=sha, rows=int(len(preds))),
        metrics={k: v for k, v in metrics.items()})


__all__ = ["Evaluator", "evaluate_tuning", "read_predictions", "EXPECTED_FORMAT", "LOP_AT", "TOP_K"]
