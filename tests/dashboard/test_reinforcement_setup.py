"""Setting up GRPO and distillation runs in the new-run form: the objectives each dataset
offers, each objective's own fields, and the draft's refusals shown where they belong; Pilot
tests, and snapshots of the grpo fields and of a refused objective.

The sample models are real and copied into the test's $ZYQUO_HOME; the datasets are real
folders (a small one of prompts with answers, written here; the shipped chat sample). The
memory budget and the rows' token lengths are fixed (FixedSources), so no verdict depends on
this machine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA
from test_setup_helpers import FixedSources, open_new_run, settle, type_into, until
from test_setup_helpers import setup_dashboard as dashboard
from test_setup_snapshots import BOTH, DATASETS, MODELS, new_run, steady, world
from test_setup_snapshots import dashboard as snapshot_dashboard
from test_setup_snapshots import type_into as snapshot_type_into

from zyquo_tui.core.runs.run import Run, RunState
from zyquo_tui.core.runs.settings import (
    DISTILLATION,
    PREFERENCE,
    REINFORCEMENT,
    SETTINGS,
    Hyperparameters,
    Method,
)
from zyquo_tui.core.setup.draft import RunDraft
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.dashboard.widgets.choice_picker import ChoicePicker
from zyquo_tui.dashboard.widgets.hyperparameter_form import FIELD_KEYS

__all__ = ["world"]  # the fixture, used by name

CHAT = str(SAMPLE_DATA / "chat")
GROUP_KEYS = {group: {key for key, setting in SETTINGS.items()
                      if setting.group == group and key in FIELD_KEYS}
              for group in (PREFERENCE, REINFORCEMENT, DISTILLATION)}
OBJECTIVE_KEYS = set().union(*GROUP_KEYS.values())


def write_prompts(folder: Path) -> str:
    """A small dataset of prompts with the answer a reward checks (rows.py PROMPTS)."""
    folder.mkdir(parents=True)
    for split, numbers in (("train", range(12)), ("valid", range(20, 24))):
        rows = [{"prompt": f"What is {n} plus {n + 1}?", "answer": str(2 * n + 1)}
                for n in numbers]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(folder)


@pytest.fixture
def prompts(tmp_path) -> str:
    return write_prompts(tmp_path / "sums")


def rows_shown(screen) -> set[str]:
    """The objective settings whose rows the form shows."""
    return {key for key in OBJECTIVE_KEYS if screen.form.shows(key)}


def note(screen) -> str:
    return str(screen.query_one("#objective-note").render())


def mark(screen, key: str) -> str | None:
    """The sentence under a field (None when it is not marked)."""
    problem = screen.form.row(key)._problem
    return problem[0] if problem else None


def draft_sentence(model: Path, data: str, key: str, **settings) -> str:
    """The sentence `runs new` gives for these settings (the same draft the form renders)."""
    draft = RunDraft.from_choices(model=str(model), data=data, settings=settings)
    return next(p.sentence for p in draft.errors() if p.key == key)


async def test_prompt_rows_offer_grpo_alone_and_the_form_makes_the_run_it_shows(models,
                                                                                 prompts):
    """Prompts with answers: grpo is the objective and the only one offered (the note says
    why not sft); the reinforcement fields show (rewards, weights, group size, answer length,
    temperature, KL weight, clip), the preference and distillation ones do not. The run saved
    holds exactly what the form shows."""
    app = dashboard(lambda home: FixedSources(home, lengths=[20]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=prompts)
        await settle(pilot, screen)
        picker = screen.query_one("#objective", ChoicePicker)
        assert screen.objective == "grpo" and picker.allowed == {"grpo"}
        assert screen.query_one("#objective-line").display
        assert "sft is not offered: prompt rows with answers train grpo" in note(screen)
        assert rows_shown(screen) == GROUP_KEYS[REINFORCEMENT] == {
            "reward_functions", "reward_weights", "group_size", "max_completion_tokens",
            "sampling_temperature", "kl_beta", "clip_epsilon"}
        assert screen.form.row("reward_functions").control.value == "exact_answer"
        assert not screen.field_errors

        await type_into(pilot, screen, "reward_functions", "exact_answer, length")
        await type_into(pilot, screen, "reward_weights", "1, 0.25")
        await type_into(pilot, screen, "group_size", "6")
        await type_into(pilot, screen, "kl_beta", "0.05")
        await type_into(pilot, screen, "iters", "20")
        assert not screen.field_errors, screen.field_errors
        picker.focus()
        await pilot.press("right")  # grpo alone is offered: the picker stays on it
        assert screen.objective == "grpo"
        await pilot.press("d")
        await until(pilot, lambda: RunStore().list(), "the saved run")
        run = RunStore().list()[0]
        assert run.objective == "grpo" and run.state is RunState.CONFIGURED
        assert run.hyperparameters.zyquo_tui == {
            "objective": "grpo", "reward_functions": ["exact_answer", "length"],
            "reward_weights": [1.0, 0.25], "group_size": 6, "kl_beta": 0.05}


async def test_chat_rows_offer_sft_and_distill_and_distill_asks_for_its_teacher(models):
    """The chat sample: sft (the default) and distill offered, the others struck through;
    no objective fields for sft. → chooses distill: the teacher, its temperature and on-policy
    show (the answer length only while on-policy is on), and the teacher field is marked with the draft's sentence
    until a model folder is given; s is refused meanwhile and focuses that field. Back to
    sft, no distillation setting is left in the run."""
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(models["zyquo-tiny"]), data=CHAT)
        await settle(pilot, screen)
        picker = screen.query_one("#objective", ChoicePicker)
        assert screen.objective == "sft" and picker.allowed == {"sft", "distill"}
        assert screen.query_one("#objective-line").display and note(screen) == ""
        assert rows_shown(screen) == set()

        picker.focus()
        await pilot.press("right")  # sft → distill: dpo, orpo and grpo are skipped
        assert screen.objective == "distill"
        # Off policy (the default) samples nothing: no answer length until on-policy is on.
        assert rows_shown(screen) == GROUP_KEYS[DISTILLATION]
        screen.form.row("on_policy").control.focus()
        await pilot.press("space")
        assert rows_shown(screen) == GROUP_KEYS[DISTILLATION] | {"max_completion_tokens"}
        await pilot.press("space")
        assert rows_shown(screen) == GROUP_KEYS[DISTILLATION]
        no_teacher = draft_sentence(models["zyquo-tiny"], CHAT, "teacher", objective="distill")
        assert "needs a teacher (--teacher): a model with the same tokenizer, by its name " \
               "as `zyquo-tui models` lists it or by its folder." in no_teacher
        assert mark(screen, "teacher") == no_teacher

        await pilot.press("s")
        await pilot.pause()
        assert [n.message for n in app._notifications][-1] == no_teacher
        assert screen.focused is screen.form.row("teacher").control
        assert RunStore().list() == []

        await pilot.press(*str(models["zyquo-tiny"]))
        assert mark(screen, "teacher") is None and not screen.field_errors
        await type_into(pilot, screen, "distill_temperature", "2")
        picker.focus()
        await pilot.press("left")  # back to sft: nothing of distillation in the run
        assert screen.objective == "sft" and rows_shown(screen) == set()
        assert screen.build_run().hyperparameters.zyquo_tui == {}
        await pilot.press("right", "d")
        await until(pilot, lambda: RunStore().list(), "the saved run")
        run = RunStore().list()[0]
        assert run.hyperparameters.zyquo_tui == {
            "objective": "distill", "teacher": str(models["zyquo-tiny"]),
            "distill_temperature": 2.0}


def other_tokenizer(model: Path, folder: Path) -> Path:
    """A copy of `model` whose tokenizer maps two tokens to each other's ids: the same shapes
    and files, another vocabulary."""
    shutil.copytree(model, folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = list(vocab)[-2:]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


async def test_the_teacher_field_takes_a_models_name_and_refuses_another_tokenizer(
        models, teacher_model, tmp_path):
    """Distill on the chat sample: with no teacher the field is marked with the draft's
    sentence; a copy of the sample model with another tokenizer is marked with the sentence
    `runs new` refuses it with, and s is refused with it and focuses the field; the sample's
    teacher typed by its name (as `zyquo-tui models` lists it) is taken, and the run saved
    holds the teacher's folder."""
    installed = Path(shutil.copytree(teacher_model, models["zyquo-tiny"].parent
                                     / teacher_model.name))
    other = other_tokenizer(models["zyquo-tiny"], tmp_path / "other-tokenizer")
    model = models["zyquo-tiny"]
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(model), data=CHAT)
        await settle(pilot, screen)
        screen.query_one("#objective", ChoicePicker).focus()
        await pilot.press("right")  # sft → distill
        assert screen.objective == "distill"
        assert mark(screen, "teacher") == draft_sentence(model, CHAT, "teacher",
                                                         objective="distill")

        await type_into(pilot, screen, "teacher", str(other))
        refusal = draft_sentence(model, CHAT, "teacher", objective="distill",
                                 teacher=str(other))
        assert "the teacher other-tokenizer has another tokenizer than the model " \
               "zyquo-tiny" in refusal
        assert mark(screen, "teacher") == refusal
        await pilot.press("escape", "s")
        await pilot.pause()
        assert [n.message for n in app._notifications][-1] == refusal
        assert screen.focused is screen.form.row("teacher").control
        assert RunStore().list() == []

        await type_into(pilot, screen, "teacher", "zyquo-tiny-teacher")
        assert mark(screen, "teacher") is None and not screen.field_errors
        await pilot.press("escape", "d")
        await until(pilot, lambda: RunStore().list(), "the saved run")
        run = RunStore().list()[0]
        assert run.objective == "distill"
        assert SETTINGS["teacher"].get(run.hyperparameters) == str(installed.resolve())


