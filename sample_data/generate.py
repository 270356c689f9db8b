"""Write the sample datasets: one folder per mlx-lm data format, each with train/valid/test.jsonl.

Pure Python and deterministic: running it again rewrites the same bytes. The rows are short,
templated facts (capitals, colours, animal sounds, opposites, small sums, what comes next) so a
tiny random-initialised model learns them and its loss visibly falls within a few dozen LoRA steps.

    python sample_data/generate.py [OUT_DIR]     # OUT_DIR defaults to the folder of this script
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 20240601
N_VALID = 40
N_TEST = 40
SPLITS = ("train", "valid", "test")
FORMATS = ("completions", "chat", "text", "preference", "rl")

CAPITALS = [
    ("France", "Paris"), ("Spain", "Madrid"), ("Italy", "Rome"), ("Germany", "Berlin"),
    ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Peru", "Lima"), ("Kenya", "Nairobi"),
    ("Norway", "Oslo"), ("Greece", "Athens"), ("Poland", "Warsaw"), ("Cuba", "Havana"),
    ("Chile", "Santiago"), ("Ireland", "Dublin"), ("Austria", "Vienna"), ("Portugal", "Lisbon"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Canada", "Ottawa"), ("Russia", "Moscow"),
    ("China", "Beijing"), ("India", "New Delhi"), ("Mexico", "Mexico City"), ("Brazil", "Brasilia"),
]

COLOURS = [
    ("the sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"),
    ("a banana", "yellow"), ("a tomato", "red"), ("an orange", "orange"), ("a lemon", "yellow"),
    ("a frog", "green"), ("milk", "white"), ("a strawberry", "red"), ("the sea", "blue"),
    ("a carrot", "orange"), ("a crow", "black"), ("a plum", "purple"), ("a cloud", "white"),
    ("a lime", "green"), ("an aubergine", "purple"), ("chocolate", "brown"), ("a flamingo", "pink"),
]

SOUNDS = [
    ("cow", "moo"), ("dog", "woof"), ("cat", "meow"), ("duck", "quack"), ("sheep", "baa"),
    ("pig", "oink"), ("owl", "hoot"), ("horse", "neigh"), ("lion", "roar"), ("snake", "hiss"),
    ("mouse", "squeak"), ("frog", "croak"), ("bee", "buzz"), ("crow", "caw"),
]

OPPOSITES = [
    ("hot", "cold"), ("big", "small"), ("up", "down"), ("fast", "slow"), ("day", "night"),
    ("left", "right"), ("open", "closed"), ("wet", "dry"), ("old", "new"), ("happy", "sad"),
    ("light", "dark"), ("early", "late"), ("full", "empty"), ("hard", "soft"), ("loud", "quiet"),
    ("high", "low"),
]

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
]
NUMBER_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
]

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "Answer in one short sentence.",
]


def _facts() -> list[dict]:
    """Every fact once, in a fixed order: a question, the right answer and a wrong one.

    ``wrong`` is picked by a rule (the next item of the same kind), not by chance, so the
    preference rows need no randomness of their own.
    """
    facts: list[dict] = []

    def add(question: str, answer: str, wrong: str) -> None:
        facts.append({"question": question, "answer": answer, "wrong": wrong})

    for i, (country, city) in enumerate(CAPITALS):
        other = CAPITALS[(i + 1) % len(CAPITALS)][1]
        add(f"What is the capital of {country}?",
            f"The capital of {country} is {city}.", f"The capital of {country} is {other}.")
        add(f"Which city is the capital of {country}?",
            f"{city} is the capital of {country}.", f"{other} is the capital of {country}.")
    colour_names = sorted({c for _, c in COLOURS})
    for thing, colour in COLOURS:
        other = colour_names[(colour_names.index(colour) + 1) % len(colour_names)]
        label = thing[0].upper() + thing[1:]
        add(f"What colour is {thing}?", f"{label} is {colour}.", f"{label} is {other}.")
    for i, (animal, sound) in enumerate(SOUNDS):
        other = SOUNDS[(i + 1) % len(SOUNDS)][1]
        add(f"What does a {animal} say?", f"A {animal} says {sound}.", f"A {animal} says {other}.")
    for i, (word, opposite) in enumerate(OPPOSITES):
        other = OPPOSITES[(i + 1) % len(OPPOSITES)][1]
        add(f"What is the opposite of {word}?",
            f"The opposite of {word} is {opposite}.", f"The opposite of {word} is {other}.")
        add(f"What is the opposite of {opposite}?",
            f"The opposite of {opposite} is {word}.", f"The opposite of {opposite} is {other}.")
    for a in range(10):
        for b in range(10):
            add(f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}.", f"{a} plus {b} is {a + b + 1}.")
    for a in range(10):
        for b in range(a + 1):
            add(f"What is {a} minus {b}?", f"{a} minus {b} is {a - b}.",
                f"{a} minus {b} is {a - b + 1}.")
    for i, day in enumerate(DAYS):
        nxt, wrong = DAYS[(i + 1) % 7], DAYS[(i + 2) % 7]
        add(f"What day comes after {day}?", f"After {day} comes {nxt}.", f"After {day} comes {wrong}.")
    for i, month in enumerate(MONTHS):
        nxt, wrong = MONTHS[(i + 1) % 12], MONTHS[(i + 2) % 12]
        add(f"What month comes after {month}?",
            f"After {month} comes {nxt}.", f"After {month} comes {wrong}.")
    for n in range(len(NUMBER_WORDS) - 2):
        word, nxt, wrong = NUMBER_WORDS[n], NUMBER_WORDS[n + 1], NUMBER_WORDS[n + 2]
        add(f"What number comes after {word}?",
            f"After {word} comes {nxt}.", f"After {word} comes {wrong}.")
    return facts


def _split(rows: list, seed: int) -> dict[str, list]:
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return {
        "valid": rows[:N_VALID],
        "test": rows[N_VALID:N_VALID + N_TEST],
        "train": rows[N_VALID + N_TEST:],
    }


def completions_rows(facts: list[dict]) -> list[dict]:
    return [{"prompt": f["question"], "completion": f["answer"]} for f in facts]


def chat_rows(facts: list[dict]) -> list[dict]:
    rows = []
    for i, f in enumerate(facts):
        messages = []
        # Two rows in three carry a system message, so both shapes of the template get used.
        if i % 3 != 2:
            messages.append({"role": "system", "content": SYSTEM_PROMPTS[i % 3]})
        messages.append({"role": "user", "content": f["question"]})
        messages.append({"role": "assistant", "content": f["answer"]})
        rows.append({"messages": messages})
    return rows


def text_rows(facts: list[dict]) -> list[dict]:
    return [{"text": f"Question: {f['question']} Answer: {f['answer']}"} for f in facts]


# Unhelpful replies: one pair in two prefers the answer to one of these, a preference a tiny
# model learns in a few dozen steps and carries to held-out rows. The other pairs reject a wrong
# fact of the same kind, which only memory of the facts can tell apart.
EVASIONS = [
    "I do not know.",
    "That is hard to say.",
    "Ask me something else.",
    "No idea, sorry.",
]


def preference_rows(facts: list[dict]) -> list[dict]:
    return [{"prompt": f["question"], "chosen": f["answer"],
             "rejected": f["wrong"] if i % 2 else EVASIONS[(i // 2) % len(EVASIONS)]}
            for i, f in enumerate(facts)]


def rl_rows(facts: list[dict]) -> list[dict]:
    """The sums and differences as prompts with their result: what a grpo run's exact_answer
    reward checks (the last number of a sampled answer), and what the SFT rows of the same
    questions teach the form of ("6 plus 9 is 15.")."""
    rows = []
    for f in facts:
        words = f["question"].rstrip("?").split()
        if len(words) == 5 and words[3] in ("plus", "minus"):
            a, b = int(words[2]), int(words[4])
            rows.append({"prompt": f["question"],
                         "answer": str(a + b if words[3] == "plus" else a - b)})
    return rows


BUILDERS = {
    "completions": completions_rows,
    "chat": chat_rows,
    "text": text_rows,
    "preference": preference_rows,
    "rl": rl_rows,
}


# rl/train.jsonl: this many questions, each this many times, so a short grpo run samples
# answers to each question often enough to learn it (the other splits are as for the rest).
RL_QUESTIONS = 8
RL_REPEATS = 8


def datasets() -> dict[str, dict[str, list[dict]]]:
    """{format: {split: rows}}, the whole content, built in memory."""
    facts = _facts()
    out = {}
    for k, name in enumerate(FORMATS):
        # Each format gets its own shuffle, so their splits hold different facts.
        out[name] = _split(BUILDERS[name](facts), SEED + k)
    rl = out["rl"]
    rl["train"] = rl["train"][:RL_QUESTIONS] * RL_REPEATS
    return out


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write(out_dir: Path) -> list[Path]:
    written = []
    for name, splits in datasets().items():
        folder = out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        for split in SPLITS:
            path = folder / f"{split}.jsonl"
            path.write_bytes(render(splits[split]).encode("utf-8"))
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir = Path(argv[0]) if argv else Path(__file__).resolve().parent
    for path in write(out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
