"""The run store on disk: run folders, atomic writes, the listing index, the queue, checkpoints, retention, presets, paths and config.toml."""
