"""`zyquo-tui plan`: will this training config fit in memory, and what would?

Prints the estimated peak with its breakdown, the machine's budget, a verdict (fits, tight,
won't fit) with its reason, and changed configs that fit; beside it the disk verdict (the run's
checkpoints against the free space of the store's disk). The verdict is judged by the peak a
replica predicts (core/memory/replica.py: the config trained for a few steps on a copy of the
model with every width divided by up to 16, seconds and a fraction of the memory), or by the
terms' estimate alone with `--no-replica` or where no replica can stand for the config (the
`replica` line says why). `--measure` trains a few real steps
and prints the measured peak beside the estimate (and remembers it, to correct later
estimates on this machine). Exit status: 0 fits or tight, 1 won't fit (in memory or on disk),
2 bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zyquo_tui.cli.output import print_json, print_table
from zyquo_tui.cli.run_drafts import draft_from_command_line
from zyquo_tui.cli.setting_flags import add_setting_flags, settings_given
from zyquo_tui.core.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, UserError
from zyquo_tui.core.formatting import fmt_bytes
from zyquo_tui.core.library.run_checks import dataset_folder_problem
from zyquo_tui.core.library.token_stats import row_token_lengths
from zyquo_tui.core.memory.advisor import MemoryAdvisor, Plan, Verdict
from zyquo_tui.core.memory.disk_verdict import (
    DISK_SETTINGS,
    DiskAssessment,
    assess_disk,
)
from zyquo_tui.core.memory.estimate import TERMS, TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.host_verdicts import (
    host_verdicts,
    known_hosts,
    placed_advisor,
    placement_of,
    worst,
)
from zyquo_tui.core.memory.measure import Measurement, measure_peak
from zyquo_tui.core.runs.hosts import distribution_problems
from zyquo_tui.core.runs.mlx_config import load_mlx_yaml
from zyquo_tui.core.runs.problems import errors_in
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.setup.draft import RunDraft
from zyquo_tui.core.setup.verdicts import duration as draft_duration
from zyquo_tui.core.setup.verdicts import judged_by_replica

# Settings that change how long a run takes and not its memory (core/memory/duration.py).
DURATION_SETTINGS = frozenset({"iters", "steps_per_eval", "val_batches"})
# Where the ranks of a distributed run train: its verdict is per host
# (core/memory/host_verdicts.py).
PLACEMENT_SETTINGS = frozenset({"ranks", "hosts", "hostfile"})


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan", help="estimate a training config's peak memory, judge it, suggest what fits")
    parser.add_argument("--model", help="model folder (MLX format), or a name from "
                        "`zyquo-tui models`")
    parser.add_argument("--data", help="dataset folder: its longest tokenized row sets the "
                        "sequence length, and suggestions count the rows they cut")
    parser.add_argument("--method", choices=[m.value for m in Method])
    # Every flag of `runs new`, so that a `runs new` line becomes a plan by its first words:
    # those that cost no memory and no time are taken and change nothing here.
    add_setting_flags(parser)
    parser.add_argument("--config", type=Path, help="an mlx-lm YAML config to start from "
                        "(flags override it)")
    parser.add_argument("--name", help="taken, as `runs new` takes it; a plan makes no run")
    parser.add_argument("--measure", action="store_true",
                        help="also train a few real steps and report the measured peak")
    parser.add_argument("--no-replica", action="store_true",
                        help="judge by the terms' estimate alone, without measuring a replica "
                             "(every width divided by up to 16: seconds, a fraction of the "
                             "memory)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)


def _draft(args) -> RunDraft:
    """The draft `runs new` would make of these flags and config (its dataset optional)."""
    config: dict[str, Any] = {}
    if args.config is not None:
        config = load_mlx_yaml(args.config)
        if not (args.model or config.get("model")):
            raise UserError(f"{args.config}: the config has no model; add `model: PATH` or "
                            "give --model.")
    elif not args.model:
        raise UserError("plan needs --model PATH (or --config FILE naming a model).")
    no_data = not (args.data or config.get("data"))
    if no_data and args.config is not None:
        config["data"] = "-"  # plan needs no data; a config's draft does
    draft = draft_from_command_line(
        config, source=str(args.config) if args.config else "the command line",
        base_dir=args.config.parent if args.config else None, refused="",
        model=args.model, data=args.data, settings=settings_given(args), method=args.method,
        config_file=args.config)
    if no_data:
        draft = draft.replace(data=None, data_path=None)
        if draft.epochs is not None:
            raise UserError("--epochs needs --data: an epoch is a pass over train.jsonl, and "
                            "its rows and the batch size make it into iterations.")
    if draft.data is not None:
        problem = dataset_folder_problem(draft.data)
        if problem is not None:
            raise UserError(problem.sentence)
        refusal = draft.offered_objectives()[draft.objective]
        if refusal is not None:
            raise UserError(f"{draft.data_path}: {refusal}")
    return draft


def run(args) -> int:
    draft = _draft(args)
    model_path, data, method = draft.model_path, draft.data_path, draft.method
    hp, extra = draft.hyperparameters, draft.extra_config
    assert model_path is not None
    facts = ModelFacts.from_folder(model_path)
    config = TrainingConfig.from_hyperparameters(method, hp)
    # The memory settings are checked by the config; the rest plan reads, by their own
    # definitions' checks (a zero save_every would count a checkpoint a step).
    checked = PLACEMENT_SETTINGS | DISK_SETTINGS | DURATION_SETTINGS
    # Whatever `runs new` would refuse is bad input here too (a reward no run can call, a
    # teacher with another tokenizer): a plan of a run that cannot be made is no plan.
    bad = draft.errors()
    bad += config.problems() + errors_in(hp.problems(method, only=checked))
    bad += distribution_problems(hp.batch_size, hp.zyquo_tui)
    if bad:
        raise UserError(bad[0].sentence)
    placement = placement_of(hp.zyquo_tui)

    lengths: list[int] | None = None
    if data is not None:
        try:
            lengths = row_token_lengths(model_path, data, extra)
        except UserError as error:
            raise UserError(f"The rows of {data} could not be tokenized: {error.message}",
                            EXIT_USAGE) from None
        if not lengths:
            raise UserError(f"{data}/train.jsonl has no rows.")

    from zyquo_tui.core.store.user_settings import Settings

    # Judged against the run's memory limit, or config.toml's, where it is below the budget.
    advisor = placed_advisor(MemoryAdvisor.for_machine().within(
        hp, Settings.load().memory_limit_bytes), placement)
    try:
        from zyquo_tui.core.store.store import RunStore

        advisor.history.import_runs(RunStore().iter_runs())
    except (OSError, UserError):
        pass  # a store that cannot be read costs the correction, not the plan
    plan = advisor.plan(facts, config, lengths)
    if plan.estimate.problems:
        raise UserError(plan.estimate.problems[0])
    replica_skipped = "not measured (--no-replica)"
    if not args.no_replica:
        replica, replica_skipped = advisor.replica_estimate(
            facts, plan.estimate, hyperparameters=hp, extra_config=extra)
        plan = judged_by_replica(plan, advisor, replica)
    hosts = (host_verdicts(plan.assessment, advisor, placement, known_hosts(None))
             if placement.distribution else [])
    decisive = worst(hosts)

    measurement: Measurement | None = None
    skipped = None
    if args.measure:
        if plan.assessment.verdict is Verdict.WONT_FIT:
            skipped = ("not measured: the config won't fit, and training it could exhaust the "
                       "machine's memory")
        else:
            # One rank's share of the batch: what one process of the run trains.
            measurement = measure_peak(model_path, advisor.rank_config(plan.estimate.config),
                                       data=data, hyperparameters=hp, extra_config=extra)
            advisor.record_measurement(facts, plan.estimate, measurement)

    disk = _disk(facts, plan, hp)
    from zyquo_tui.core.store.store import RunStore

    duration = draft_duration(draft, facts, RunStore(), lengths,
                              measurement.tokens_per_second if measurement else None)
    if args.json:
        data_json = {**_json(plan, measurement, skipped, lengths), **disk.to_json()}
        data_json["replica_skipped"] = replica_skipped
        data_json["world_size"] = placement.world_size
        if placement.distribution:
            data_json["per_rank_batch_size"] = advisor.rank_config(config).batch_size
            data_json["hosts"] = [host.to_json() for host in hosts]
            if decisive is not None and not decisive.local:
                data_json["verdict"] = decisive.verdict.value
                data_json["reason"] = f"{decisive.host}: {decisive.reason}"
        data_json["iters"] = hp.iters
        data_json["epochs"] = draft.epochs
        data_json["duration_seconds"] = (None if duration.seconds is None
                                         else round(duration.seconds, 1))
        data_json["duration_basis"] = duration.basis
        print_json(data_json)
    else:
        _print(plan, facts, measurement, skipped, lengths)
        if replica_skipped and not args.no_replica:
            print(f"replica   {replica_skipped}")
        for host in hosts:
            ranks = ", ".join(map(str, host.ranks))
            verdict = host.verdict.value if host.verdict else "unknown"
            name = "this machine" if host.local else host.host
            print(f"host      {name} (rank{'s' if len(host.ranks) > 1 else ''} {ranks}): "
                  f"{verdict}: {host.reason.removeprefix('unknown: ')}")
        print(f"disk      {disk.verdict.value if disk.verdict else 'unknown'}: {disk.reason}")
        print(f"steps     {_steps_text(draft)}")
        print(f"duration  {_duration_text(duration)}")
    memory = decisive.verdict if decisive is not None else plan.assessment.verdict
    wont_fit = Verdict.WONT_FIT in (memory, disk.verdict)
    return EXIT_PROBLEMS if wont_fit else EXIT_OK


def _disk(facts: ModelFacts, plan: Plan, hp: Hyperparameters) -> DiskAssessment:
    """The disk verdict beside the memory one: the run's checkpoints on the store's disk."""
    from zyquo_tui.core.store.paths import zyquo_home

    return assess_disk(facts, plan.estimate.config, hp, home=zyquo_home())


def _json(plan: Plan, measurement: Measurement | None, skipped: str | None,
          lengths: list[int] | None) -> dict[str, Any]:
    data = plan.to_json()
    data["objective"] = plan.estimate.config.objective
    config = plan.estimate.config
    data["packed_width"] = (config.attention_width
                            if config.packed and config.objective == "sft" else None)
    data["longest_row_tokens"] = max(lengths) if lengths else None
    data["rows"] = len(lengths) if lengths else None
    if measurement is not None or skipped is not None:
        data["measured_peak_bytes"] = measurement.peak_bytes if measurement else None
        if measurement is not None:
            data["measured_error"] = round(
                (plan.estimate.total_bytes - measurement.peak_bytes) / measurement.peak_bytes, 4)
            data["measure_seconds"] = measurement.seconds
            data["measured_peak_rss_bytes"] = measurement.peak_rss_bytes
            data["measured_start_rss_bytes"] = measurement.start_rss_bytes
            data["measured_ready_rss_bytes"] = measurement.ready_rss_bytes
        else:
            data["measure_skipped"] = skipped
    return data


def _print(plan: Plan, facts: ModelFacts, measurement: Measurement | None, skipped: str | None,
           lengths: list[int] | None) -> None:
    estimate = plan.estimate
    config = estimate.config
    budget = plan.assessment.budget
    quantized = f", {facts.quantization_bits}-bit" if facts.quantized else ""
    print(f"model     {facts.path} ({facts.model_type or 'unknown'}, {facts.num_layers} layers, "
          f"{facts.compute_dtype}{quantized})")
    parts = [config.method.value, f"batch {config.batch_size}"]
    if config.objective != "sft":
        parts[0] += f" {config.objective}"
    if config.grad_accumulation_steps > 1:
        parts[-1] += f" x {config.grad_accumulation_steps} accumulated"
    sequence = f"{estimate.batch_width} tokens per row"
    if lengths:
        longest = max(lengths)
        # Say why the width differs from the longest row: the trainer pads a batch up to a
        # multiple of 32 (plus the shifted token), as mlx-lm does, and cuts at max_seq_length.
        how = ("" if longest == estimate.batch_width
               else ", and its longest answer" if config.objective == "grpo"
               else ", cut to max_seq_length" if longest > estimate.batch_width
               else ", padded as mlx-lm pads a batch")
        sequence += f" (the longest of {len(lengths)} rows has {longest} tokens{how})"
    parts.append(sequence)
    if config.packed and config.objective == "sft":
        parts.append(f"rows packed into sequences of up to {config.attention_width} tokens, "
                     "attention kept inside each row")
    if config.objective == "grpo":
        parts.append(f"{config.group_size} sampled answers a prompt, up to "
                     f"{config.completion_tokens} tokens each")
    elif config.sequences_per_row > 1:
        parts.append("2 sequences a row (chosen, rejected)")
    parts.append(f"{estimate.trained_layers} layers trained")
    if config.method is not Method.FULL:
        parts.append(f"rank {config.rank}")
    if config.grad_checkpoint:
        parts.append("grad checkpointing")
    parts.append(config.optimizer)
    if isinstance(estimate.loss_chunk_tokens, int):
        parts.append(f"loss in slices of {estimate.loss_chunk_tokens} tokens")
    print(f"config    {', '.join(parts)}")
    print()
    rows = [[name.replace("_", " "), fmt_bytes(estimate.breakdown.get(name, 0))]
            for name in TERMS]
    if "reference" in estimate.breakdown:
        rows.append(["reference (a frozen copy)", fmt_bytes(estimate.breakdown["reference"])])
    if "teacher" in estimate.breakdown:
        rows.append(["teacher (its weights and log-probabilities)",
                     fmt_bytes(estimate.breakdown["teacher"])])
    if estimate.breakdown.get("generation"):  # a grpo run's sampling, above the step's peak
        rows.append(["sampling (KV cache)", fmt_bytes(estimate.breakdown["generation"])])
    for name in ("history_correction", "replica_correction"):
        if name in estimate.breakdown:
            rows.append([name.replace("_", " "), fmt_bytes(estimate.breakdown[name])])
    rows.append(["estimated peak", fmt_bytes(estimate.total_bytes)])
    if measurement is not None:
        error = (estimate.total_bytes - measurement.peak_bytes) / measurement.peak_bytes
        rows.append(["measured peak", f"{fmt_bytes(measurement.peak_bytes)} "
                     f"(estimate {error:+.0%}, {measurement.seconds:.0f} s)"])
    print_table(["TERM", "BYTES"], rows)
    print()
    print(f"budget    {fmt_bytes(budget.budget_bytes)} ({budget.budget_source}); "
          f"{fmt_bytes(budget.available_bytes)} free now, other processes use "
          f"{fmt_bytes(budget.used_by_others_bytes)}")
    print(f"verdict   {plan.assessment.verdict.value}: {plan.assessment.reason}")
    for note in estimate.notes:
        print(f"note      {note}")
    if skipped:
        print(f"measure   {skipped}")
    if plan.suggestions:
        print()
        print("Changes that fit:")
        for number, suggestion in enumerate(plan.suggestions, start=1):
            print(f"  {number}. {suggestion.title}: about "
                  f"{fmt_bytes(suggestion.estimate.total_bytes)}")
    elif plan.assessment.verdict is not Verdict.FITS:
        print()
        print("No change the search tries makes it fit; use a smaller model or a bigger machine.")


def _steps_text(draft: RunDraft) -> str:
    """The iterations, and the epochs that made them (or the epochs they make)."""
    iters, plan = draft.hyperparameters.iters, draft.epoch_plan()
    if plan is None:
        return f"{iters} iterations"
    if draft.epochs is not None:
        return f"{iters} iterations: {draft.epochs} epochs of {plan.per_epoch()}"
    return f"{iters} iterations: {plan.epochs_in(iters):.2f} epochs of {plan.per_epoch()}"


def _duration_text(duration) -> str:
    from zyquo_tui.core.formatting import fmt_duration

    if duration.seconds is None:
        return duration.sentence()
    return f"about {fmt_duration(duration.seconds)} ({duration.sentence()})"
