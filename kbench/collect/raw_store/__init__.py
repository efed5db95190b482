"""The raw-folder store: batch writing, the folder lock, shards, merging shard folders and travelling copies."""
