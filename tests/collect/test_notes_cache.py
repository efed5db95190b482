"""The notes cache: numerical notes per (direction, dtype, layout, engine), probed again on a schedule."""

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbench.collect.measure import cudnn
from kbench.collect.measure.notes_cache import NotesCache, engine_of, notes_table

P = {"direction": "F", "dtype": "FP16", "layout": "NHWC"}


def test_engine_of_reads_the_plan_name():
    assert engine_of("eng67_k2=5_k13=0") == 67
    assert engine_of("eng0") == 0
    assert engine_of("eng12x_k2=1") is None and engine_of("torch_choice") is None


def test_lookup_needs_every_plan_known_and_checks_every_nth_served_problem():
    cache = NotesCache(check_every=3)
    assert cache.lookup(P, ["eng1_k2=1"]) == (None, False)  # nothing known yet
    assert cache.learn(P, {"eng1_k2=1": {"TENSOR_CORE"}, "eng2": set()}) == 0
    # another knob setting of engine 1 shares its notes; engine 3 is unknown
    assert cache.lookup(P, ["eng1_k2=7", "eng3"]) == (None, False)
    assert cache.lookup({**P, "dtype": "BF16"}, ["eng1_k2=7"]) == (None, False)  # other dtype, other key
    served = [cache.lookup(P, ["eng1_k2=7", "eng2"]) for _ in range(6)]
    assert served[0][0] == {"eng1_k2=7": {"TENSOR_CORE"}, "eng2": set()}
    assert [check for _, check in served] == [False, False, True, False, False, True]
    assert cache.served == 6


def test_a_probe_that_disagrees_drops_the_key_for_good():
    cache = NotesCache()
    cache.learn(P, {"eng1": {"TENSOR_CORE"}, "eng2": {"WINOGRAD"}})
    assert cache.learn(P, {"eng1": {"TENSOR_CORE"}, "eng2": {"WINOGRAD", "TENSOR_CORE"}}) == 1
    assert cache.lookup(P, ["eng2"]) == (None, False)
    assert cache.learn(P, {"eng2": {"WINOGRAD"}}) == 0  # a dropped key is not learnt again
    assert cache.lookup(P, ["eng2"]) == (None, False)
    assert cache.lookup(P, ["eng1"])[0] == {"eng1": {"TENSOR_CORE"}}


@given(st.lists(st.tuples(st.sampled_from(["F", "B", "W"]), st.integers(0, 5),
                          st.frozensets(st.sampled_from(cudnn.NOTE_NAMES), max_size=3)), max_size=40))
def test_the_cache_never_serves_notes_other_than_every_probe_said(probes):
    """Whatever sequence of probes: a served note set is the one every probe of that key gave."""
    cache = NotesCache()
    said: dict[tuple, set] = {}
    for direction, engine, notes in probes:
        p = {**P, "direction": direction}
        cache.learn(p, {f"eng{engine}_k1=0": set(notes)})
        said.setdefault((direction, engine), set()).add(notes)
    for (direction, engine), sets in said.items():
        got, _ = cache.lookup({**P, "direction": direction}, [f"eng{engine}"])
        if len(sets) == 1:
            assert got == {f"eng{engine}": set(next(iter(sets)))}
        else:
            assert got is None


def _records():
    problems = pd.DataFrame({"key": ["a", "b", "c"], "direction": ["F", "F", "B"], "dtype": ["FP16"] * 3,
                             "layout": ["NHWC"] * 3})
    plans = pd.DataFrame({
        "key": ["a", "a", "b", "b", "c", "c"],
        "plan": ["eng1_k2=1", "eng2", "eng1_k2=3", "eng2", "eng1", "eng2"],
        "numeric_notes": ["TENSOR_CORE;WINOGRAD", "", "WINOGRAD;TENSOR_CORE", "FFT", None, "FFT"]})
    return problems, plans


def test_notes_table_counts_note_sets_per_key():
    table = notes_table(*_records()).set_index(["direction", "engine"])
    # engine 1 on F: the same set in two orders; engine 2 on F: '' and 'FFT' (two sets); the None row is unread
    assert table.loc[("F", 1), "note_sets"] == 1 and table.loc[("F", 1), "notes"] == "TENSOR_CORE;WINOGRAD"
    assert table.loc[("F", 2), "note_sets"] == 2 and table.loc[("F", 2), "records"] == 2
    assert ("B", 1) not in table.index and table.loc[("B", 2), "notes"] == "FFT"


def test_seed_learns_consistent_keys_and_drops_the_others():
    cache = NotesCache()
    assert cache.seed(*_records()) == 2  # (F, 1) and (B, 2); (F, 2) had two sets
    assert cache.lookup(P, ["eng1_k9=9"])[0] == {"eng1_k9=9": {"TENSOR_CORE", "WINOGRAD"}}
    assert cache.lookup(P, ["eng2"]) == (None, False)
    assert cache.learn(P, {"eng2": set()}) == 0 and cache.lookup(P, ["eng2"]) == (None, False)


