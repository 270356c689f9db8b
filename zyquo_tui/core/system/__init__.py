"""This machine: facts (macOS sources fail soft), process liveness, helper child processes."""
