"""The icon and its menu: the presenter, the surfaces, notifications, opening files."""
