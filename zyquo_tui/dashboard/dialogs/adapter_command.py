"""AdapterCommandDialog: the mlx-lm commands that use a checkpoint, ready to copy."""

from __future__ import annotations

import shlex
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from zyquo_tui.core.store.checkpoints import ADAPTER_CONFIG, Checkpoint
from zyquo_tui.dashboard.dialogs.dialog import Dialog

PROMPT = "Write a haiku about training."


def adapter_commands(model: str, adapters: Path, checkpoint: Checkpoint, latest_step: int,
                     prompt: str = PROMPT) -> str:
    """Shell commands that generate with this checkpoint's adapter, to paste as one block.

    mlx-lm loads `adapters.safetensors` (and adapter_config.json) from the folder given as
    --adapter-path, and the run's adapters/ folder holds the latest step under that name. For
    any other step, the step's file is copied, with the config, into a folder of its own.
    """
    q = shlex.quote
    run = adapters.parent
    folder = f"step-{checkpoint.step:07d}"
    lines = [f"RUN={q(str(run))}", f"MODEL={q(model)}", ""]
    if checkpoint.step == latest_step:
        where = f"$RUN/{adapters.name}"
        lines += [
            f"# Step {checkpoint.step} is the run's latest: mlx-lm loads it from the run's",
            f"# {adapters.name}/ folder (adapters.safetensors and adapter_config.json).",
        ]
    else:
        where = f"$RUN/{folder}"
        lines += [
            f"# Step {checkpoint.step}: mlx-lm loads adapters.safetensors from the folder it",
            "# is given, so copy this step's file and the config into a folder of its own:",
            f'mkdir -p "{where}"',
            f'cp "$RUN/{adapters.name}/{ADAPTER_CONFIG}" "{where}/"',
            f'cp "$RUN/{adapters.name}/{checkpoint.adapter_path.name}" \\',
            f'    "{where}/adapters.safetensors"',
        ]
    lines += [
        f'mlx_lm generate --model "$MODEL" --adapter-path "{where}" \\',
        f"    --prompt {q(prompt)}",
        "",
        "# Or merge it into the model for good:",
        f'mlx_lm fuse --model "$MODEL" --adapter-path "{where}" \\',
        f'    --save-path "$RUN/{folder}-fused"',
    ]
    return "\n".join(lines)


class AdapterCommandDialog(Dialog[None]):
    """Shows the commands, wrapped to the window; `y` copies them exactly (unwrapped) to the
    clipboard through the terminal (OSC 52, which also works over SSH in most terminals), and
    the mouse can select them too."""

    BINDINGS = [
        Binding("y", "copy", "Copy all", id="command.copy"),
        Binding("escape,q", "close", "Close", id="command.close"),
    ]
    DEFAULT_CSS = """
    AdapterCommandDialog > .dialog-frame {
        width: 100;
        max-width: 98%;
        max-height: 95%;
        padding: 0 1;
    }
    AdapterCommandDialog VerticalScroll { height: auto; max-height: 70vh; }
    AdapterCommandDialog #commands { background: $boost; padding: 0 1; }
    AdapterCommandDialog Footer { dock: none; }
    """

    def __init__(self, heading: str, commands: str) -> None:
        super().__init__(heading)
        self.commands = commands

    def compose_content(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.commands, markup=False, id="commands")
        yield Footer(compact=True)

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.commands)
        self.notify("Copied the commands to the clipboard.", title="mlx-lm", timeout=3)
