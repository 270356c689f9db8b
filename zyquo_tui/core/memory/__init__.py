"""The memory verdict: model facts, the estimate, measured history, the advisor and gate, the machine's budget, measurements."""
