"""Setting up a run: the RunDraft every door makes runs through, and its verdicts."""
