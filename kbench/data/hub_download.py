"""Downloading a kbench dataset from the Hugging Face Hub into the Hugging Face cache, verified.

The loading half of the Hub support, below :mod:`kbench.data.dataset` (whose ``load("hf://...")``
uses it); publishing is in :mod:`kbench.hub`, which re-exports these names.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
from pathlib import Path

from kbench.core.errors import DataIntegrityError, KbenchError, KbenchInputError
from kbench.core.identifiers import identifier_problem
from kbench.sources.dataset_files import sha256_file

HUB_FORMAT = 1
KBENCH_MANIFEST = "kbench_manifest.json"
DATA_DIR = "data"
#: the per-split copies of the tables for ``datasets`` (``kbench.load`` reads ``data/`` alone)
PARTS_DIR = "parts"
REPO_TYPE = "dataset"
LOGIN_HELP = ("log in with `hf auth login` (or `huggingface-cli login`), or set the HF_TOKEN "
              "environment variable to a token with write access (https://huggingface.co/settings/tokens)")
READ_LOGIN_HELP = "log in with `hf auth login` (or `huggingface-cli login`), or set HF_TOKEN"
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class HubError(KbenchError):
    """The Hub (or the network to it) failed; the message says what to retry."""

    exit_code = 1


# -- helpers ----------------------------------------------------------------------
def _hf():
    try:
        import huggingface_hub
    except ModuleNotFoundError as exc:  # optional dependency
        raise HubError("the Hugging Face Hub support needs huggingface_hub: "
                       "pip install 'kbench[hub]'") from exc
    return huggingface_hub


def _network_errors() -> tuple:
    """Exception types of a failed Hub call: HfHubHTTPError and requests' errors are OSErrors; httpx's are not."""
    errors = [OSError]
    for module in ("httpx2", "httpx"):  # huggingface_hub 2.x / 1.x transport
        try:
            errors.append(importlib.import_module(module).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _offline() -> bool:
    from huggingface_hub import constants
    return _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE") or bool(constants.HF_HUB_OFFLINE)


def _endpoint(endpoint: str | None) -> str | None:
    # huggingface_hub reads HF_ENDPOINT once at import; read it at call time too.
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    return endpoint.rstrip("/") if endpoint else None


def kbench_cache_dir() -> Path:
    """The kbench cache folder: ``$KBENCH_CACHE``, else ``$XDG_CACHE_HOME/kbench`` (``~/.cache/kbench``)."""
    if os.environ.get("KBENCH_CACHE"):
        return Path(os.environ["KBENCH_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "kbench"


def hub_cache_dir() -> Path:
    """Where Hub downloads are cached: the standard Hugging Face cache, which ``datasets`` shares.

    ``$KBENCH_CACHE/hub`` when ``KBENCH_CACHE`` is set (an override), else ``HF_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``huggingface_hub``'s default (``~/.cache/huggingface/hub``). The
    variables are read at each call, not only when ``huggingface_hub`` was imported.
    """
    if os.environ.get("KBENCH_CACHE"):
        return kbench_cache_dir() / "hub"
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    try:
        from huggingface_hub import constants
        return Path(constants.HF_HUB_CACHE).expanduser()
    except ImportError:
        return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "huggingface" / "hub"


def check_repo_id(repo_id: str) -> str:
    repo_id = str(repo_id).strip()
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or len(repo_id) > 96:
        raise KbenchInputError(
            f"invalid Hub repo id {repo_id!r}: expected ORG/NAME (letters, digits, '-', '_', '.'), "
            "e.g. my-org/kbench-mi100.")
    return repo_id


def _hub_failure(exc, what: str, retry: str, login: str = LOGIN_HELP) -> KbenchError:
    """A KbenchError for a failed Hub call: the client's own message plus what to retry."""
    from huggingface_hub.errors import HfHubHTTPError
    status = getattr(getattr(exc, "response", None), "status_code", None)
    detail = str(exc).strip().replace("\n\n", "\n")
    if isinstance(exc, HfHubHTTPError) and status in (401, 403):
        return KbenchInputError(f"{what}: the Hub refused the token (HTTP {status}): {detail}\n"
                                f"Check the token and its permissions, or {login}.")
    kind = f"the Hub answered HTTP {status}" if status else f"network error ({type(exc).__name__})"
    return HubError(f"{what}: {kind}: {detail}\n{retry}")


