"""The server's routes by area, each a small async function of the request; server/app.py
assembles them behind the key (server/requests.py)."""
