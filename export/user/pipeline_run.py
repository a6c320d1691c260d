"""The user's pipeline bound and run once in-process: which tensors each step takes, the sample through the
functions and the eager model, and the configs that follow (``export/user/pipeline.py`` writes them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch
from tritonclient.grpc import model_config_pb2 as mc

from backends import user_steps
from export.errors import SpecError, UserModelError
from export.spec import ModelSpec, TensorSpec
from export.user.pipeline_spec import PipelinePlan, Step, sample_array, step_spec


@dataclasses.dataclass
class Traced:
    """Every tensor of the sample's run, by name: pipeline inputs, model inputs, model outputs, pipeline outputs."""

    tensors: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


@dataclasses.dataclass
class Pipeline:
    name: str
    plan: PipelinePlan
    model: object  # ZooModel
    served: ModelSpec
    pre: tuple[Callable, list[TensorSpec]] | None
    post: tuple[Callable, list[TensorSpec]] | None
    called: str = ""
    """The exported variant the ensemble calls (set once the export is done); the model's name until then."""

    @classmethod
    def build(cls, plan: PipelinePlan, model, served: ModelSpec) -> Pipeline:
        name = plan.name or f"{model.name}_pipeline"
        model_inputs, model_outputs = list(served.inputs), list(served.outputs)
        pipeline_inputs = list(plan.inputs) if plan.preprocess else model_inputs
        _check_names(name, pipeline_inputs, model_inputs, model_outputs, list(plan.outputs), plan)
        pre = post = None
        if plan.preprocess:
            pre = _bound(plan.preprocess, f"{name}_preprocess", pipeline_inputs)
        if plan.postprocess:
            available = (pipeline_inputs if plan.preprocess else []) + model_inputs + model_outputs
            post = _bound(plan.postprocess, f"{name}_postprocess", available)
        used = {t.name for t in pre[1]} if pre else {t.name for t in model_inputs}
        used |= {t.name for t in post[1]} if post else set()
        unused = [t.name for t in pipeline_inputs if t.name not in used]
        if unused:
            raise SpecError(f"pipeline {name}: --pipeline-input {', '.join(unused)} is taken by no step")
        missing = [t.name for t in pipeline_inputs if t.name not in plan.samples]
        unknown = sorted(set(plan.samples) - {t.name for t in pipeline_inputs})
        if missing or unknown:
            raise SpecError(
                f"pipeline {name}: give one --pipeline-sample NAME=... for each pipeline input "
                f"({', '.join(t.name for t in pipeline_inputs)}); "
                + (f"missing {', '.join(missing)}" if missing else f"{', '.join(unknown)} is no pipeline input")
                + ": the steps warm up on it before the server is ready, and the export checks the pipeline on it"
            )
        return cls(name, plan, model, served, pre, post, served.name)

    @property
    def batched(self) -> bool:
        return self.served.max_batch_size > 0

    def _declared(self, tensors) -> list[user_steps.Declared]:
        return [user_steps.Declared(t.name, t.datatype, t.dims) for t in tensors]

    def run_sample(self) -> Traced:
        """The sample through preprocess, the eager model and postprocess, with the step code that serves."""
        inputs = self.plan.inputs if self.pre else self.served.inputs
        tensors = {t.name: sample_array(t, self.plan.samples[t.name], self.batched) for t in inputs}
        try:
            if self.pre:
                function, takes = self.pre
                where = f"{self.name}_preprocess: preprocess {self.plan.preprocess.function_name}"
                given = {t.name: tensors[t.name] for t in takes}
                tensors |= user_steps.run(function, given, self._declared(self.served.inputs), where)
            tensors |= self._eager({t.name: tensors[t.name] for t in self.served.inputs})
            if self.post:
                function, takes = self.post
                where = f"{self.name}_postprocess: postprocess {self.plan.postprocess.function_name}"
                given = {t.name: tensors[t.name] for t in takes}
                outputs = user_steps.run(function, given, self._declared(self.plan.outputs), where)
            else:
                outputs = {t.name: tensors[t.name] for t in self.served.outputs}
        except user_steps.StepError as exc:
            raise UserModelError(f"pipeline {self.name}, on --pipeline-sample: {exc}") from None
        return Traced(tensors | outputs, outputs)

    def _eager(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self.batched:  # the eager module always takes a batch
            inputs = {k: v[np.newaxis] for k, v in inputs.items()}
        with torch.no_grad():
            result = self.model.module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs.values()))
        results = result if isinstance(result, tuple) else (result,)
        named = {t.name: r.numpy() for t, r in zip(self.served.outputs, results, strict=True)}
        return named if self.batched else {k: v[0] for k, v in named.items()}

    def step_specs(self, traced: Traced):
        """(spec, step, warmup arrays) of each Python step; the warmup arrays are the sample's tensors."""
        mbs = self.served.max_batch_size
        for bound, step, outputs in (
            (self.pre, self.plan.preprocess, self.served.inputs),
            (self.post, self.plan.postprocess, self.plan.outputs),
        ):
            if bound is None:
                continue
            takes = bound[1]
            warm = {t.name: traced.tensors[t.name] for t in takes}
            yield step_spec(f"{self.name}_{step.kind}", takes, outputs, mbs, step, warm), step, warm

    def ensemble_config(self) -> mc.ModelConfig:
        inputs = self.plan.inputs if self.pre else self.served.inputs
        outputs = self.plan.outputs if self.post else self.served.outputs
        config = mc.ModelConfig(name=self.name, platform="ensemble", max_batch_size=self.served.max_batch_size)
        for tensor in inputs:
            config.input.append(
                mc.ModelInput(name=tensor.name, data_type=mc.DataType.Value(tensor.config_datatype), dims=tensor.dims)
            )
        for tensor in outputs:
            config.output.append(
                mc.ModelOutput(name=tensor.name, data_type=mc.DataType.Value(tensor.config_datatype), dims=tensor.dims)
            )
        post_takes = {t.name for t in self.post[1]} if self.post else set()
        steps = []
        if self.pre:
            steps.append((f"{self.name}_preprocess", self.pre[1], self.served.inputs))
        model_outputs = [t for t in self.served.outputs if not self.post or t.name in post_takes]
        steps.append((self.called, self.served.inputs, model_outputs))
        if self.post:
            steps.append((f"{self.name}_postprocess", self.post[1], self.plan.outputs))
        for model_name, takes, gives in steps:
            step = config.ensemble_scheduling.step.add(model_name=model_name, model_version=-1)
            for tensor in takes:
                step.input_map[tensor.name] = tensor.name
            for tensor in gives:
                step.output_map[tensor.name] = tensor.name
        return config


def _bound(step: Step, model_name: str, available: list[TensorSpec]) -> tuple[Callable, list[TensorSpec]]:
    function = step.load(model_name)
    where = f"--{step.kind} {step.reference}"
    try:
        names = user_steps.parameters(function, [t.name for t in available], where)
    except user_steps.StepError as exc:
        raise SpecError(str(exc)) from None
    return function, [t for t in available if t.name in names]


def _check_names(name, pipeline_inputs, model_inputs, model_outputs, pipeline_outputs, plan: PipelinePlan) -> None:
    """One name, one tensor: the ensemble maps tensors by name across its steps."""
    groups = {"the model's inputs": model_inputs, "the model's outputs": model_outputs}
    if plan.preprocess:
        groups["--pipeline-input"] = pipeline_inputs
    if plan.postprocess:
        groups["--pipeline-output"] = pipeline_outputs
    seen: dict[str, str] = {}
    for group, tensors in groups.items():
        for tensor in tensors:
            if tensor.name in seen:
                raise SpecError(
                    f"pipeline {name}: tensor name {tensor.name!r} is in both {seen[tensor.name]} and {group}; "
                    f"the ensemble maps tensors by name, so give the pipeline's own tensors other names"
                )
            seen[tensor.name] = group
