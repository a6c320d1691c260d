"""The load-generator seam (loadtest/generators/seam.py): perf_analyzer and Locust behind one interface,
each run with its own settings, an unknown generator or a bad setting refused by name."""

import ast
from pathlib import Path

import pytest

from loadtest.core.measurement import Load, Measurement
from loadtest.errors import LoadTestError
from loadtest.generators import probe
from loadtest.generators import seam as generators
from loadtest.target.endpoints import Endpoints

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
        "ttft_ms": None,
        "itl_ms": None,
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


def test_a_setting_a_generator_needs_is_refused_by_name_when_missing_or_none(monkeypatch, tmp_path):
    import dataclasses
    from pathlib import Path

    @dataclasses.dataclass(frozen=True)
    class Recorded(generators.Locust):
        kind = "recorded"
        title = "the recorder"
        tape: Path = dataclasses.field(default=None, metadata={"needs": "a tape to play"})

    monkeypatch.setitem(generators.REGISTRY, "recorded", Recorded)
    with pytest.raises(LoadTestError, match="^tape: the recorder needs a tape to play$"):
        generators.generator("recorded", ENDPOINTS, work=tmp_path)
    with pytest.raises(LoadTestError, match="^work: Locust needs a folder for its runs' files$"):
        generators.generator("locust", ENDPOINTS, work=None)
    built = generators.generator("recorded", ENDPOINTS, work=tmp_path, tape=tmp_path / "t")
    assert built.tape == tmp_path / "t"
    # perf_analyzer needs nothing beyond its endpoints
    assert generators.generator("perf_analyzer", ENDPOINTS).max_trials == 5


WINDOWS = [
    {"t": 0.0, "length_s": 2.0, "requests": 80, "failures": 0, "p50_ms": None, "p99_ms": 4.0},
    {"t": 2.0, "length_s": 2.0, "requests": 82, "failures": 0, "p50_ms": None, "p99_ms": 4.5},
]


def test_the_perf_analyzer_run_is_a_pass_per_window_at_the_rate_with_the_payloads_and_triton_s_failures(
    monkeypatch,
):
    served_configs, perf_calls, failures = [], [], iter([3.0, 5.0])
    monkeypatch.setattr(generators.apply, "served_config", lambda url, served: served_configs.append(url) or {"c": 1})
    monkeypatch.setattr(generators, "default_options", lambda served, options: (served, options.seed))
    monkeypatch.setattr(generators, "payloads", lambda config, options: [("sample", config, options)])
    monkeypatch.setattr(generators, "metrics", lambda url: url)
    monkeypatch.setattr(generators, "model_metric", lambda text, name, served: next(failures))

    def run(*args, **kwargs):
        perf_calls.append((args, kwargs))
        return {"windows": WINDOWS, "requests": 162, "throughput_rps": 40.5, "command": []}

    monkeypatch.setattr(generators.perf_windows, "run", run)
    log = print
    generator = generators.generator(
        "perf_analyzer", ENDPOINTS, protocol="http", payload={"seed": 7}, measurement_ms=2000, max_trials=2, log=log
    )
    record = generator.run("digits", "digits_onnx", Load(rate=40.0))
    samples = [("sample", {"c": 1}, ("digits_onnx", 7))]
    assert perf_calls == [
        (("digits_onnx", ENDPOINTS.http, "http", 40.0, 2, 2.0, samples), {"log": log, "config": {"c": 1}})
    ]
    assert served_configs == [ENDPOINTS.http]
    assert record.client.windows == WINDOWS and record.client.requests == 162
    assert record.client.duration_s == 4.0 and record.client.failures == 0
    assert record.server_failures == 2 and record.server is None
    with pytest.raises(LoadTestError, match="perf_analyzer's windowed run is an open loop"):
        generator.run("digits", "digits_onnx", Load(users=4))


def test_the_locust_run_keeps_the_whole_client_record_with_its_windows_warm_up_and_shape(monkeypatch, tmp_path):
    calls = []
    server = type("Server", (), {"failures": 3, "avg_batch": 2.0})()

    def measure_run(scenario, served, endpoints, work, label, log, extra):
        calls.append((scenario, served, endpoints, work, label, extra))
        return type("Client", (), {"windows": WINDOWS})(), server

    monkeypatch.setattr(generators, "measure_run", measure_run)
    work = tmp_path / "runs"
    generator = generators.generator(
        "locust",
        ENDPOINTS,
        work=work,
        payload={"seed": 1},
        duration_s=60.0,
        warmup_s=5.0,
        window_s=20.0,
        processes=1,
    )
    load = Load(rate=70.0, shape_keys=(("max_inflight", 64),))
    record = generator.run("digits", "digits", load, label="soak-digits")
    [(scenario, served, endpoints, folder, label, extra)] = calls
    assert (served, endpoints, folder, label, extra) == ("digits", ENDPOINTS, work, "soak-digits", {"window_s": 20.0})
    assert (scenario.name, scenario.model, scenario.protocol) == ("soak-digits", "digits", "grpc")
    assert scenario.shape == {"kind": "open", "rate": 70.0, "max_inflight": 64}
    assert (scenario.duration_s, scenario.warmup_s, scenario.processes) == (60.0, 5.0, 1)
    assert scenario.payload == {"seed": 1} and work.is_dir()
    assert record.client.windows == WINDOWS and record.server_failures == 3 and record.server is server

    # without a warm-up or window of its own: measure's warm-up, Locust's default window, its own run names
    plain = generators.generator("locust", ENDPOINTS, work=work, duration_s=8.0, processes=2)
    plain.run("digits", "digits", Load(users=4))
    scenario, *_, label, extra = calls[-1]
    assert (scenario.warmup_s, scenario.shape, label, extra) == (2.0, {"kind": "users", "users": 4}, "digits-1", None)


def test_a_locust_with_its_own_warm_up_refuses_measure_whose_warm_up_is_fixed(monkeypatch, tmp_path):
    calls = _recording(monkeypatch, "with_locust")
    generator = generators.generator("locust", ENDPOINTS, work=tmp_path, warmup_s=1.0)
    with pytest.raises(LoadTestError, match="warmup_s: Locust's measure leaves out probe.locust_warmup_s"):
        generator.measure("digits", "digits", Load(users=2))
    assert not calls


RUNS_LOCUST = {"run_locust", "measure_run", "measure_trial", "run_scenario"}
"""Every function of ``loadtest.generators.locust`` that starts a Locust run, and those the campaign and overload
called before they went through the seam (``measure_trial``, ``run_scenario``)."""


def locust_routes() -> dict[str, set[str]]:
    """Module -> the functions of ``loadtest.generators.locust`` that start a Locust run (``RUNS_LOCUST``) it imports,
    for every loadtest module outside ``loadtest.generators``: the commands' ways to Locust around the seam."""
    root = Path(__file__).resolve().parents[4]
    found: dict[str, set[str]] = {}
    for path in sorted((root / "loadtest").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        if module.startswith("loadtest.generators"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loadtest.generators.locust"):
                names = {a.name for a in node.names} & RUNS_LOCUST
                if names:
                    found.setdefault(module, set()).update(names)
    return found


def test_every_command_reaches_locust_through_the_generator_seam():
    # bench's FastAPI rows are the one exception: a FastAPI server has no Triton config or counters to read
    assert locust_routes() == {"loadtest.studies.bench.rows": {"run_locust"}}
