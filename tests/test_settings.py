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
