"""One writer per raw folder: a collector (or compaction) holds the folder's lock while it writes.

The lock is ``fcntl.flock`` on ``<folder>/.lock``, which holds the holder's pid,
host and start time for the message a second writer gets. The kernel drops a
flock when its process dies, however it dies (kill -9 included), so a dead
collector never leaves a lock behind: the file stays, the lock does not.

Where the file system has no flock (some network file systems), the lock is
an ``O_EXCL`` file ``<folder>/.lock.pid`` instead. That one can be left behind
by a killed process: a lock whose pid no longer runs on this host is stale and
is taken over (and said so); one held from another host is refused with the
path to delete once that host's collector is known to be gone.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path

from kbench.core.errors import KbenchInputError

LOCK = ".lock"
PID_LOCK = ".lock.pid"


def _holder_text(what: str) -> str:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"pid {os.getpid()} on host {socket.gethostname()} since {since}, a {what}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class FolderLock:
    """``with FolderLock(folder, "collector"):`` refuses a second writer of ``folder``."""

    def __init__(self, folder: str | Path, what: str = "collector", use_flock: bool = True):
        self.folder = Path(folder)
        self.what = what
        self.use_flock = use_flock
        self.fd: int | None = None
        self.pid_path: Path | None = None
        self.notes: list[str] = []  # e.g. a stale lock taken over

    def _refuse(self, holder: str, hint: str = "") -> None:
        raise KbenchInputError(
            f"{self.folder}: another kbench process is writing this folder ({holder or 'holder unknown'}). "
            "Two collectors never write into one folder: wait until it ends, or give this one another "
            f"--out (or --shard K/N, which writes its own shard folder).{hint}")

    def acquire(self) -> FolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.use_flock:
            fd = os.open(self.folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 500, 0).decode(errors="replace").strip()
                os.close(fd)
                self._refuse(holder)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                self.use_flock = False  # no flock on this file system
                return self.acquire()
            os.ftruncate(fd, 0)
            os.pwrite(fd, (_holder_text(self.what) + "\n").encode(), 0)
            os.fsync(fd)
            self.fd = fd
            return self
        path = self.folder / PID_LOCK
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                text = path.read_text(errors="replace").strip() if path.exists() else ""
                parts = text.split()
                pid = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
                host = parts[4] if len(parts) > 4 else None
                if host == socket.gethostname() and pid is not None and not _pid_alive(pid):
                    path.unlink(missing_ok=True)
                    self.notes.append(f"{path}: removed a stale lock of {text} (that process is gone)")
                    continue
                self._refuse(text, f" If that collector is known to be gone, delete {path}.")
            os.write(fd, (_holder_text(self.what) + "\n").encode())
            os.fsync(fd)
            os.close(fd)
            self.pid_path = path
            return self
        self._refuse(path.read_text(errors="replace").strip())
        return self  # not reached

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # the file stays: unlinking it would race a waiting locker
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
        if self.pid_path is not None:
            self.pid_path.unlink(missing_ok=True)
            self.pid_path = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def holder(folder: str | Path) -> str | None:
    """Who writes ``folder`` now (pid, host, since), or None when nobody holds its lock."""
    folder = Path(folder)
    if (folder / PID_LOCK).exists():
        return (folder / PID_LOCK).read_text(errors="replace").strip() or "unknown"
    if not (folder / LOCK).exists():
        return None
    fd = os.open(folder / LOCK, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 500, 0).decode(errors="replace").strip() or "unknown"
    except OSError:
        return None
    finally:
        os.close(fd)
    return None
