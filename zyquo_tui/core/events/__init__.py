"""The event stream of a run: the wire format (protocol) and the series built from it (metrics)."""
