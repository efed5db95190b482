"""Studies of the measurement, read from raw collector folders: the figures the data cards quote.

* :mod:`.scaling`: throughput and agreement of (multi-GPU) collections;
* :mod:`.validate_timing`: checks of the collector's timing method (some run on the GPU);
* :mod:`.sample`, :mod:`.retest`: the test-retest study (a sample to re-measure, and the comparison).
"""
