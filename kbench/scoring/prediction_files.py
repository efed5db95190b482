"""Reading and defending predictions files: every way a file can be wrong becomes one clear error.

A predictions file is read without ever being modified: its bytes (a regular file, a FIFO or a
pipe, at most :func:`max_predictions_bytes`), gunzipped and transcoded to UTF-8 where needed,
its header checked in linear time (at most :data:`MAX_COLUMNS` columns) and its rows parsed by
pyarrow with every column kept as text.
"""

from __future__ import annotations

import csv
import difflib
import errno
import gzip
import hashlib
import io
import os
import stat
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from kbench.core.errors import KbenchInputError, suggest

MAX_LISTED = 5  # how many offending ids/names an error message shows


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
            fix = ("a leaderboard preds.parquet (a seed column, list-valued rankings) with `kbench record csv "
                   "PATH --seed 0 --out preds.csv`; another table with problem_id and a ';'-joined ranking "
                   "with pandas.read_parquet(path).to_csv('preds.csv', index=False)" if magic == b"PAR1"
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


#: the most columns a predictions header may have (a real file has 2 to 3; a tuning file one per
#: parameter): a wider header is refused before its names are compared
MAX_COLUMNS = 1000


def _parse_header(path: Path, raw: bytes) -> list[str]:
    """The column names of the header row, checked in time linear in its length."""
    header_bytes = raw.split(b"\n", 1)[0].rstrip(b"\r")  # CRLF accepted silently (the CSV reader handles it)
    if b"\r" in header_bytes:
        raise KbenchInputError(f"{path}: lines end with a carriage return only (CR, old Mac style); kbench reads "
                               "LF or CRLF line endings. Convert the file: tr '\\r' '\\n' < IN > OUT.")
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
    if len(names) > MAX_COLUMNS:
        raise KbenchInputError(f"{path}: the header has {len(names):,} columns; a predictions file has at most "
                               f"{MAX_COLUMNS:,} (problem_id, ranking | kernel [, score]). Check that it is a "
                               "predictions file with one header row." + FORMAT_HINT)
    if any(not n for n in names):
        raise KbenchInputError(f"{path}: the header {header[:120]!r} has an empty column name; "
                               "name every column (problem_id, ranking | kernel [, score])." + FORMAT_HINT)
    dup = sorted(name for name, count in Counter(names).items() if count > 1)
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


def prediction_columns(preds, source: str) -> tuple[bool, str]:
    """Check the columns of a predictions table before any row is read: (long form?, the column of kernel names).

    These problems stop validation at once (nothing else can be read without the columns).
    """
    if not isinstance(preds, pd.DataFrame):
        raise KbenchInputError(f"{source}: expected a pandas DataFrame or a CSV path, got {type(preds).__name__}.")
    cols = set(preds.columns)
    if "problem_id" not in cols:
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


def unknown_kernels_message(names: np.ndarray, vocabulary, dataset: str) -> str:
    """One issue line for the kernel names not in the dataset's vocabulary, with the closest valid name of each."""
    bad_names = pd.unique(names)
    empties = int((names == "").sum())
    hints = "; ".join(f"{shown([b])[0]!r}{suggest(b[:200], vocabulary, n=1)}" for b in bad_names[:MAX_LISTED] if b)
    msg = f"{len([b for b in bad_names if b])} kernel name(s) not in the {dataset} vocabulary"
    msg += f": {hints}" if hints else ""
    if empties:
        msg += f" ({empties} empty name(s): check for ';;' or a trailing ';')"
    return msg + ". See ds.kernels for the valid names."
