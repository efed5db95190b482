"""Measurement: the problem corpus, the cuDNN collector (:mod:`.cudnn`), tensor strides, ranks taking turns at a
GPU, the numerical-notes cache and the collecting machine's environment."""
