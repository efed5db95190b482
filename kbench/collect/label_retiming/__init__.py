"""Label re-timing: the collector re-times each problem's front-runners before its label is kept.

* :mod:`.front_runners`: the verification pass itself (which plans, how often, when two readings disagree);
* :mod:`.shipped`: ``kbench collect verify-labels``, the same pass run on a shipped dataset's labels;
* :mod:`.apply`: its records read back and applied to raw plan records when packaging.
"""
