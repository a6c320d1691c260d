"""deploy/server.py: the local server's command line. Triton's config auto-completion is off unless a model
of the repository defines ``auto_complete_config`` (the Python backend starts a stub per load to run it)."""

from pathlib import Path

from deploy.server import DEFAULT_REPOSITORY, LocalServer, ServerConfig, completes_its_config

FLAG = "--disable-auto-complete-config"


def _python_model(repository: Path, name: str, source: str) -> None:
    version = repository / name / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(source)
    (repository / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n')


def _command(tmp_path: Path, **config) -> list[str]:
    return LocalServer(ServerConfig(**config), workdir=tmp_path / "work").command()


def test_the_projects_repository_defines_no_auto_complete_so_the_server_skips_it(tmp_path):
    assert not completes_its_config(DEFAULT_REPOSITORY)
    assert FLAG in _command(tmp_path, model_repository=DEFAULT_REPOSITORY)


def test_a_python_model_that_completes_its_config_keeps_auto_completion_on(tmp_path):
    repository = tmp_path / "repo"
    plain = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    _python_model(repository, "plain", plain)
    assert not completes_its_config(repository)
    assert FLAG in _command(tmp_path, model_repository=repository)
    _python_model(
        repository,
        "completing",
        "class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(config):\n        return config\n",
    )
    assert completes_its_config(repository)
    assert FLAG not in _command(tmp_path, model_repository=repository)


def test_an_explicit_setting_wins_over_what_the_repository_holds(tmp_path):
    assert FLAG not in _command(tmp_path, model_repository=DEFAULT_REPOSITORY, auto_complete=True)
    repository = tmp_path / "repo"
    _python_model(repository, "completing", "def auto_complete_config(config):\n    return config\n")
    assert FLAG in _command(tmp_path, model_repository=repository, auto_complete=False)
