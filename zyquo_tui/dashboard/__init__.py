"""The Textual dashboard: every line of Textual lives in this package."""
