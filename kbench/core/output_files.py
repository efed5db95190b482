"""Writing output files safely: never over an input, never half written.

Every command that writes a file the user named checks it with :func:`check_output` (refusing a
path that is one of its inputs, compared by device and inode, so a hard link or a symbolic link
to an input is caught too) and writes it with :func:`atomic_write_bytes` (a temporary file in the
same folder, then ``os.replace``), so a reader, a second writer or a killed run never sees a
file half written.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from kbench.core.errors import KbenchEnvironmentError, KbenchError, KbenchInputError

#: errors of the machine, not of the input: a full disk, a read-only or forbidden folder (exit code 1)
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def printable_path(path) -> str:
    """``path`` as text that can always be printed and stored as JSON (undecodable bytes shown as \\xNN)."""
    return os.fsencode(str(path)).decode("utf-8", errors="backslashreplace")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(out, inputs=(), option: str = "the output") -> Path:
    """Refuse an output path that would overwrite an input or cannot hold a file; returns it as a Path.

    ``inputs`` are the paths the command reads (missing ones and None are ignored). The
    comparison is by device and inode (``os.path.samefile``), which also catches hard links.
    """
    out = Path(out)
    shown = printable_path(out)
    for given in inputs:
        if given is None:
            continue
        if _same_file(out, Path(given)):
            raise KbenchInputError(f"{option} {shown} is the input file {printable_path(given)} (the same file, "
                                   "perhaps through a link); inputs are never overwritten: choose another path.")
        if Path(given).is_dir() and _within(out, Path(given)):
            raise KbenchInputError(f"{option} {shown} lies inside the input folder {printable_path(given)}; "
                                   "inputs are never modified: write it elsewhere.")
    try:
        st = os.stat(out)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise KbenchInputError(f"{option} {shown}: a part of the path is a file, not a folder; "
                               "choose a path in an existing folder.") from None
    except OSError as exc:
        raise KbenchInputError(f"{option} {shown}: cannot be used ({exc.strerror}).") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise KbenchInputError(f"{option} {shown} is a folder; give a file path inside it "
                               f"(e.g. {shown.rstrip('/')}/result.json).")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise KbenchInputError(f"{option} {shown} is not a regular file (a device, pipe or socket); "
                               "give the path of a file to write.")
    parent = out.parent
    for folder in (parent, *parent.parents):
        if folder.exists():
            if not folder.is_dir():
                raise KbenchInputError(f"{option} {shown}: {printable_path(folder)} is a file, not a folder; "
                                       "choose a path in a folder.")
            break
    return out


def _within(path: Path, folder: Path) -> bool:
    """True when ``path`` (existing or not) is ``folder`` or lies under it, links resolved."""
    try:
        resolved, root = path.resolve(), folder.resolve()
    except (OSError, RuntimeError):
        return False
    return resolved == root or resolved.is_relative_to(root)


def check_output_folder(out, inputs=(), option: str = "--out") -> Path:
    """Refuse an output folder that is, holds or lies inside one of the input paths; returns it as a Path."""
    out = Path(out)
    for given in inputs:
        if given is None:
            continue
        given = Path(given)
        if _within(out, given) or _within(given, out):
            raise KbenchInputError(f"{option} {printable_path(out)} overlaps the input {printable_path(given)} "
                                   "(one holds the other); inputs are never modified: write it elsewhere.")
    if out.exists() and not out.is_dir():
        raise KbenchInputError(f"{option} {printable_path(out)} is a file; give a folder path.")
    return out


def _file_mode(path: Path) -> int:
    """The permission bits ``path`` keeps (an existing file's), else a new file's (0o666 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process umask, read without changing it where Linux shows it (os.umask sets it to read it)."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)
        os.umask(umask)
        return umask


def atomic_write_bytes(path, data: bytes) -> None:
    """Write a file so that a reader (or a killed run) never sees it half written.

    The data goes to a temporary file beside ``path``, is flushed to disk, and replaces ``path``
    in one ``os.replace``; a failure (a full disk, no permission) leaves ``path`` as it was and
    becomes a KbenchInputError naming it.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, _file_mode(path))  # mkstemp makes the file private: give it a normal file's mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise write_failure(path, exc, "the file") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def write_failure(path, exc: OSError, what: str = "the file") -> KbenchError:
    """The error for an ``OSError`` while writing ``what`` at ``path``: a full disk or a read-only folder is
    the machine's (exit 1), anything else (a name too long, a file in the way) the input's (exit 2)."""
    why = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
    error = KbenchEnvironmentError if exc.errno in ENVIRONMENT_ERRNOS else KbenchInputError
    fix = ("free some space and run it again" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
           else "make the folder writable or choose another" if exc.errno in ENVIRONMENT_ERRNOS
           else "choose another path")
    return error(f"{printable_path(path)}: cannot write {what} ({why}); nothing was written there: {fix}.")


def os_failure(exc: OSError) -> KbenchError | None:
    """The user-facing error for an ``OSError`` that escaped a command, when it is the machine's (a full
    disk, a read-only folder) or a path's (a name too long, a file where a folder should be), else None."""
    fixes = {errno.ENAMETOOLONG: ("a name in the path is too long", "use a shorter name", KbenchInputError),
             errno.ENOTDIR: ("a part of the path is a file, not a folder", "check the path", KbenchInputError),
             errno.EISDIR: ("it is a folder, not a file", "give the path of a file", KbenchInputError)}
    if exc.errno in fixes:
        why, fix, error = fixes[exc.errno]
    elif exc.errno in ENVIRONMENT_ERRNOS:
        why = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
        fix = "free some space" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "make the folder writable"
        error = KbenchEnvironmentError
    else:
        return None
    where = printable_path(exc.filename) if exc.filename is not None else "a file"
    where = where if len(where) <= 200 else where[:200] + f"… ({len(where):,} characters)"
    return error(f"{where}: {why}; {fix} and run the command again (an interrupted write leaves the previous "
                 "file as it was).")


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


__all__ = ["atomic_write_bytes", "atomic_write_text", "check_output", "check_output_folder", "os_failure",
           "printable_path", "write_failure"]
