"""What a sandboxed episode may reach, as relay routes: a port on the sandbox's 127.0.0.1 and the address
outside it that the service connects to. The gateway's URL is kept where it can be: a host name is
pinned to 127.0.0.1 in the sandbox's /etc/hosts (so TLS and virtual hosts work as they are), an IP
address is rewritten to 127.0.0.1 with the same port."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from lakeflow.errors import ConfigError
from lakeflow.raas.config.sandbox import SandboxConfig

URL_VARIABLES = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
_ANY = ("0.0.0.0", "::")  # a server bound to every interface is reached on its loopback


@dataclass
class Routes:
    env: dict[str, str]  # the episode's variables, with URLs rewritten to the sandbox's view
    ports: dict[int, tuple[str, int]] = field(default_factory=dict)  # port inside -> (host, port) outside
    names: list[str] = field(default_factory=list)  # host names that resolve to 127.0.0.1 inside


def is_ip(host: str) -> bool:
    """Whether `host` is an IP address (v4 or v6), not a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _add(routes: Routes, host: str, port: int, what: str) -> str:
    """Route host:port; returns the host the sandbox uses for it."""
    target = ("127.0.0.1" if host in _ANY else host, port)
    if routes.ports.get(port, target) != target:
        raise ConfigError(
            f"sandbox: {what} {host}:{port} needs port {port} inside the sandbox, which already relays to "
            f"{routes.ports[port][0]}:{port}; give them different ports"
        )
    routes.ports[port] = target
    if is_ip(host):
        return "127.0.0.1"
    routes.names.append(host)
    return host


def routes(config: SandboxConfig, episode_env: Mapping[str, str]) -> Routes:
    """The relay routes of one episode (none with network 'none') and its variables as the sandbox sees them."""
    out = Routes(dict(episode_env))
    if config.network == "none":
        return out
    for name in URL_VARIABLES:
        if name not in episode_env:
            continue
        url = urlsplit(episode_env[name])
        if url.hostname is None:
            raise ConfigError(f"sandbox: the episode's {name} {episode_env[name]!r} names no host")
        port = url.port or (443 if url.scheme == "https" else 80)
        host = _add(out, url.hostname, port, "the gateway")
        netloc = f"{host}:{port}" if url.port or host != url.hostname else host
        out.env[name] = urlunsplit((url.scheme, netloc, url.path, url.query, url.fragment))
    for entry in config.allowed:
        host, number = entry.rsplit(":", 1)
        _add(out, host, int(number), "network.allow entry")
    return out
