"""The user model of the tests (``tests/data/user_model.py``, a model the project does not know) and the
export arguments that make it ``scorer``: shared by the tests that export, record, tune and serve it."""

from __future__ import annotations

from pathlib import Path

USER_MODEL = Path(__file__).resolve().parent / "data" / "user_model.py"


def scorer_export_args(repository: Path, max_batch_size: int = 16) -> list[str]:
    """``export`` arguments (after ``tritonkit export`` or ``python -m export``) for the scorer in ``repository``."""
    return [
        "--model-file",
        f"{USER_MODEL}:build",
        "--name",
        "scorer",
        "--input",
        "features:FP32:16",
        "--output",
        "scores",
        "--max-batch-size",
        str(max_batch_size),
        "--repository",
        str(repository),
    ]
