"""The Tinker-compatible server (`zyquo-tui serve`): the official `tinker` SDK trains and
samples local MLX models through it. Imports mlx and the SDK (the `serve` extra); nothing in
the package but the server's own process imports it (docs/tinker-server.md)."""
