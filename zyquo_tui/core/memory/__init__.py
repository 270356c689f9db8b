"""The memory verdict: model facts, the estimate, replicas, measured history, the advisor and
gate, the machine's budget, measurements."""
