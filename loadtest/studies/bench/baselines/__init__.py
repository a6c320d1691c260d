"""What a user would run instead of Triton, measured under the same load as Triton in ``make bench``.

``fastapi_app``: the TorchScript module behind FastAPI + uvicorn with JSON in and out, called once
per request (rows 4 of the comparison) or through a home-made asyncio micro-batcher (row 5).
"""
