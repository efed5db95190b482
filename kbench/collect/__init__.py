"""The cuDNN collector (``kbench collect ...``), one job per folder.

:mod:`.measure` (the problem corpus, the collector :mod:`.measure.cudnn`, tensor strides, ranks sharing a GPU,
the notes cache, the machine's environment); :mod:`.raw_store` (raw folders: writer, lock, shards, merging,
travelling copies); :mod:`.packaging` (a raw folder -> dataset tables and data card); :mod:`.label_retiming`
(re-timing the front-runners before a label is kept); :mod:`.studies` (figures about the measurement);
:mod:`.command` (the measuring subcommands, ``python -m kbench.collect``). Re-timing what is shipped (a
dataset's labels, a leaderboard entry) is :mod:`kbench.gpu_check`; the collector's diagnostic scripts are in
``tools/collect/`` and the device scripts in ``tools/device/`` (never imported from here).
"""
