"""``tools/device/device_tree.sh``: thinning the tree for a GPU-machine call loses nothing.

The script runs on a small git repository laid out like kbench's: 'out' must leave exactly the
collector's needs (code, corpora, the datasets named), 'size' must count what would travel, and
'back' must restore every file byte for byte.
"""

import hashlib
import subprocess
from pathlib import Path

from kbench.sources.dataset_files import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "device" / "device_tree.sh"
FILES = {  # path -> content; sizes differ so that 'size' sums can be checked by hand
    "README.md": b"k" * 10,
    "tools/device/run_on_device.sh": b"#!" * 50,
    "kbench/datasets/h200/runtimes.parquet": b"h" * 300,
    "kbench/datasets/mi100/runtimes.parquet": b"m" * 4000,
    "raw/h100/corpus.csv.gz": b"c" * 7,
    "raw/h200/autotune/problems.csv.gz": b"a" * 20,
    "raw/h100/plans-0000.parquet": b"p" * 5000,
    "raw/h200/verify/xgboost-plans/plan.json.gz": b"v" * 600,
    "leaderboard/h200/random/oracle/preds.csv.gz": b"l" * 7000,
    "bench/results/latency.json": b"{}",
    "experiments/results/old.md": b"r" * 40,
}
KEPT = ["README.md", "tools/device/run_on_device.sh", "kbench/datasets/h200/runtimes.parquet",
        "raw/h100/corpus.csv.gz", "raw/h200/autotune/problems.csv.gz"]


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for rel, content in FILES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(content)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    return repo


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, capture_output=True, text=True)


def _digest(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in repo.rglob("*") if p.is_file() and ".git" not in p.relative_to(repo).parts}


def test_out_keeps_what_the_collector_needs_and_back_restores_every_byte(tmp_path):
    repo, stash = _repo(tmp_path), tmp_path / "stash"
    before = _digest(repo)

    out = _run(repo, "out", str(stash), "h200")
    assert out.returncode == 0, out.stderr
    # and the manifest that names the commit the copy travels at (kbench.scoring.environment.copy_state)
    assert sorted(_digest(repo)) == sorted([*KEPT, ".kbench-source"])
    assert (repo / ".kbench-source").read_text().startswith("commit ")
    assert f"moved {len(FILES) - len(KEPT)} files" in out.stdout

    carried = repo / ".gpu"  # ignored, as carried folders are (.git/info/exclude)
    carried.mkdir()
    (carried / "shard.parquet").write_bytes(b"s" * 123)
    (repo / ".git" / "info" / "exclude").write_text("/.gpu/\n")
    # kept files 10 + 100 + 300 + 7 + 20 = 437 bytes and the manifest, then the carried file (123)
    manifest = (repo / ".kbench-source").stat().st_size
    assert _run(repo, "size").stdout.startswith(f"{437 + manifest} bytes travel")
    assert _run(repo, "size", ".gpu").stdout.startswith(f"{437 + manifest + 123} bytes travel")
    (carried / "shard.parquet").unlink()
    carried.rmdir()

    back = _run(repo, "back", str(stash))
    assert back.returncode == 0, back.stderr
    assert _digest(repo) == before
    assert not stash.exists()


def test_refusals_move_nothing(tmp_path):
    repo, stash = _repo(tmp_path), tmp_path / "stash"
    before = _digest(repo)

    inside = _run(repo, "out", str(repo / "stash"))
    assert inside.returncode == 2 and "inside the repository" in inside.stderr
    assert _run(repo, "out").returncode == 2
    assert _digest(repo) == before

    assert _run(repo, "out", str(stash)).returncode == 0
    (repo / "experiments" / "results").mkdir(parents=True, exist_ok=True)
    (repo / "experiments" / "results" / "old.md").write_bytes(b"a newer file")  # back must not overwrite it
    clash = _run(repo, "back", str(stash))
    assert clash.returncode == 2 and "experiments/results/old.md exists already" in clash.stderr
    assert (repo / "experiments" / "results" / "old.md").read_bytes() == b"a newer file"
    assert (stash / "experiments" / "results" / "old.md").read_bytes() == FILES["experiments/results/old.md"]
