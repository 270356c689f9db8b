"""config.toml: read with defaults, clear errors, and saved without losing other keys."""

from __future__ import annotations

import pytest

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.store.user_settings import Settings


@pytest.mark.parametrize("text, sentence", [
    ("models = 3\n", "config.toml:1: models must be a table ([models] and its keys), not 3"),
    ("runs = 'fast'\n", "config.toml:1: runs must be a table ([runs] and its keys), not 'fast'"),
    ("[runs]\ncancel_grace_seconds = 'x'\n",
     "config.toml:2: [runs] cancel_grace_seconds must be a number of at least 0, not 'x'"),
    ("[runs]\ncancel_grace_seconds = -1\n",
     "config.toml:2: [runs] cancel_grace_seconds must be a number of at least 0, not -1"),
    ("[runs]\nstop_on_divergence = 1\n",
     "config.toml:2: [runs] stop_on_divergence must be true or false, not 1"),
    ("[models]\nfolders = '/Volumes'\n",
     "config.toml:2: [models] folders must be a list of paths"),
    ("[notifications]\nwebhook_url = 5\n",
     "config.toml:2: [notifications] webhook_url must be text, not 5"),
    ("[notifications]\nbell = true\ndesktop = 'loud'\n",
     'config.toml:3: [notifications] desktop must be one of "auto", "osc9", "osc777", "off", '
     "not 'loud'"),
    ("[notifications]\nbell = 'yes'\n",
     "config.toml:2: [notifications] bell must be true or false, not 'yes'"),
    ("[keys]\n\"app.quit\" = \"q\"\n\"run.cancel\" = 3\n",
     "config.toml:3: [keys] run.cancel must be text, not 3"),
    ("keys = 'vim'\n", "config.toml:1: keys must be a table ([keys] and its keys), not 'vim'"),
])
def test_a_value_of_the_wrong_type_is_one_sentence_through_every_command(isolated_home, text,
                                                                         sentence):
    """Not a traceback (an AttributeError or a ValueError in the reading): where, the key and
    what it must be, from `models` as from any command that reads the file."""
    from conftest import zyquo_cli

    (isolated_home / "config.toml").write_text(text)
    with pytest.raises(UserError, match="fix the file"):
        Settings.load()
    done = zyquo_cli("models")
    assert done.returncode == 2, done.stdout + done.stderr
    assert sentence in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert (isolated_home / "config.toml").read_text() == text  # left as it was
