"""What a Triton server reachable from other hosts locks behind a key, in one place.

Inference, health, metadata and statistics stay open; the APIs that change or reveal the server's set-up
need the admin key: the model repository (index, load, unload), model configs, shared-memory registration,
tracing and logging settings. docker-compose.yml and deploy/k8s pass the same lists (the tests check),
and `tritonkit serve` adds them whenever it binds an address other than loopback.

Load generators never hold the key: refused the config, they read a model's inputs and outputs from its
metadata, which every inference client may read (``loadtest.target.apply.served_config``).
"""

from __future__ import annotations

import ipaddress
import os

from deploy.errors import DeployError

RESTRICTED_APIS = ("model-repository", "model-config", "shared-memory", "trace", "logging")
KEY_HEADER = "admin-key"
"""The HTTP header; gRPC clients send it as metadata ``triton-grpc-protocol-admin-key``."""
GRPC_KEY_HEADER = f"triton-grpc-protocol-{KEY_HEADER}"
KEY_ENV = "TRITON_ADMIN_KEY"
"""Where the key comes from: the environment only, never a file in the repository."""
MIN_KEY_LENGTH = 16
REFUSAL = "is restricted, expecting header"
"""In Triton's answer to a restricted API called without the key: HTTP 403 "This API is restricted, expecting
header 'admin-key'", gRPC UNAVAILABLE (not PERMISSION_DENIED) "This protocol is restricted, expecting header
'triton-grpc-protocol-admin-key'"."""


class InsecureServerError(DeployError, ValueError):
    """A server would be reachable from other hosts with its admin APIs open."""


def restricted_flags(key: str) -> list[str]:
    """The two ``tritonserver`` flags that put :data:`RESTRICTED_APIS` behind ``key``."""
    if len(key) < MIN_KEY_LENGTH or any(c in key for c in ",:= \t\n"):
        raise InsecureServerError(
            f"{KEY_ENV} must be at least {MIN_KEY_LENGTH} characters without ',', ':', '=' or spaces"
        )
    setting = f"{','.join(RESTRICTED_APIS)}:{KEY_HEADER}={key}"
    return [f"--http-restricted-api={setting}", f"--grpc-restricted-protocol={setting}"]


def is_refusal(message: str | None) -> bool:
    """Whether a server error is a restricted API refused for want of the key (not a missing model, not a
    server going down: gRPC gives both the same UNAVAILABLE status)."""
    return REFUSAL in (message or "")


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def flags_for(address: str, environ=os.environ) -> list[str]:
    """Nothing on loopback; elsewhere the restricted-API flags, or an error when no key is set."""
    if is_loopback(address):
        return []
    key = environ.get(KEY_ENV, "")
    if not key:
        raise InsecureServerError(
            f"binding {address} exposes the server to other hosts: set {KEY_ENV} to a secret "
            f"of {MIN_KEY_LENGTH}+ characters; {', '.join(RESTRICTED_APIS)} then need the "
            f"'{KEY_HEADER}' header"
        )
    return restricted_flags(key)