async def test_each_reward_refusal_is_marked_at_its_field_in_the_drafts_words(
        models, prompts, tmp_path):
    """A weight for each reward, a reward that is neither built in nor FILE.py:FUNCTION, and
    a file without the function named: each marks its field with the sentence `runs new`
    refuses it with, and blocks the start; a file that defines the function is taken."""
    rewards = tmp_path / "my_rewards.py"
    rewards.write_text("def says_the_answer(prompts, completions, answer, types=None):\n"
                       "    return [float(a in c) for c, a in zip(completions, answer)]\n")
    model = models["zyquo-tiny"]
    app = dashboard(lambda home: FixedSources(home, lengths=[20]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, model=str(model), data=prompts)
        await settle(pilot, screen)

        await type_into(pilot, screen, "reward_weights", "1, 2")
        expected = draft_sentence(model, prompts, "reward_weights", objective="grpo",
                                  reward_weights=[1.0, 2.0])
        assert "2 weights for 1 rewards" in expected
        assert mark(screen, "reward_weights") == expected
        await type_into(pilot, screen, "reward_weights", "")
        assert mark(screen, "reward_weights") is None

        for typed, words in (("exact", "is no built-in reward"),
                             (f"{rewards}:missing", "defines no function 'missing'")):
            await type_into(pilot, screen, "reward_functions", typed)
            expected = draft_sentence(model, prompts, "reward_functions", objective="grpo",
                                      reward_functions=[typed])
            assert words in expected
            assert mark(screen, "reward_functions") == expected
            await pilot.press("escape")
            await pilot.press("s")
            await pilot.pause()
            assert [n.message for n in app._notifications][-1] == expected
            assert screen.focused is screen.form.row("reward_functions").control

        await type_into(pilot, screen, "reward_functions", f"{rewards}:says_the_answer")
        assert mark(screen, "reward_functions") is None and not screen.field_errors
        assert SETTINGS["reward_functions"].get(screen.hp) == [f"{rewards}:says_the_answer"]
        assert RunStore().list() == []


async def test_grpo_asked_for_on_chat_rows_is_refused_under_the_picker(models):
    """A new run like a grpo run, on the chat sample: grpo stays chosen (struck through, not
    offered), the draft's refusal shows under the picker in red, and s is refused with it and
    focuses the picker; → moves to an objective the rows train and the refusal goes."""
    hp = Hyperparameters(iters=20, num_layers=-1)
    SETTINGS["objective"].set(hp, "grpo")
    like = Run.new(model=str(models["zyquo-tiny"]), data=CHAT, method=Method.LORA,
                   name="sums grpo", hyperparameters=hp)
    app = dashboard(lambda home: FixedSources(home, lengths=[60]))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_new_run(pilot, like=like)
        await settle(pilot, screen)
        picker = screen.query_one("#objective", ChoicePicker)
        assert screen.objective == "grpo" and "grpo" not in picker.allowed
        refusal = RunDraft.from_choices(model=str(models["zyquo-tiny"]), data=CHAT,
                                        settings={"objective": "grpo"}
                                        ).offered_objectives()["grpo"]
        assert "needs prompt rows with the answer" in refusal
        assert note(screen) == f"✗ {refusal}"
        assert screen.query_one("#objective-note").has_class("-error")
        assert rows_shown(screen) == GROUP_KEYS[REINFORCEMENT]

        screen.query_one("#setup-form").focus()  # no control has the focus: s acts
        await pilot.press("s")
        await pilot.pause()
        assert [n.message for n in app._notifications][-1] == refusal
        assert screen.focused is picker and RunStore().list() == []

        await pilot.press("right")
        assert screen.objective == "distill"
        assert not note(screen).startswith("✗")
        assert not screen.query_one("#objective-note").has_class("-error")
        assert rows_shown(screen) == GROUP_KEYS[DISTILLATION]  # off policy: no answer length


class TestReinforcementSnapshots:
    """The form for grpo and a refused objective, from the fixed world of
    test_setup_snapshots.py (the sample models and a prompts dataset at fixed paths)."""

    @BOTH
    def test_prompt_rows_show_grpos_fields_and_a_weight_too_many(self, snap_compare, world,
                                                                 size):
        """The sample model and "sums", a dataset of prompts with answers: its summary reads
        "prompts · train 12 · valid 4 rows · ✓ valid"; the Objective line has grpo chosen (at
        120 columns the other four struck through) and the note "sft is not offered: prompt
        rows with answers train grpo (rewards of the model's own answers).". The
        hyperparameters start with Rewards (exact_answer), Reward weights "1, 2" in bold red
        with "✗ reward_weights has 2 weights for 1 rewards; give one weight a reward, in the
        order of the rewards." under it, Group size 4, Answer length 64, Temperature 0.8, KL
        weight 0.1 and Clip epsilon 0.2, each with its help at 120 columns; the memory panel
        says "fix the marked field"."""
        async def run_before(pilot):
            data = write_prompts(DATASETS / "sums")
            screen = await new_run(pilot, model=str(MODELS / "zyquo-tiny"), data=data)
            await snapshot_type_into(pilot, screen, "reward_weights", "1, 2")
            steady(pilot.app)
            await pilot.pause()
        assert snap_compare(snapshot_dashboard(), terminal_size=size, run_before=run_before)

    def test_grpo_asked_for_on_chat_rows_is_refused_in_red(self, snap_compare, world):
        """A new run like a grpo run, on the support-chat dataset: the Objective line has grpo
        chosen though struck through (sft and distill offered), and under it in red "✗ the
        grpo objective needs prompt rows with the answer a reward checks (...), and these are
        chat rows; add an answer to each row, or train them with sft or distill"; grpo's
        fields follow."""
        async def run_before(pilot):
            hp = Hyperparameters(iters=20, num_layers=-1)
            SETTINGS["objective"].set(hp, "grpo")
            like = Run.new(model=str(MODELS / "zyquo-tiny"), data=str(DATASETS / "support-chat"),
                           method=Method.LORA, name="sums grpo", hyperparameters=hp)
            await new_run(pilot, like=like)
            steady(pilot.app)
            await pilot.pause()
        assert snap_compare(snapshot_dashboard(), terminal_size=(120, 40), run_before=run_before)
