"""config.toml: read with defaults, clear errors, and saved without losing other keys."""

from __future__ import annotations

import pytest

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.store.user_settings import NotificationSettings, Settings, key_line


def test_defaults_without_a_file():
    settings = Settings.load()
    assert settings.model_folders == [] and settings.cancel_grace_seconds == 30.0


def test_saving_keeps_keys_it_does_not_model(isolated_home):
    path = isolated_home / "config.toml"
    path.write_text('[keys]\n"app.quit" = "ctrl+q"\n\n[notifications]\ndesktop = "off"\n'
                    'webhook_url = "https://ntfy.example/topic"\n# my own note\n')
    settings = Settings.load()
    assert settings.notifications.webhook_url == "https://ntfy.example/topic"
    settings.model_folders.append("/Volumes/models")
    settings.save()
    text = path.read_text()
    assert '"app.quit" = "ctrl+q"' in text and 'desktop = "off"' in text
    again = Settings.load()
    assert again.model_folders == ["/Volumes/models"]
    assert again.notifications.webhook_url == "https://ntfy.example/topic"
    assert again.keys == {"app.quit": "ctrl+q"} and again.notifications.desktop == "off"


def test_notifications_and_keys_are_read_with_the_rest(isolated_home):
    """The dashboard's [notifications] and [keys] come from the one reading of the file."""
    (isolated_home / "config.toml").write_text(
        '[notifications]\ndesktop = "osc777"\nbell = false\n'
        'webhook_url = "https://ntfy.sh/zyquo-test"\n\n[keys]\n"run.cancel" = "x"\n')
    settings = Settings.load()
    assert settings.notifications == NotificationSettings(
        desktop="osc777", bell=False, webhook_url="https://ntfy.sh/zyquo-test")
    assert settings.keys == {"run.cancel": "x"}
    (isolated_home / "config.toml").write_text('[notifications]\nwebhook_url = "  "\n')
    assert Settings.load().notifications == NotificationSettings()


def test_a_broken_file_is_one_sentence_with_its_line(isolated_home):
    (isolated_home / "config.toml").write_text("[models]\nfolders = [\n")
    with pytest.raises(UserError, match=r"config.toml:\d+: not valid TOML"):
        Settings.load()


def test_a_whole_number_of_seconds_is_a_number():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "config.toml").write_text("[runs]\ncancel_grace_seconds = 45\n")
        assert Settings.load(Path(home)).cancel_grace_seconds == 45.0


@pytest.mark.parametrize("text, section, key, line", [
    ("[runs]\nauto_resume = 3\n", "runs", "auto_resume", 2),
    ("# note\n[logs] # rotation\nbackups = 0\n[runs]\nbackups = 1\n", "logs", "backups", 3),
    ("[runs]\nauto_resume = 3\n", "logs", "backups", None),
    ("runs.auto_resume = 3\n", "runs", "auto_resume", 1),
    ("[runs]\n\n[keys]\n'run.cancel' = 3\n", "keys", "run.cancel", 4),
    ("[runs]\n", "runs", None, 1),
])
def test_the_line_of_a_key_is_found_for_the_sentence(text, section, key, line):
    assert key_line(text, section, key) == line


def test_a_file_that_is_not_text_is_one_sentence(isolated_home):
    (isolated_home / "config.toml").write_bytes(b"[runs]\nauto_resume = \xff\n")
    with pytest.raises(UserError, match=r"config.toml: cannot be read \(.*\); fix or remove"):
        Settings.load()
