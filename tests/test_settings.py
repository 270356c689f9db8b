"""config.toml: read with defaults, clear errors, and saved without losing other keys."""

from __future__ import annotations

import pytest

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.store.user_settings import Settings


def test_defaults_without_a_file():
    settings = Settings.load()
    assert settings.model_folders == [] and settings.cancel_grace_seconds == 30.0


def test_saving_keeps_keys_it_does_not_model(isolated_home):
    path = isolated_home / "config.toml"
    path.write_text('[keys]\n"app.quit" = "ctrl+q"\n\n[notifications]\ndesktop = false\n'
                    'webhook_url = "https://ntfy.example/topic"\n')
    settings = Settings.load()
    assert settings.webhook_url == "https://ntfy.example/topic"
    settings.model_folders.append("/Volumes/models")
    settings.save()
    text = path.read_text()
    assert '"app.quit" = "ctrl+q"' in text and "desktop = false" in text
    again = Settings.load()
    assert again.model_folders == ["/Volumes/models"]
    assert again.webhook_url == "https://ntfy.example/topic"


def test_a_broken_file_is_one_sentence_with_its_line(isolated_home):
    (isolated_home / "config.toml").write_text("[models]\nfolders = [\n")
    with pytest.raises(UserError, match=r"config.toml:\d+: not valid TOML"):
        Settings.load()


@pytest.mark.parametrize("text, sentence", [
    ("models = 3\n", "models must be a table ([models] and its keys), not 3"),
    ("runs = 'fast'\n", "runs must be a table ([runs] and its keys), not 'fast'"),
    ("[runs]\ncancel_grace_seconds = 'x'\n",
     "[runs] cancel_grace_seconds must be a number of at least 0, not 'x'"),
    ("[runs]\ncancel_grace_seconds = -1\n",
     "[runs] cancel_grace_seconds must be a number of at least 0, not -1"),
    ("[runs]\nstop_on_divergence = 1\n",
     "[runs] stop_on_divergence must be true or false, not 1"),
    ("[notifications]\nwebhook_url = 5\n", "[notifications] webhook_url must be text, not 5"),
])
def test_a_value_of_the_wrong_type_is_one_sentence_through_every_command(isolated_home, text,
                                                                         sentence):
    """Not a traceback (an AttributeError or a ValueError in the reading): the key and what
    it must be, from `models` as from any command that reads the file."""
    from conftest import zyquo_cli

    (isolated_home / "config.toml").write_text(text)
    with pytest.raises(UserError, match="fix the file"):
        Settings.load()
    done = zyquo_cli("models")
    assert done.returncode == 2, done.stdout + done.stderr
    assert sentence in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert (isolated_home / "config.toml").read_text() == text  # left as it was


def test_a_whole_number_of_seconds_is_a_number():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "config.toml").write_text("[runs]\ncancel_grace_seconds = 45\n")
        assert Settings.load(Path(home)).cancel_grace_seconds == 45.0
