"""Re-timing a leaderboard entry's chosen plans on the GPU (``kbench verify-on-gpu``).

* :mod:`.command`: the command: plan on a CPU, time on the GPU, score;
* :mod:`.plan`: which plans to time, in which order (pure);
* :mod:`.timing`: the GPU part, reusing the collector;
* :mod:`.live`: timing units, the one protocol, and the references decided on the GPU;
* :mod:`.score`: raw times to a :class:`kbench.scoring.records.VerificationRecord` (pure).
"""
