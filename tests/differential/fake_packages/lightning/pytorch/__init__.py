"""lightning.pytorch (the stand-in): the same Trainer."""

from lightning import MisconfigurationException, Trainer  # noqa: F401
