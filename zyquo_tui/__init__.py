"""zyquo-tui: a keyboard-driven terminal dashboard for MLX fine-tuning."""

__version__ = "0.1.0"
