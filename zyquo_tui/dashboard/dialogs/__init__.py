"""The dashboard's modal dialogs, one a file."""
