"""RunDraft, the one road from a person's choices to a run: which methods and objectives it
offers (and why not the others), what it fits when nobody chose, what is wrong with it, how a
memory suggestion changes it, and the Run it becomes. No subprocess, no screen, no training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_memory import llama_config, write_model

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.run_checks import DataTraits, ModelTraits
from zyquo_tui.core.memory.advisor import Suggestion, Verdict
from zyquo_tui.core.memory.estimate import TrainingConfig
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method
from zyquo_tui.core.setup.draft import Base, RunDraft

PLAIN = Base("/models/tiny", ModelTraits("tiny", quantized=False, num_layers=4))
FOUR_BIT = Base("/models/tiny-4bit", ModelTraits("tiny-4bit", quantized=True, num_layers=4), 4)


def rows(format: str, train: int = 20, valid: int = 8) -> DataTraits:
    return DataTraits("/data/d", True, True, format, {"train": train, "valid": valid})


def draft(base: Base | None = PLAIN, method: Method | None = None, data=None, **settings):
    hp = Hyperparameters()
    for key, value in settings.items():
        SETTINGS[key].set(hp, value)
    made = RunDraft(model_path=base.path if base else None, base=base,
                    data_path=data.path if data else None, data=data, chosen_method=method,
                    hyperparameters=hp, chosen=frozenset(settings))
    made.fit_defaults()
    return made


def offered(mapping) -> set:
    return {choice for choice, why in mapping.items() if why is None}


def test_a_quantized_base_offers_qlora_and_dora_and_says_why_not_lora_or_full():
    methods = draft(FOUR_BIT).offered_methods()
    assert offered(methods) == {Method.QLORA, Method.DORA}
    assert "lora on a quantized model is qlora" in methods[Method.LORA]
    assert "full is refused: tiny-4bit is quantized (4-bit)" in methods[Method.FULL]


def test_a_full_precision_base_offers_all_but_qlora_and_no_base_says_to_pick_one():
    methods = draft(PLAIN).offered_methods()
    assert offered(methods) == {Method.LORA, Method.DORA, Method.FULL}
    assert "tiny is not quantized" in methods[Method.QLORA]
    assert "pick a model first" in draft(None).offered_methods()[Method.QLORA]


@pytest.mark.parametrize("base, chosen, trains", [
    (PLAIN, None, Method.LORA),
    (FOUR_BIT, None, Method.QLORA),
    (FOUR_BIT, Method.LORA, Method.QLORA),  # the same training: the base makes it QLoRA
    (FOUR_BIT, Method.DORA, Method.DORA),
    (PLAIN, Method.FULL, Method.FULL),
])
def test_the_method_a_draft_trains_with(base, chosen, trains):
    assert draft(base, chosen).method is trains


@pytest.mark.parametrize("base, chosen, sentence", [
    (PLAIN, Method.QLORA, "qlora needs a quantized base model, and tiny is not quantized"),
    (FOUR_BIT, Method.FULL, "full fine-tuning needs an unquantized model, and tiny-4bit is "
                            "quantized"),
])
def test_a_method_the_base_cannot_train_is_an_error_at_the_method(base, chosen, sentence):
    errors = draft(base, chosen).errors()
    assert [p.key for p in errors] == ["method"] and sentence in errors[0].sentence


def test_preference_rows_offer_dpo_and_orpo_and_train_dpo_when_nobody_chose():
    made = draft(data=rows("preference"))
    objectives = made.offered_objectives()
    assert offered(objectives) == {"dpo", "orpo"}
    assert "choose --objective dpo or orpo" in objectives["sft"]
    assert made.objective == "dpo" and not made.errors()


def test_an_objective_chosen_is_kept_and_refused_when_the_data_cannot_train_it():
    made = draft(data=rows("preference"), objective="sft")
    assert made.objective == "sft"
    assert [p.key for p in made.errors()] == ["dataset"]
    sft_rows = draft(data=rows("completions"), objective="dpo")
    assert "needs preference rows" in sft_rows.errors()[0].sentence
    assert offered(draft(data=rows("chat")).offered_objectives()) == {"sft", "distill"}
    prompts = draft(data=rows("prompts"), objective="sft")
    assert "train the grpo objective, not sft" in prompts.errors()[0].sentence
    assert offered(prompts.offered_objectives()) == {"grpo"}
    assert "needs prompt rows with the answer" in draft(data=rows("chat"),
                                                        objective="grpo").errors()[0].sentence


def test_a_distill_run_needs_a_teacher_and_a_grpo_run_a_weight_for_each_reward():
    assert [p.key for p in draft(data=rows("chat"), objective="distill").errors()] == ["teacher"]
    weighted = draft(data=rows("prompts"), objective="grpo", reward_weights=[1.0, 2.0])
    assert "2 weights for 1 rewards" in weighted.errors()[0].sentence


def test_num_layers_nobody_chose_trains_a_small_models_layers_and_a_chosen_one_is_refused():
    assert draft(PLAIN).hyperparameters.num_layers == -1  # mlx-lm's 16 > 4 layers
    chosen = draft(PLAIN, num_layers=16)
    assert chosen.hyperparameters.num_layers == 16
    assert "tiny has only 4 layers; use -1" in chosen.errors()[0].sentence


def test_a_suggestion_that_splits_the_batch_multiplies_every_count_of_steps():
    made = draft(iters=600, save_every=100, steps_per_eval=200, steps_per_report=10,
                 batch_size=8)
    config = TrainingConfig.from_hyperparameters(Method.LORA, made.hyperparameters)
    suggestion = Suggestion("batch 2 with 4 accumulation steps",
                            {"batch_size": 2, "grad_accumulation_steps": 4}, config, None,
                            Verdict.FITS, iters_factor=4)
    applied = made.apply(suggestion)
    hp = applied.hyperparameters
    assert (hp.batch_size, hp.grad_accumulation_steps) == (2, 4)
    assert (hp.iters, hp.save_every, hp.steps_per_eval, hp.steps_per_report) == \
        (2400, 400, 800, 40)
    assert made.hyperparameters.batch_size == 8  # the draft applied to is left as it was


def test_to_run_makes_the_run_or_says_the_first_error_after_the_doors_words():
    run = draft(FOUR_BIT, data=rows("completions")).replace(name="mine").to_run()
    assert (run.method, run.model, run.name) == (Method.QLORA, FOUR_BIT.path, "mine")
    assert draft(FOUR_BIT, data=rows("completions")).to_run().name == "tiny-4bit qlora"
    with pytest.raises(UserError) as refused:
        draft(PLAIN, data=rows("completions", train=2), batch_size=4).to_run(
            refused="The run was not created: ")
    assert refused.value.message.startswith("The run was not created: batch_size 4 is more "
                                            "than the 2 rows of train.jsonl")


def test_a_config_files_value_is_refused_at_its_line(tmp_path):
    model = write_model(tmp_path / "model", llama_config(num_hidden_layers=4))
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"text": f"row {i}"}) + "\n"
                                              for i in range(8)))
    config_file = tmp_path / "run.yaml"
    config_file.write_text(f"model: {model}\ndata: {data}\nbatch_size: 4\nnum_layers: 9\n")
    config = {"model": str(model), "data": str(data), "batch_size": 4, "num_layers": 9}
    made = RunDraft.from_mlx_config(config, source=str(config_file), base_dir=tmp_path,
                                    config_file=config_file)
    with pytest.raises(UserError) as refused:
        made.to_run()
    assert refused.value.message.startswith(f"{config_file}:4: num_layers is 9")
    # The same value given on the command line is the command line's, not the file's.
    over = RunDraft.from_mlx_config(config, source=str(config_file), base_dir=tmp_path,
                                    config_file=config_file, settings={"num_layers": 8})
    with pytest.raises(UserError) as refused:
        over.to_run()
    assert refused.value.message.startswith("num_layers is 8")
    assert Path(over.model_path) == model.resolve()


def by_epochs(train: int = 100, **settings) -> RunDraft:
    return RunDraft.from_choices(data="/data/d", data_traits=rows("completions", train=train),
                                 settings=settings)


def test_epochs_make_the_iterations_from_the_train_rows_and_the_batch_size_and_again():
    """100 rows at batch 4: 25 whole batches an epoch; at batch 8, 12 (and 4 rows over)."""
    made = by_epochs(epochs=3, batch_size=4)
    assert made.hyperparameters.iters == 75 and made.epochs == 3
    assert made.epoch_plan().batches_per_epoch == 25 and not made.epoch_problems()
    hp = made.hyperparameters
    hp.batch_size = 8
    bigger = made.replace(hyperparameters=hp)  # what the form does on every change
    assert bigger.hyperparameters.iters == 36
    assert [p.severity for p in bigger.epoch_problems()] == ["warning"]
    assert "leave 4 rows over" in bigger.epoch_problems()[0].sentence
    fewer = bigger.replace(data=rows("completions", train=40))  # another dataset
    assert fewer.hyperparameters.iters == 15


def test_a_grpo_runs_epochs_count_each_batchs_reuses():
    """grpo_iterations 3 trains each batch of answers three iterations: an epoch of 25
    batches is 75 of them (iters counts updates, as TRL counts steps)."""
    def grpo(**settings) -> RunDraft:
        return RunDraft.from_choices(data="/data/d", data_traits=rows("prompts", train=100),
                                     settings={"objective": "grpo", "batch_size": 4,
                                               **settings})

    assert grpo(epochs=2).hyperparameters.iters == 50
    reused = grpo(epochs=2, grpo_iterations=3)
    assert reused.hyperparameters.iters == 150
    assert reused.epoch_plan().epochs_in(150) == 2


def test_iters_and_epochs_are_one_or_the_other():
    with pytest.raises(UserError) as refused:
        by_epochs(epochs=2, iters=10)
    assert refused.value.message == (
        "iters and epochs were both given; give one of them (epochs makes the iterations from "
        "the dataset's rows and the batch size).")
    inherited = by_epochs(epochs=2).hyperparameters  # a preset's or a config's epochs
    chosen = RunDraft.from_choices(data="/data/d", data_traits=rows("completions", train=100),
                                   hyperparameters=inherited, settings={"iters": 10})
    assert chosen.hyperparameters.iters == 10 and chosen.epochs is None


def test_epochs_with_no_dataset_or_rows_uncounted_are_errors_and_iters_are_left_alone():
    no_data = RunDraft.from_choices(settings={"epochs": 2})
    assert no_data.hyperparameters.iters == 1000
    assert [p.sentence for p in no_data.epoch_problems()] == [
        "epochs counts passes over a dataset's rows: give a dataset to make them into "
        "iterations, or give iters instead."]
    uncounted = RunDraft.from_choices(data="/data/d", settings={"epochs": 2}, data_traits=(
        DataTraits("/data/d", True, True, "completions", {})))
    assert uncounted.errors()[0].sentence.startswith(
        "d: the rows of train.jsonl could not be counted")


def test_a_suggestion_that_splits_the_batch_makes_epochs_iterations_at_the_new_batch():
    made = by_epochs(epochs=2, batch_size=8, save_every=10)
    assert made.hyperparameters.iters == 24
    config = TrainingConfig.from_hyperparameters(Method.LORA, made.hyperparameters)
    suggestion = Suggestion("batch 2 with 4 accumulation steps",
                            {"batch_size": 2, "grad_accumulation_steps": 4}, config, None,
                            Verdict.FITS, iters_factor=4)
    assert "iters" not in made.suggested_settings(suggestion)
    hp = made.apply(suggestion).hyperparameters
    assert (hp.iters, hp.save_every, hp.batch_size) == (2 * 50, 40, 2)
