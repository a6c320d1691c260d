"""``resnet50``: the standard ResNet-50 (v1.5) architecture with random weights, for speed comparisons only.

Public interface: ``image`` FP32 [3, 224, 224] (``format: FORMAT_NCHW``), RGB scaled as ``(x / 255 - mean) / std``
with the ImageNet mean and std; ``logits`` FP32 [1000]. Its predictions mean nothing; it exists so that a
25.6M-parameter, 4 GFLOP convolutional network can be timed in each format and precision.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from backends import imaging
from export.spec import TensorSpec
from export.zoo.base import Tolerance, ZooModel, random_images

INPUTS = (TensorSpec("image", "FP32", (3, 224, 224), format="FORMAT_NCHW"),)
OUTPUTS = (TensorSpec("logits", "FP32", (1000,)),)
LAYERS = (3, 4, 6, 3)
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
SEED = 0


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        width, out = planes, planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)  # v1.5: stride on the 3x3
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages, inplanes = [], 64
        for i, blocks in enumerate(LAYERS):
            planes = 64 * 2**i
            stage = [Bottleneck(inplanes, planes, stride=1 if i == 0 else 2)]
            inplanes = planes * Bottleneck.expansion
            stage += [Bottleneck(inplanes, planes) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(image))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def random_inputs(batch: int, _seq: int | None, generator: torch.Generator) -> tuple[torch.Tensor]:
    return ((random_images(batch, generator) / 255.0 - MEAN) / STD,)


def load_samples() -> list[dict[str, np.ndarray]]:
    """Real photos (those of ``efficientnet_lite0``) as load-test requests: ``image`` [1, 3, 224, 224], resized,
    cropped and scaled with the ImageNet mean and std, as this model takes them."""
    from export.zoo.efficientnet import photos  # its photos, not its network

    mean, std = MEAN.numpy()[0], STD.numpy()[0]
    # imaging.preprocess resizes and crops to 224 and scales (x - 127) / 128: undo the scaling, apply ours.
    return [
        {"image": (((imaging.preprocess(image) * 128.0 + 127.0) / 255.0 - mean) / std).astype(np.float32)[None]}
        for _, image in photos()
    ]


def build() -> ZooModel:
    with torch.random.fork_rng(devices=[]):  # seeded weights without resetting the caller's generator
        torch.manual_seed(SEED)
        model = ResNet50().eval()
    return ZooModel(
        name="resnet50",
        module=model,
        inputs=INPUTS,
        outputs=OUTPUTS,
        example_inputs=random_inputs(2, None, torch.Generator().manual_seed(0)),
        random_inputs=random_inputs,
        reference_inputs=random_inputs(3, None, torch.Generator().manual_seed(1)),
        tolerances={
            # Default (torchvision) init with untouched BatchNorm statistics: logits reach about +-140.
            # Measured (torch 2.13 CPU): ONNX Runtime FP32 max abs 7.6e-5, TorchScript trace 0.
            "fp32": Tolerance(atol=1e-3, rtol=1e-3),
            # FP16 weights and inputs on CPU: max abs error 0.105 on random images, 0.046 beyond rtol 0.01;
            # bound ~5x above that.
            "fp16": Tolerance(atol=0.25, rtol=0.01),
        },
        real_data_check=None,
        description="ResNet-50 v1.5 architecture, random weights, for speed comparisons only",
    )
