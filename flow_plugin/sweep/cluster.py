"""Connecting to Ray: an embedded local instance by default, or an existing cluster.

* no address (and no ``RAY_ADDRESS``): a new local Ray instance with ``num_cpus`` CPUs
  (``ray.init(address="local")``), stopped when the sweep ends;
* ``ray://host:10001`` (Ray Client), ``host:6379`` (the head's GCS port) or ``auto`` (the
  cluster ``ray start`` began on this machine): an existing cluster.

A concrete address is probed with a plain TCP connection first, so an unreachable cluster
is a one-line :class:`~flow_plugin.errors.SweepError` within seconds (Ray Client itself
waits 30 s), before any job starts. Workers get the driver's flow-plugin environment
(``PYTHONPATH``, ``FLOW_PLUGIN_*``, ``HF_*``, ...) through the job's ``runtime_env``.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from dataclasses import dataclass
from typing import Any

from flow_plugin.errors import MissingExtraError, SweepError

ADDRESS_ENV = "RAY_ADDRESS"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
#: environment variables a worker needs to see what the driver sees
PASSED_PREFIXES = ("FLOW_PLUGIN_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "MTEB_", "SENTENCE_TRANSFORMERS_")
PASSED_NAMES = ("PYTHONPATH", "TOKENIZERS_PARALLELISM", "TORCH_HOME", "XDG_CACHE_HOME")
_DEFAULT_PORTS = {"ray://": 10001, "": 6379}


@dataclass
class Cluster:
    """The Ray instance a sweep runs on."""

    address: str  # "local" for the embedded instance
    local: bool
    cpus: float
    gpus: float

    def describe(self) -> str:
        where = ("local Ray instance" if self.local else "running Ray cluster (address auto)" if self.address == "auto"
                 else f"Ray cluster at {self.address}")
        gpus = f", {self.gpus:g} GPUs" if self.gpus else ""
        return f"{where} ({self.cpus:g} CPUs{gpus})"


def import_ray() -> Any:
    """The ``ray`` module, or an error naming the extra that installs it."""
    try:
        # Ray (the optional ray extra) loads when a sweep reaches a cluster
        import ray
    except ImportError:
        raise MissingExtraError("flow-plugin sweep needs Ray: pip install 'flow-plugin[ray]'") from None
    return ray


def worker_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The driver's environment variables that a worker needs, plus ``extra``.

    >>> env = worker_environment({"FLOW_PLUGIN_CACHE_DIR": "/shared/cache"})
    >>> env["FLOW_PLUGIN_CACHE_DIR"]
    '/shared/cache'
    """
    env = {name: value for name, value in os.environ.items()
           if name in PASSED_NAMES or name.startswith(PASSED_PREFIXES)}
    env.update(extra or {})
    return env


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a concrete Ray address; ``None`` for ``auto``/``local``.

    >>> split_address("ray://10.0.0.5:10001"), split_address("head-node"), split_address("[::1]:6380")
    (('10.0.0.5', 10001), ('head-node', 6379), ('::1', 6380))
    """
    if address in ("auto", "local"):
        return None
    scheme = "ray://" if address.startswith("ray://") else ""
    rest = address[len(scheme):].rstrip("/")
    match = re.fullmatch(r"(?:\[(?P<ipv6>[^\]]+)\]|(?P<host>[^:/\[\]]+))(?::(?P<port>\d+))?", rest)
    if not match:
        raise SweepError(f"malformed Ray address {address!r}: expected ray://HOST:PORT, HOST:PORT or auto")
    return match.group("ipv6") or match.group("host"), int(match.group("port") or _DEFAULT_PORTS[scheme])


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """A TCP connection to the address's host and port, or a one-line SweepError."""
    target = split_address(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise SweepError(
            f"cannot reach the Ray cluster at {address} ({target[0]}:{target[1]}: {reason}); check the address "
            f"(--address or ${ADDRESS_ENV}) and that the head node runs `ray start --head`"
        ) from None


def connect(address: str | None, num_cpus: int | None, env: dict[str, str], *, log_to_driver: bool = False) -> Cluster:
    """Start or join Ray (see the module docstring); the job's workers get ``env``."""
    ray = import_ray()
    address = address or os.environ.get(ADDRESS_ENV) or None
    if address is not None and num_cpus is not None:
        raise SweepError("--num-cpus sizes the local Ray instance; it cannot be used with --address or $RAY_ADDRESS")
    options: dict[str, Any] = {
        "runtime_env": {"env_vars": env}, "log_to_driver": log_to_driver, "logging_level": logging.WARNING,
    }
    if address is None:
        # Ray renices its workers to 15, so a local sweep's jobs crawl behind any other CPU-bound process (measured:
        # 4% of a core each against two busy loops); here they are the user's own work, run at the driver's priority
        options.update(address="local", num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False,
                       _system_config={"worker_niceness": 0})
    else:
        check_reachable(address)
        options["address"] = address
    try:
        ray.init(**options)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        hint = ""
        if address is not None and not os.environ.get(AUTH_MODE_ENV):
            hint = (f" (a cluster with token authentication, Ray's default, also needs {AUTH_MODE_ENV}=token here "
                    "and its token in ~/.ray/auth_token or $RAY_AUTH_TOKEN)")
        raise SweepError(f"cannot connect to Ray at {address or 'a new local instance'}: {first_line}{hint}") from None
    resources = ray.cluster_resources()
    return Cluster(address or "local", address is None, resources.get("CPU", 0.0), resources.get("GPU", 0.0))


def disconnect() -> None:
    """Leave Ray (a local instance stops with it)."""
    ray = import_ray()
    if ray.is_initialized():
        ray.shutdown()
