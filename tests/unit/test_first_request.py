"""loadtest.measure.first_request's one-model repository: the config as it is, or without its warmup, written
through export.config; the model's other files linked, not copied."""

from pathlib import Path

from export import config as config_io
from loadtest.measure import first_request

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"


def test_without_warmup_only_the_warmup_goes(tmp_path):
    count = first_request._single_model_repository(REPOSITORY, "digits", tmp_path / "off", keep_warmup=False)
    assert count == 0
    written = config_io.read(tmp_path / "off" / "digits")
    assert written == config_io.read(REPOSITORY / "digits").replace(warmup=False)
    assert (tmp_path / "off" / "digits" / "1").is_symlink()


def test_with_warmup_the_config_is_the_repositorys(tmp_path):
    count = first_request._single_model_repository(REPOSITORY, "digits", tmp_path / "on", keep_warmup=True)
    assert count == len(config_io.parse(REPOSITORY / "digits" / "config.pbtxt").model_warmup) == 2
    assert (tmp_path / "on" / "digits" / "config.pbtxt").read_text() == (REPOSITORY / "digits" / "config.pbtxt").read_text()
