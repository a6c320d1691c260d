"""The image models declare their layout: a generic Triton image client reads it and classifies a photo.

Triton's own example image client refuses a model whose image input has no ``format`` ("unexpected
input format FORMAT_NONE"); with ``FORMAT_NCHW`` it takes channels, height and width from the config.
Here the client does the same over both protocols, then asks the raw model for its best classes through
the classification extension (``class_count``, names from ``labels.txt``).
"""

import pytest
import skimage.data
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2 as mc

from export import catalog
from export.zoo import efficientnet

IMAGE_MODELS = [
    variant.model_name(name)
    for name in ("efficientnet_lite0", "resnet50")
    for variant in catalog.entry(name).variants["cpu"]
]


def image_input(client, protocol: str, model: str) -> tuple[str, str, tuple[int, ...]]:
    """(input name, format name, dims) of the model's one image input, read through the model-config API."""
    if protocol == "http":
        config = client.get_model_config(model)
        (tensor,) = config["input"]
        return tensor["name"], tensor.get("format", "FORMAT_NONE"), tuple(int(d) for d in tensor["dims"])
    config = client.get_model_config(model).config
    (tensor,) = config.input
    return tensor.name, mc.ModelInput.Format.Name(tensor.format), tuple(tensor.dims)


@pytest.mark.parametrize("model", IMAGE_MODELS)
def test_the_model_config_api_reports_nchw(client, protocol, model):
    name, layout, dims = image_input(client, protocol, model)
    assert (name, layout, dims) == ("image", "FORMAT_NCHW", (3, 224, 224)), (protocol, model)


def layout_from_config(layout: str, dims: tuple[int, ...]) -> tuple[int, int, int]:
    """What Triton's image client does with the config: (channels, height, width), or a refusal."""
    if layout == "FORMAT_NCHW":
        return dims[0], dims[1], dims[2]
    if layout == "FORMAT_NHWC":
        return dims[2], dims[0], dims[1]
    raise ValueError(f"unexpected input format {layout}, expecting FORMAT_NCHW or FORMAT_NHWC")


@pytest.mark.parametrize("model", ["efficientnet_lite0", "efficientnet_lite0_onnx"])
def test_a_generic_image_client_classifies_a_photo_with_class_count(client, protocol, model):
    name, layout, dims = image_input(client, protocol, model)
    channels, height, width = layout_from_config(layout, dims)
    assert (channels, height, width) == (3, 224, 224)
    chw = efficientnet.preprocess(skimage.data.coffee())  # RGB, resize 256, crop 224, (x-127)/128: [3, 224, 224]
    pixels = (chw if layout == "FORMAT_NCHW" else chw.transpose(1, 2, 0))[None]
    module = httpclient if protocol == "http" else grpcclient
    tensor = module.InferInput(name, list(pixels.shape), "FP32")
    tensor.set_data_from_numpy(pixels)
    result = client.infer(model, [tensor], outputs=[module.InferRequestedOutput("logits", class_count=3)])
    top = [entry.decode().split(":", 2) for entry in result.as_numpy("logits")[0]]
    print(f"\n{protocol} {model}: {top}")
    score, index, label = top[0]
    assert (int(index), label) == (efficientnet.ESPRESSO, "espresso")
    scores = [float(s) for s, _, _ in top]  # the output's own values (logits here), best first
    assert len(top) == 3 and scores == sorted(scores, reverse=True)
