"""The cuDNN collector (``kbench collect ...``), grouped by job.

Measurement, here: :mod:`.corpus` (the problems), :mod:`.cudnn` (the collector),
:mod:`.gpu_turn` (ranks sharing a GPU), :mod:`.notes_cache`, :mod:`.environment`; raw folders: :mod:`.writer`,
:mod:`.lock`, :mod:`.shard`, :mod:`.merge`, :mod:`.travel`; packaging: :mod:`.package`,
:mod:`.card`. Label re-timing: :mod:`.label_retiming`. Figures about the measurement:
:mod:`.studies`. Re-timing a leaderboard entry on the GPU is :mod:`kbench.gpu_check`; the
collector's diagnostic scripts are in ``tools/collect/`` (never imported from here).
"""
