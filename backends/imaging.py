"""Image decoding and preprocessing for EfficientNet-style models, without torch.

Used by the ``preprocess`` Python model (at serving time) and by export/zoo/efficientnet.py (for the
parity data), so both scale pixels the same way: short side to 256 (bilinear), centre crop 224,
``(x - 127) / 128``, channels first. Limits are checked before any pixel is decoded.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, UnidentifiedImageError

RESIZE, CROP = 256, 224
MAX_IMAGE_BYTES = 16 * 1024 * 1024
"""Largest encoded image accepted (16 MiB), checked before anything is parsed; config parameter
``MAX_IMAGE_BYTES`` of ``preprocess``."""
MAX_IMAGE_PIXELS = 40_000_000
"""Largest decoded image accepted (width x height), read from the header before decoding; config parameter
``MAX_IMAGE_PIXELS`` of ``preprocess``."""


class ImageError(ValueError):
    """An image that cannot be used; the message names the problem."""


def decode(data: bytes, max_bytes: int = MAX_IMAGE_BYTES, max_pixels: int = MAX_IMAGE_PIXELS) -> Image.Image:
    """Encoded JPEG/PNG/... bytes -> RGB image, refusing empty, oversized, corrupt or truncated input."""
    if len(data) == 0:
        raise ImageError("IMAGE is empty (0 bytes)")
    if len(data) > max_bytes:
        raise ImageError(f"IMAGE is {len(data)} bytes, over the limit of {max_bytes} bytes (MAX_IMAGE_BYTES)")
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size  # from the header: nothing decoded yet
        if width * height > max_pixels:
            raise ImageError(
                f"IMAGE is {width}x{height} pixels, over the limit of {max_pixels} pixels (MAX_IMAGE_PIXELS)"
            )
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image.load()
        return image.convert("RGB")
    except ImageError:
        raise
    except (
        UnidentifiedImageError,
        OSError,
        SyntaxError,
        ValueError,
        Image.DecompressionBombError,
        Image.DecompressionBombWarning,
    ) as exc:
        raise ImageError(f"IMAGE is not a readable image: {exc}") from None


def resize_crop(image: Image.Image) -> np.ndarray:
    """RGB image -> uint8 [224, 224, 3]: short side to 256, centre crop."""
    image = image.convert("RGB")
    width, height = image.size
    scale = RESIZE / min(width, height)
    size = (max(RESIZE, round(width * scale)), max(RESIZE, round(height * scale)))
    image = image.resize(size, Image.BILINEAR)
    left, top = (size[0] - CROP) // 2, (size[1] - CROP) // 2
    return np.asarray(image.crop((left, top, left + CROP, top + CROP)), dtype=np.uint8)


def normalise(pixels: np.ndarray) -> np.ndarray:
    """uint8 [..., 224, 224, 3] -> FP32 [..., 3, 224, 224] as ``(x - 127) / 128``, the whole batch at once."""
    scaled = (pixels.astype(np.float32) - 127.0) / 128.0
    return np.ascontiguousarray(np.moveaxis(scaled, -1, -3))


def preprocess(image) -> np.ndarray:
    """PIL image or HxWx3 uint8 array -> FP32 [3, 224, 224]."""
    if not isinstance(image, Image.Image):
        image = Image.fromarray(np.asarray(image, dtype=np.uint8))
    return normalise(resize_crop(image))
