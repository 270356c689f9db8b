"""The dashboard's widgets, one a file."""
