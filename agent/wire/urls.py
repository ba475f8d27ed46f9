"""Agent addresses: the default loopback URL and what a URL must look like."""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

DEFAULT_PORT = 7766
DEFAULT_URL = f"tcp://127.0.0.1:{DEFAULT_PORT}"
ENV_AGENT = "PILOTHOUSE_AGENT"


def check_url(url: Any, *, bind: bool = False) -> str:
    """Accept tcp://HOST:PORT and ipc://PATH; a bind must name an address, not a wildcard."""
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"agent URL must look like tcp://127.0.0.1:{DEFAULT_PORT}, got {url!r}")
    parts = urlsplit(url)
    if parts.scheme == "ipc":
        if not url[len("ipc://"):]:
            raise ValueError(f"ipc URL needs a path: {url!r}")
        return url
    if parts.scheme != "tcp":
        raise ValueError(f"agent URL scheme must be tcp or ipc, got {parts.scheme!r}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or not 0 < port < 65536:
        raise ValueError(f"agent URL needs a host and a port 1-65535: {url!r}")
    if bind and parts.hostname == "*":
        raise ValueError("bind to an explicit address, not '*'")
    return url


def is_loopback(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme == "ipc":
        return True
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

