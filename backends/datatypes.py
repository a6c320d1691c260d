"""Triton's KServe datatypes as numpy dtypes, for the Python models and the load generator alike (BF16 has no
numpy type; BYTES elements are Python objects, ``bytes``)."""

import numpy as np

NUMPY_DTYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}
