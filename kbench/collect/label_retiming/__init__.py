"""Label re-timing: the collector re-times each problem's front-runners before its label is kept.

* :mod:`.front_runners`: the verification pass itself (which plans, how often, when two readings disagree);
* :mod:`.apply`: its records read back and applied to raw plan records when packaging.

The same pass run on a shipped dataset's labels (``kbench collect verify-labels``) is
:mod:`kbench.gpu_check.shipped_labels`.
"""