def test_seed_from_a_raw_folder(tmp_path):
    from kbench.collect.raw_store.writer import RawWriter
    writer = RawWriter(tmp_path, batch_size=10)
    problems, plans = _records()
    for row in problems.to_dict("records"):
        writer.add(row, plans[plans.key == row["key"]].to_dict("records"))
    writer.flush()
    cache = NotesCache()
    assert cudnn.seed_notes_cache(cache, [tmp_path, tmp_path / "missing"]) == 2
    assert cudnn.seed_notes_cache(None, [tmp_path]) is None


# ---------------------------------------------------------------- the collector's use of it (no GPU)
def _collector(monkeypatch, probe_answers):
    col = cudnn.CudnnCollector.__new__(cudnn.CudnnCollector)
    col.opt, col.notes_reliable, col.notes_cache = cudnn.Options(), None, NotesCache(check_every=2)
    calls = []

    def fake_probe(p, x, w, y, names, all_modes):
        calls.append(list(names))
        return {n: set(probe_answers[n]) for n in names}
    monkeypatch.setattr(col, "_note_flags", fake_probe, raising=False)
    return col, calls


def test_collector_probes_first_then_serves_from_the_cache_with_checks(monkeypatch):
    col, calls = _collector(monkeypatch, {"eng1": {"TENSOR_CORE"}, "eng2": set()})
    col.notes_cache.learn(P, {"eng1": {"TENSOR_CORE"}, "eng2": set()})  # seeded from earlier runs
    recs = []
    for _ in range(5):
        rec = {}
        flags = col._numeric_notes(P, rec, None, None, None, ["eng1", "eng2"], [])
        assert flags == {"eng1": {"TENSOR_CORE"}, "eng2": set()}
        col.notes_reliable = True  # what measure sets after the first problem with notes
        recs.append(rec)
    # the process's first problem is probed (a 'check': the cache knew it), then every 2nd served one
    assert [r["notes_source"] for r in recs] == ["check", "check", "cache", "check", "cache"]
    assert [r["notes_cache_diff"] for r in recs] == [0, 0, None, 0, None]
    assert len(calls) == 3 and all(r["notes_error"] == "" for r in recs)


def test_collector_records_a_disagreeing_check_and_then_probes(monkeypatch):
    col, calls = _collector(monkeypatch, {"eng1": {"TENSOR_CORE", "DOWN_CONVERT_INPUTS"}})
    col.notes_cache.learn(P, {"eng1": {"TENSOR_CORE"}})
    col.notes_reliable = True
    sources, diffs = [], []
    for _ in range(4):
        rec = {}
        assert col._numeric_notes(P, rec, None, None, None, ["eng1"], []) in (
            {"eng1": {"TENSOR_CORE"}}, {"eng1": {"TENSOR_CORE", "DOWN_CONVERT_INPUTS"}})
        sources.append(rec["notes_source"])
        diffs.append(rec["notes_cache_diff"])
    assert sources == ["cache", "check", "probe", "probe"] and diffs == [None, 1, None, None]


@pytest.mark.parametrize("options", [cudnn.Options(notes_cache=False), cudnn.Options(notes=False)])
def test_without_the_cache_every_problem_is_probed(monkeypatch, options):
    col, calls = _collector(monkeypatch, {"eng1": set()})
    col.opt = options
    col.notes_cache = NotesCache() if options.notes and options.notes_cache else None
    col.notes_reliable = True
    for _ in range(3):
        rec = {}
        col._numeric_notes(P, rec, None, None, None, ["eng1"], [])
    assert len(calls) == (3 if options.notes else 0)
    assert rec["notes_source"] == ("probe" if options.notes else "")


def test_card_line_counts_keys_and_sources_by_hand():
    from kbench.collect.packaging.card import notes_line
    problems, plans = _records()
    # keys (F, 1), (F, 2), (B, 2): 5 plan records read (c's eng1 was not), (F, 2) with two sets
    head = ("* Numerical notes per (direction, dtype, layout, engine): 3 keys over 5 plan records whose notes "
            "were read, 1 with more than one note set.")
    assert notes_line(problems, plans) == head + " Every problem's notes were read by the filter probes."
    problems = problems.assign(notes_source=["probe", "check", "cache"], notes_cache_diff=[None, 2, None])
    assert notes_line(problems, plans) == head + (
        " Notes read by the filter probes in 2 problem-directions (1 of them checks of the notes cache), taken "
        "from the cache (`kbench.collect.notes_cache`) in 1; plans whose checked notes differed from the cache's: 2.")
