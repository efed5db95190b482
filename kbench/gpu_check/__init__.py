"""Re-timing on the GPU what kbench ships: a leaderboard entry's chosen plans (``kbench verify-on-gpu``)
and a packaged dataset's labels (``kbench collect verify-labels``). It reuses the collector and sits above
the datasets and the board it re-times.

* :mod:`.command`: ``kbench verify-on-gpu``: plan on a CPU, time on the GPU, score;
* :mod:`.plan`: which plans to time, in which order (pure);
* :mod:`.timing`: the GPU part, reusing the collector;
* :mod:`.live`: timing units, the one protocol, and the references decided on the GPU;
* :mod:`.score`: raw times to a :class:`kbench.scoring.records.VerificationRecord` (pure);
* :mod:`.shipped_labels`: the collector's verification pass run on a shipped dataset's labels;
* :mod:`.labels_command`: ``kbench collect verify-labels``, its command.
"""
