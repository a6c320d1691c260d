"""The load-generator seam (loadtest/measure/generators.py): perf_analyzer and Locust behind one interface,
each run with its own settings, an unknown generator or a bad setting refused by name."""

import pytest

from loadtest.drive.target import Endpoints
from loadtest.errors import LoadTestError
from loadtest.measure import generators, probe
from loadtest.measure.probe import Load, Measurement

ENDPOINTS = Endpoints("127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3/metrics")


def _recording(monkeypatch, name: str) -> list[tuple[tuple, dict]]:
    """Replaces ``probe.<name>`` by a recorder of its calls (each answered by a plain measurement)."""
    calls: list[tuple[tuple, dict]] = []

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return Measurement(100.0, 1.0, 2.0, 0.0, name)

    monkeypatch.setattr(probe, name, record)
    return calls


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kind": "wrk"}, "generator 'wrk' is not one of perf_analyzer, locust"),
        ({"kind": "perf_analyzer", "protocol": "udp"}, "protocol 'udp' is not one of grpc, http"),
        ({"kind": "locust"}, "work: Locust needs a folder"),
    ],
)
def test_a_generator_with_a_bad_setting_is_refused_naming_it(kwargs, message):
    with pytest.raises(LoadTestError, match=message):
        generators.generator(endpoints=ENDPOINTS, **kwargs)


def test_the_perf_analyzer_generator_runs_perf_analyzer_with_its_settings_and_the_schedule(monkeypatch, tmp_path):
    pa, locust = _recording(monkeypatch, "with_perf_analyzer"), _recording(monkeypatch, "with_locust")
    data, intervals = tmp_path / "input_data.json", tmp_path / "intervals.txt"
    generator = generators.generator(
        "perf_analyzer", ENDPOINTS, protocol="http", budget_ms=5.0, input_data=data, measurement_ms=800, max_trials=3
    )
    measured = generator.measure("digits", "digits_onnx", Load(rate=40.0), label="ignored", request_intervals=intervals)
    assert measured.generator == "with_perf_analyzer" and not locust
    assert pa == [
        (
            (ENDPOINTS, "digits_onnx", Load(rate=40.0)),
            {
                "protocol": "http",
                "input_data": data,
                "measurement_ms": 800,
                "max_trials": 3,
                "budget_ms": 5.0,
                "request_intervals": intervals,
            },
        )
    ]
    assert generator.measured_s == 0.8  # one window


def test_the_locust_generator_runs_locust_with_its_settings_and_names_each_run(monkeypatch, tmp_path, capsys):
    locust, pa = _recording(monkeypatch, "with_locust"), _recording(monkeypatch, "with_perf_analyzer")
    work = tmp_path / "reports" / "runs"
    generator = generators.generator(
        "locust", ENDPOINTS, budget_ms=9.0, work=work, payload={"seed": 1}, duration_s=6.0, processes=2
    )
    generator.measure("text_embedder", "text_embedder", Load(users=4))
    generator.measure("text_embedder", "text_embedder", Load(users=4))
    generator.measure("text_embedder", "text_embedder_v2", Load(users=4), label="B-1")
    assert work.is_dir() and not pa  # made for the runs' files
    assert [args[:6] for args, _ in locust] == [
        (ENDPOINTS, "text_embedder", "text_embedder", Load(users=4), work, "text_embedder-1"),
        (ENDPOINTS, "text_embedder", "text_embedder", Load(users=4), work, "text_embedder-2"),
        (ENDPOINTS, "text_embedder", "text_embedder_v2", Load(users=4), work, "B-1"),
    ]
    kwargs = locust[0][1]
    assert {k: v for k, v in kwargs.items() if k != "log"} == {
        "protocol": "grpc",
        "duration_s": 6.0,
        "processes": 2,
        "payload": {"seed": 1},
        "budget_ms": 9.0,
    }
    kwargs["log"]("a progress line")
    assert capsys.readouterr().out == ""  # silent by default: the callers print one line per run
    assert generator.measured_s == 4.5  # 6 s less its warm-up of 6 / 4 s


def test_a_schedule_given_to_the_locust_generator_is_refused_before_any_run(monkeypatch, tmp_path):
    calls = _recording(monkeypatch, "with_locust")
    generator = generators.generator("locust", ENDPOINTS, work=tmp_path)
    with pytest.raises(LoadTestError, match="request_intervals is perf_analyzer's schedule"):
        generator.measure("digits", "digits", Load(rate=40.0), request_intervals=tmp_path / "intervals.txt")
    assert not calls


def test_every_registered_generator_implements_the_interface_and_settings_of_another_are_left_out(tmp_path):
    assert generators.GENERATORS == ("perf_analyzer", "locust")
    for kind, cls in generators.REGISTRY.items():
        assert issubclass(cls, generators.LoadGenerator) and cls.kind == kind
        built = generators.generator(kind, ENDPOINTS, work=tmp_path, input_data=None, duration_s=4.0, max_trials=3)
        assert isinstance(built, cls) and built.measured_s > 0
