"""The run plumbing every command shares, calib's and bench's alike: arguments, the guard that ends a
command, dispatch, interrupts, prompts, one generation, settings fingerprints, folder locks, ranks and shards."""
