"""What Triton fills in when it loads a config that leaves it out: ``without_server_defaults`` takes it out of a
served config (``get_model_config``), so it reads back as the spec that was written (``export.config.from_json``);
``as_served`` adds it to a spec, to compare with what the server serves. ``export.config`` exports both."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from export.formats import registry as formats
from export.spec import ModelSpec


def _default_backend(platform: str) -> str | None:
    """The backend Triton fills in for ``platform`` when a config leaves it out (see without_server_defaults):
    the export format's (export/formats/); an ensemble has none."""
    fmt = formats.of_platform(platform)
    return fmt.backend if fmt else {"ensemble": ""}.get(platform)


def _default_filename(platform: str) -> str | None:
    """The model file Triton fills in for ``platform``: the export format's, ``model.py`` for a Python model."""
    fmt = formats.of_platform(platform)
    return fmt.filename if fmt else {"python": "model.py", "ensemble": ""}.get(platform)


def without_server_defaults(config: mc.ModelConfig) -> mc.ModelConfig:
    """A copy of a served config without what Triton adds when it loads one that leaves it out: the backend
    and default file name of the platform, the runtime, instance group names, pinned-memory flags, an empty
    queue or transaction policy, and the device list of a ``KIND_GPU`` group when it is every GPU from 0
    (what Triton fills in; a group pinned to other devices stays, and ``from_model_config`` refuses it).
    Triton's other additions (``version_policy`` latest 1, ``preferred_batch_size`` = max_batch_size when
    none was given) are real settings and stay."""
    served = mc.ModelConfig()
    served.CopyFrom(config)
    platform = served.platform or served.backend
    if served.platform and served.backend == _default_backend(served.platform):
        served.ClearField("backend")
    if served.runtime in ("model.py", f"libtriton_{served.backend or _default_backend(served.platform)}.so"):
        served.ClearField("runtime")
    if served.default_model_filename == _default_filename(platform):
        served.ClearField("default_model_filename")
    for index, group in enumerate(served.instance_group):
        if group.name == f"{served.name}_{index}":
            group.ClearField("name")
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and list(group.gpus) == list(range(len(group.gpus))):
            group.ClearField("gpus")
    optimization = served.optimization
    for pinned in (optimization.input_pinned_memory, optimization.output_pinned_memory):
        if pinned.enable:
            pinned.ClearField("enable")
    for field in ("input_pinned_memory", "output_pinned_memory"):
        if optimization.HasField(field) and not getattr(optimization, field).ListFields():
            optimization.ClearField(field)
    if served.HasField("optimization") and not optimization.ListFields():
        served.ClearField("optimization")
    batching = served.dynamic_batching
    if (
        served.HasField("dynamic_batching")
        and batching.HasField("default_queue_policy")
        and not batching.default_queue_policy.ListFields()
    ):
        batching.ClearField("default_queue_policy")
    if served.HasField("model_transaction_policy") and not served.model_transaction_policy.ListFields():
        served.ClearField("model_transaction_policy")
    if served.HasField("response_cache") and not served.response_cache.ListFields():
        served.ClearField("response_cache")
    return served


def as_served(spec: ModelSpec) -> ModelSpec:
    """``spec`` as Triton serves it (``from_json(get_model_config(...))``): Triton's model-config normalisation
    gives a config without a version policy ``latest 1``, and a dynamic batcher without preferred sizes
    ``preferred_batch_size: max_batch_size``."""
    if spec.latest_versions is None:
        spec = spec.replace(latest_versions=1)
    batching = spec.dynamic_batching
    if batching is not None and not batching.preferred_batch_sizes:
        spec = spec.replace(dynamic_batching=batching.replace(preferred_batch_sizes=(spec.max_batch_size,)))
    return spec
