"""Two `kbench leaderboard build` runs on one tree at once: the output is one build's or the other's."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from advkit import adversarial
from lbtoy import make_toy, run_fakes, store

from kbench.leaderboard.site import build, render


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("conc")
    run_fakes(tmp / "results", tmp / "leaderboard")
    return tmp / "leaderboard"


def _build_twice(board, cards):
    for _ in range(2):
        build(board, cards)


@adversarial("concurrency", "accepted")
def test_two_builds_at_once_leave_one_builds_output(board, tmp_path):
    ds = make_toy()
    store.register_dataset(ds)
    try:
        # two builds that differ: each renders its own data card into site/toy.html and site/data_cards/
        cards = {}
        for name in ("a", "b"):
            cards[name] = tmp_path / f"cards-{name}"
            cards[name].mkdir()
            (cards[name] / "toy.md").write_text(f"# Toy card {name}\n\nbuild {name}\n")
        wanted = {name: render(board, cards[name]) for name in cards}
        assert wanted["a"]["site/toy.html"] != wanted["b"]["site/toy.html"]
        # two processes (forked: they inherit the registered toy dataset), as two shells would run them
        import multiprocessing
        fork = multiprocessing.get_context("fork")
        procs = [fork.Process(target=_build_twice, args=(board, cards[n])) for n in ("a", "b")]
        for p in procs:
            p.start()
        for p in procs:
            p.join(300)
        assert [p.exitcode for p in procs] == [0, 0]
        on_disk = {str(p.relative_to(board)): p.read_bytes() for p in (board / "site").rglob("*") if p.is_file()}
        on_disk["README.md"] = (board / "README.md").read_bytes()
        assert on_disk == wanted["a"] or on_disk == wanted["b"]
        assert not [p.name for p in board.iterdir() if p.name.startswith(".")]  # no staging folder left
    finally:
        store.unregister_dataset(ds.name)


@adversarial("concurrency", "accepted",
             limit="while `leaderboard build` swaps site/ (two renames), a reader can find site/ missing for "
                   "an instant; it never finds a mix of two builds")
def test_a_reader_during_builds_sees_whole_pages(board):
    ds = make_toy()
    store.register_dataset(ds)
    try:
        stop, seen = threading.Event(), []

        def read():
            while not stop.is_set():
                try:
                    seen.append((board / "site" / "index.html").read_bytes())
                except FileNotFoundError:
                    seen.append(None)
        reader = threading.Thread(target=read)
        reader.start()
        for _ in range(2):
            build(board)
        stop.set()
        reader.join(30)
        whole = render(board)["site/index.html"]
        assert {s for s in seen if s is not None} <= {whole}
    finally:
        store.unregister_dataset(ds.name)


@adversarial("concurrency", "accepted", fixed=True)
def test_a_build_that_dies_mid_write_leaves_the_previous_output_whole(board, monkeypatch):
    """Before issue 22 a build deleted site/ and then wrote it file by file: killed half way, it left
    half a site. Now the new site is staged and renamed, so the old one stays until the new is whole."""
    import pathlib
    ds = make_toy()
    store.register_dataset(ds)
    try:
        build(board)
        before = {str(p.relative_to(board)): p.read_bytes() for p in board.rglob("*")
                  if p.is_file() and (p.name == "README.md" or "site" in p.relative_to(board).parts)}
        real_write, calls = pathlib.Path.write_bytes, []

        def dying_write(self, data):
            calls.append(self)
            if len(calls) == 3:
                raise KeyboardInterrupt("killed")  # as a signal would, mid-build
            return real_write(self, data)
        monkeypatch.setattr(pathlib.Path, "write_bytes", dying_write)
        with pytest.raises(KeyboardInterrupt):
            build(board, None)
        monkeypatch.undo()
        after = {str(p.relative_to(board)): p.read_bytes() for p in board.rglob("*")
                 if p.is_file() and (p.name == "README.md" or "site" in p.relative_to(board).parts)}
        assert after == before
        assert not [p.name for p in board.iterdir() if p.name.startswith(".")]  # staging removed
    finally:
        store.unregister_dataset(ds.name)
