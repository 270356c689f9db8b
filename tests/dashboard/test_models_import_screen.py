"""The models screen's GGUF files: listed below the models, `i` imports the highlighted one
(the real importer subprocess) and the list shows the new model; a bad file's sentence shows
as an error and nothing is left in the library."""

from __future__ import annotations

from pathlib import Path

from gguf_writing import random_llama_weights, write_llama_gguf
from test_setup_helpers import FixedSources, until
from test_setup_helpers import setup_dashboard as dashboard

from zyquo_tui.core.library.gguf_files import describe_gguf
from zyquo_tui.dashboard.screens.models_screen import ModelsScreen


def sources_listing(*paths: Path) -> type[FixedSources]:
    class GGUFSources(FixedSources):
        def gguf_files(self):
            return [describe_gguf(path, f"someone/{path.name}", "lm-studio") for path in paths]
    return GGUFSources


def messages(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_i_imports_the_highlighted_gguf_file_and_the_model_appears(isolated_home,
                                                                         tmp_path):
    gguf = write_llama_gguf(tmp_path / "Tiny.Q8_0.gguf", random_llama_weights(), "Q8_0")
    app = dashboard(sources_listing(gguf))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = ModelsScreen()
        app.push_screen(screen)
        await until(pilot, lambda: screen.discovered, "the list")
        assert screen.models == [] and [f.name for f in screen.gguf_files] == [
            "someone/Tiny.Q8_0.gguf"]
        assert "⇩ importable" in str(screen.query_one("DataTable").get_row_at(0)[1])
        await pilot.press("i")
        await until(pilot, lambda: screen.importing, "the import to start")
        assert "importing as tiny-q8_0" in str(screen.query_one("TitleBar").context)
        await until(pilot, lambda: [m.name for m in screen.models] == ["tiny-q8_0"],
                    "the imported model", timeout=180)
        assert screen.models[0].ready and screen.importing is None
        assert any(m.startswith("Imported tiny-q8_0") for m in messages(app))
    assert (isolated_home / "models" / "tiny-q8_0" / "model.safetensors").is_file()


async def test_a_file_that_fails_to_import_shows_its_sentence_and_leaves_nothing(
        isolated_home, tmp_path):
    whole = write_llama_gguf(tmp_path / "whole.gguf", random_llama_weights(), "F32")
    cut = tmp_path / "Cut.gguf"
    cut.write_bytes(whole.read_bytes()[:-4096])  # its first bytes are whole: listed importable
    app = dashboard(sources_listing(cut))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = ModelsScreen()
        app.push_screen(screen)
        await until(pilot, lambda: screen.discovered, "the list")
        assert screen.gguf_files[0].importable
        await pilot.press("i")
        await until(pilot, lambda: any("is truncated" in m for m in messages(app)),
                    lambda: f"the error, not {messages(app)}", timeout=180)
        assert screen.importing is None
    models = isolated_home / "models"
    assert not models.exists() or list(models.iterdir()) == []


async def test_i_on_a_model_says_what_it_imports(isolated_home, tmp_path):
    app = dashboard(sources_listing())
    async with app.run_test(size=(120, 40)) as pilot:
        screen = ModelsScreen()
        app.push_screen(screen)
        await until(pilot, lambda: screen.discovered, "the list")
        await pilot.press("i")
        await until(pilot, lambda: any("Highlight a GGUF file" in m for m in messages(app)),
                    "the hint")
