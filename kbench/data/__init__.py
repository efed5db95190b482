"""The data: the dataset registry, building and loading datasets (local or from the Hub), data cards and the
cross-device transfer task."""
