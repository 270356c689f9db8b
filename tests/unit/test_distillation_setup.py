"""A distillation draft without training: the teacher's tokenizer compared from its files, the
teacher named as a model, on-policy rows, and the teacher's terms in the memory estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_memory import HIDDEN, VOCAB, advisor, llama_config, llama_tensors, write_model

from zyquo_tui.core.library.tokenizer_identity import same_vocabulary, vocabulary_digest
from zyquo_tui.core.memory.estimate import CHUNKED_SLICES_AT_ONCE, TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.teacher import FLOAT32, KL_COPIES, KL_SLICE_COPIES
from zyquo_tui.core.runs.settings import SETTINGS, Hyperparameters, Method
from zyquo_tui.core.setup.draft import RunDraft


def tokenizer_json(vocab: dict[str, int], added: list[tuple[str, int]] = ()) -> dict:
    return {"model": {"type": "BPE", "vocab": vocab, "merges": []},
            "added_tokens": [{"id": i, "content": c, "special": True} for c, i in added]}


def model_with_tokenizer(folder: Path, tokenizer: dict, **config) -> Path:
    write_model(folder, llama_config(**config))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


def test_same_vocabulary_compares_tokens_and_ids_not_the_files_bytes(tmp_path):
    vocab = {"a": 2, "b": 3, "ab": 4}
    one = model_with_tokenizer(tmp_path / "one", tokenizer_json(vocab, [("<s>", 0)]))
    # The same tokens and ids, written in another order with other merges: the same.
    reordered = tokenizer_json(dict(reversed(vocab.items())), [("<s>", 0)])
    reordered["model"]["merges"] = ["a b"]
    two = model_with_tokenizer(tmp_path / "two", reordered)
    assert same_vocabulary(one, two) is True
    # Another id for one token, or another special token: not the same.
    moved = model_with_tokenizer(tmp_path / "moved", tokenizer_json({**vocab, "ab": 5},
                                                                    [("<s>", 0)]))
    special = model_with_tokenizer(tmp_path / "special", tokenizer_json(vocab, [("<pad>", 0)]))
    assert same_vocabulary(one, moved) is False
    assert same_vocabulary(one, special) is False
    # A folder without a tokenizer file says nothing.
    bare = write_model(tmp_path / "bare")
    assert vocabulary_digest(bare) is None and same_vocabulary(one, bare) is None
    # A Unigram vocabulary (pieces in id order) and the older vocab.json layout are read too.
    unigram = {"model": {"type": "Unigram", "vocab": [["a", -1.0], ["b", -2.0]]}}
    (tmp_path / "uni").mkdir()
    (tmp_path / "uni" / "tokenizer.json").write_text(json.dumps(unigram))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "vocab.json").write_text(json.dumps({"a": 0, "b": 1}))
    assert same_vocabulary(tmp_path / "uni", tmp_path / "old") is None  # no file in common
    (tmp_path / "old" / "tokenizer.json").write_text(json.dumps(unigram))
    assert same_vocabulary(tmp_path / "uni", tmp_path / "old") is True
    (tmp_path / "old2").mkdir()
    (tmp_path / "old2" / "vocab.json").write_text(json.dumps({"b": 1, "a": 0}))
    assert same_vocabulary(tmp_path / "old2", tmp_path / "old") is True


def distill_draft(student: Path, teacher: str, data: Path | None = None, **settings):
    return RunDraft.from_choices(model=str(student), data=str(data) if data else None,
                                 settings={"objective": "distill", "teacher": teacher,
                                           **settings})


def test_the_draft_refuses_a_teacher_with_another_vocabulary_in_one_sentence(tmp_path):
    student = model_with_tokenizer(tmp_path / "student", tokenizer_json({"a": 0, "b": 1}))
    same = model_with_tokenizer(tmp_path / "same", tokenizer_json({"b": 1, "a": 0}),
                                hidden_size=512)
    other = model_with_tokenizer(tmp_path / "other", tokenizer_json({"a": 0, "c": 1}))
    assert [p for p in distill_draft(student, str(same)).errors() if p.key == "teacher"] == []
    errors = [p for p in distill_draft(student, str(other)).errors() if p.key == "teacher"]
    assert len(errors) == 1
    assert errors[0].sentence.startswith("the teacher other has another tokenizer than the "
                                         "model student")
    with pytest.raises(Exception, match="has another tokenizer"):
        distill_draft(student, str(other)).to_run(need_data=False)


def test_a_teacher_named_as_a_model_is_its_folder(tmp_path, isolated_home):
    student = model_with_tokenizer(tmp_path / "student", tokenizer_json({"a": 0}))
    teacher = model_with_tokenizer(isolated_home / "models" / "my-teacher",
                                   tokenizer_json({"a": 0}))
    draft = distill_draft(student, "my-teacher")
    assert SETTINGS["teacher"].get(draft.hyperparameters) == str(teacher.resolve())
    # The form's way: new settings over a draft.
    hp = Hyperparameters.from_dict(draft.hyperparameters.to_dict())
    SETTINGS["teacher"].set(hp, "my-teacher")
    assert SETTINGS["teacher"].get(draft.replace(hyperparameters=hp).hyperparameters) == \
        str(teacher.resolve())
    unknown = distill_draft(student, "no-such-teacher")
    assert any(p.key == "teacher" and "no-such-teacher" in p.sentence
               for p in unknown.errors())


def test_on_policy_distillation_needs_rows_with_prompts(tmp_path):
    student = model_with_tokenizer(tmp_path / "student", tokenizer_json({"a": 0}))
    teacher = model_with_tokenizer(tmp_path / "teacher", tokenizer_json({"a": 0}))
    text = tmp_path / "text"
    text.mkdir()
    (text / "train.jsonl").write_text('{"text": "a"}\n' * 8)
    draft = distill_draft(student, str(teacher), text, on_policy=True)
    assert [p.key for p in draft.errors()] == ["on_policy"]
    assert distill_draft(student, str(teacher), text).errors() == []


def test_the_estimate_counts_the_teachers_weights_and_what_it_hands_the_step(tmp_path):
    student = ModelFacts.from_folder(write_model(tmp_path / "student"))
    teacher_folder = write_model(tmp_path / "teacher", llama_config(hidden_size=2 * HIDDEN),
                                 llama_tensors("F32"))
    teacher_weights = sum(t[3] for t in llama_tensors("F32"))
    hp = Hyperparameters(batch_size=2, max_seq_length=256, num_layers=-1)
    SETTINGS["objective"].set(hp, "distill")
    SETTINGS["teacher"].set(hp, str(teacher_folder))
    SETTINGS["loss_chunk_tokens"].set(hp, "off")
    config = TrainingConfig.from_hyperparameters(Method.LORA, hp, longest_row_tokens=100)
    tokens = 2 * config.model_tokens
    whole = advisor().estimate(student, config)
    assert whole.breakdown["teacher"] == round(teacher_weights
                                               + (1 + KL_COPIES) * tokens * VOCAB * FLOAT32)
    assert sum(whole.breakdown.values()) == whole.total_bytes
    # Sliced, the teacher hands over its last hidden states (in its dtype: float32 here).
    sliced = advisor().estimate(student, config.replace(loss_chunk_tokens=32))
    slices = min(tokens / 32, CHUNKED_SLICES_AT_ONCE)
    assert sliced.breakdown["teacher"] == round(
        teacher_weights + tokens * 2 * HIDDEN * 4
        + KL_SLICE_COPIES * slices * 32 * VOCAB * FLOAT32)
    # An SFT run has no teacher line; on policy, rows grow by the answers.
    SETTINGS["objective"].set(hp, "sft")
    sft = advisor().estimate(student, TrainingConfig.from_hyperparameters(
        Method.LORA, hp, longest_row_tokens=100))
    assert "teacher" not in sft.breakdown
    SETTINGS["objective"].set(hp, "distill")
    SETTINGS["on_policy"].set(hp, True)
    SETTINGS["max_completion_tokens"].set(hp, 64)
    on_policy = TrainingConfig.from_hyperparameters(Method.LORA, hp, longest_row_tokens=100)
    assert (config.batch_width, on_policy.batch_width) == (129, 193)


def test_a_teacher_relative_to_an_imported_config_is_found_beside_it(tmp_path):
    student = model_with_tokenizer(tmp_path / "student", tokenizer_json({"a": 0}))
    teacher = model_with_tokenizer(tmp_path / "configs" / "teacher", tokenizer_json({"a": 0}))
    draft = RunDraft.from_mlx_config(
        {"model": str(student), "data": str(tmp_path),
         "zyquo_tui": {"objective": "distill", "teacher": "teacher"}},
        source="run.yaml", base_dir=tmp_path / "configs")
    assert SETTINGS["teacher"].get(draft.hyperparameters) == str(teacher.resolve())
