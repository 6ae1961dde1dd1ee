"""The Homework router's web UI: the Guest Board (wall panel) and the phone page."""
