"""Messages from the App's RunService to the screens, past tense, each saying what happened.

They carry ids, not data: the data lives in the service (run records, RunFeeds), so a burst of
messages can collapse into one (`can_replace`) without losing anything. They do not bubble:
the App forwards each one to the screens that are open.
"""

from __future__ import annotations

from textual.message import Message


class RunsRefreshed(Message, bubble=False):
    """The service read the store again: run records, states or the queue may have changed."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunsRefreshed)


class MetricsReceived(Message, bubble=False):
    """New events of a run were folded into its RunFeed (a burst arrives as one message)."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MetricsReceived) and message.run_id == self.run_id


class RunEnded(Message, bubble=False):
    """A run this dashboard saw active (or queued) reached a terminal state."""

    def __init__(self, run_id: str, state: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.state = state


class RunWarned(Message, bubble=False):
    """A followed run wrote a warning worth telling at once (its train loss diverging)."""

    def __init__(self, run_id: str, message: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.message = message


class SampleChanged(Message, bubble=False):
    """Building the sample model started, finished or failed."""


class RunSteppedDown(Message, bubble=False):
    """A run ran out of memory and its runner resumed it one rung down the ladder."""

    def __init__(self, run_id: str, change: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.change = change
