"""``python -m loadtest.generators.locust.main ARGS``: Locust's own command line, with gRPC made gevent-friendly first.

grpcio blocks the whole process on each call unless ``grpc.experimental.gevent.init_gevent()`` runs
before anything creates a channel; Locust's ``locust`` script gives no hook early enough, so gRPC users
would run one request at a time. Every argument is passed to Locust unchanged.
"""

import warnings

# torch (imported for the payloads) warns about a deprecated alias when gevent walks its module globals.
warnings.filterwarnings("ignore", category=FutureWarning)

from gevent import monkey  # noqa: E402

monkey.patch_all()

import grpc.experimental.gevent  # noqa: E402 - must follow the monkey patching, precede any channel

grpc.experimental.gevent.init_gevent()

import sys  # noqa: E402

from locust.main import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[0] = "locust"
    sys.exit(main())
