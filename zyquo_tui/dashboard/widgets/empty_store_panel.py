"""EmptyStorePanel: what a first launch shows instead of an empty table."""

from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static


class EmptyStorePanel(Static):
    """Explains that there are no runs yet and offers the two keys that fix it: build the
    sample model, then train on it."""

    DEFAULT_CSS = """
    EmptyStorePanel {
        height: auto;
        margin: 1 2;
        padding: 1 2;
        border: round $accent;
    }
    """

    sample_ready: reactive[bool] = reactive(False)
    building: reactive[bool] = reactive(False)

    def render(self) -> str:
        lines = ["[b]No runs yet.[/b]", ""]
        if self.building:
            lines.append("Building the sample model (a 100k-parameter model, under a minute)…")
        elif self.sample_ready:
            lines.append("The sample model is ready. Press [b]t[/b] to train on the sample "
                         "dataset: 60 steps, done in seconds, with a falling loss to watch.")
        else:
            lines.append("Press [b]b[/b] to build the sample model (a tiny model made offline "
                         "in under a minute), then [b]t[/b] to train on it.")
        lines += ["",
                  "Your own runs: press [b]n[/b] to set one up with a memory verdict, "
                  "[b]M[/b] and [b]D[/b] list the models and datasets found. Runs made "
                  "with `zyquo-tui runs new` appear here too.",
                  "Press [b]?[/b] for every key, [b]ctrl+p[/b] for commands."]
        return "\n".join(lines)
