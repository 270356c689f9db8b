"""The dashboard's full screens, one a file."""