# -- load -------------------------------------------------------------------------
def _content_addressed(blob: Path) -> bool:
    """True when a cached blob still holds what the Hub sent: huggingface_hub names each blob by its
    content (sha256 for LFS files, the git blob sha1 for others), so a match proves the file intact."""
    try:
        data_sha256, git_sha1, size = hashlib.sha256(), hashlib.sha1(), blob.stat().st_size
        git_sha1.update(f"blob {size}\0".encode())
        with open(blob, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                data_sha256.update(chunk)
                git_sha1.update(chunk)
    except OSError:
        return False
    return blob.name in (data_sha256.hexdigest(), git_sha1.hexdigest())


def _drop_cached(path: Path) -> bool:
    """Remove a cached file that failed its check, so the next load refetches it; returns whether it did.

    Only files inside the Hub cache are removed, and never by following a symbolic link out of it:
    the snapshot entry is unlinked itself, and the blob it points to only when that blob lies in the
    cache's ``blobs`` folder and no longer matches its content address (a blob that still does is
    what the Hub sent, so the manifest, not the file, is at fault: it is kept).
    """
    cache = hub_cache_dir().resolve()
    if not path.is_symlink():
        inside = path.parent.resolve() / path.name
        if path.is_file() and inside.is_relative_to(cache) and not _content_addressed(path):
            path.unlink(missing_ok=True)
            return True
        return False
    target = Path(os.path.normpath(path.parent.resolve() / os.readlink(path)))
    blob = target if target.parent.name == "blobs" and target.is_relative_to(cache) else None
    if blob is not None and (blob.is_symlink() or not blob.is_file() or _content_addressed(blob)):
        return False
    path.unlink(missing_ok=True)  # the link itself, never what it points to
    if blob is not None:
        blob.unlink(missing_ok=True)
    return True


def _check_file(folder: Path, rel: str, meta: dict, where: str) -> None:
    path = folder / rel
    retry = ("The bad copy was removed from the Hub cache; load again to download it afresh. If this "
             "repeats, the repository's files were changed outside `kbench publish` (republish the dataset).")
    kept = ("The cached file is what the Hub sent (it matches its content address), so it was kept: the "
            f"repository's {KBENCH_MANIFEST} is wrong; republish the dataset with `kbench publish`.")
    if not path.is_file():
        raise DataIntegrityError(f"{where}: {rel} is listed in {KBENCH_MANIFEST} but missing from the "
                                 "download. Load again with network access to complete it.")
    size = path.stat().st_size
    if size != meta.get("bytes") or sha256_file(path) != meta.get("sha256"):
        dropped = _drop_cached(path)
        what = f"size {size} bytes, manifest says {meta.get('bytes')}" if size != meta.get("bytes") \
            else "sha256 does not match"
        raise DataIntegrityError(f"{where}: {rel}: {what} {KBENCH_MANIFEST} (corrupted download or altered "
                                 f"file). {retry if dropped else kept}")


def download_from_hub(repo_id: str, revision: str | None = None, *, token: str | None = None,
                      endpoint: str | None = None) -> tuple[Path, str | None]:
    """Download (once) and verify a kbench dataset published on the Hub.

    Returns the local dataset folder (its parquet files and ``manifest.json``) and the
    dataset's name; :func:`kbench.data.dataset.load` reads it.

    ``revision`` is a branch, tag or commit sha (default: main). Every file is checked against
    the repo's ``kbench_manifest.json``. ``parts/`` (the split copies for ``datasets``) is not
    downloaded. Cached in :func:`hub_cache_dir`; with ``HF_HUB_OFFLINE=1`` (or no network) it
    loads from that cache.
    """
    repo_id = check_repo_id(repo_id)
    hf = _hf()
    import huggingface_hub.errors as hf_errors
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
    # a file missing from the repo (RemoteEntryNotFoundError since huggingface_hub 1.0; its local twin differs)
    remote_missing = getattr(hf_errors, "RemoteEntryNotFoundError", hf_errors.EntryNotFoundError)

    endpoint = _endpoint(endpoint)
    offline = _offline()
    cache = hub_cache_dir()
    rev = revision or "main"
    where = f"hf://{repo_id}@{rev}"
    common = dict(repo_type=REPO_TYPE, cache_dir=str(cache), endpoint=endpoint, token=token,
                  local_files_only=offline)
    try:
        mpath = Path(hf.hf_hub_download(repo_id, KBENCH_MANIFEST, revision=revision, **common))
        commit = mpath.parent.name
        where = f"hf://{repo_id}@{commit}"
        try:
            kmanifest = json.loads(mpath.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            _drop_cached(mpath)
            raise DataIntegrityError(f"{where}: {KBENCH_MANIFEST} is not valid JSON ({exc}).") from exc
        if not isinstance(kmanifest, dict) or "kbench_hub_format" not in kmanifest \
                or not isinstance(kmanifest.get("files"), dict):
            raise KbenchInputError(f"{where}: {KBENCH_MANIFEST} is not a kbench manifest; this repo is not a "
                                   "kbench dataset (publish one with `kbench publish`).")
        hub_format, entries = kmanifest["kbench_hub_format"], kmanifest["files"]
        if isinstance(hub_format, bool) or not isinstance(hub_format, int) or hub_format < 1 \
                or not all(isinstance(m, dict) for m in entries.values()):
            raise DataIntegrityError(f"{where}: {KBENCH_MANIFEST} is damaged (kbench_hub_format "
                                     f"{str(hub_format)[:40]!r} is not a positive whole number, or a file entry "
                                     "is not an object with its sha256 and bytes); republish the dataset with "
                                     "`kbench publish`.")
        if hub_format > HUB_FORMAT:
            raise KbenchInputError(f"{where}: published with a newer kbench (hub format "
                                   f"{kmanifest['kbench_hub_format']}, this kbench reads {HUB_FORMAT}); "
                                   "upgrade kbench.")
        wanted = sorted(p for p in kmanifest["files"] if not str(p).startswith(f"{PARTS_DIR}/"))
        if f"{DATA_DIR}/manifest.json" not in wanted or any(".." in p or p.startswith("/") for p in wanted) \
                or identifier_problem(kmanifest.get("name", "unnamed")) is not None:
            raise DataIntegrityError(f"{where}: {KBENCH_MANIFEST} does not list {DATA_DIR}/manifest.json "
                                     "(or lists unsafe paths, or its name is not an identifier); republish the dataset with `kbench publish`.")
        folder = Path(hf.snapshot_download(repo_id, revision=commit, allow_patterns=wanted, **common))
    except LocalEntryNotFoundError as exc:  # first: older huggingface_hub derive it from EntryNotFoundError
        if offline:
            raise KbenchInputError(f"hf://{repo_id}@{rev} is not in the Hub cache ({cache}) and "
                                   "HF_HUB_OFFLINE is set: load it once with network access first.") from exc
        raise HubError(f"hf://{repo_id}@{rev}: cannot reach the Hub and it is not in the Hub cache "
                       f"({cache}): {exc}\nRetry with network access.") from exc
    except (remote_missing, RepositoryNotFoundError, RevisionNotFoundError) as exc:
        if isinstance(exc, RevisionNotFoundError):
            raise KbenchInputError(f"hf://{repo_id}: revision {rev!r} not found (a branch, tag or commit sha "
                                   "of the dataset repo).") from exc
        if isinstance(exc, RepositoryNotFoundError):
            raise KbenchInputError(f"hf://{repo_id}: no such dataset repo on the Hub, or it is private and "
                                   f"you are not logged in ({READ_LOGIN_HELP}).") from exc
        raise KbenchInputError(f"hf://{repo_id}@{rev}: no {KBENCH_MANIFEST}; this repo is not a kbench "
                               "dataset (publish one with `kbench publish`).") from exc
    except _network_errors() as exc:
        raise _hub_failure(exc, f"downloading hf://{repo_id}@{rev} failed",
                           "Nothing was added to the Hub cache for the failed files; retry the load.",
                           READ_LOGIN_HELP) from exc

    for rel in wanted:
        _check_file(folder, rel, kmanifest["files"][rel], where)
    return folder / DATA_DIR, kmanifest.get("name")
