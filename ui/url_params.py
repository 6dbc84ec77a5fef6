"""Placeholder: replaced by its owner."""


def sanitise() -> None:
    pass
