"""Where the live view listens: `HOST`, `HOST:PORT`, `:PORT` or `[IPv6]:PORT`, loopback unless told otherwise."""

from __future__ import annotations

import ipaddress

LOOPBACK = "127.0.0.1"
ANY_PORT = 0  # the OS picks a free port, and the URL printed says which


def split_host_port(text: str, default_port: int = ANY_PORT) -> tuple[str, int]:
    """(host, port) of an address; ValueError saying what is wrong. A missing host is loopback."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":") if rest.startswith(":") else None
        if rest and port_text is None:
            raise ValueError(f"address {text!r} is not [IPv6]:PORT")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None  # a host name, an IPv4 address or a bare IPv6 address
    if text.isdigit():
        raise ValueError(f"address {text!r} is a bare number: give :PORT for a port or HOST:PORT")
    return host or LOOPBACK, _port(port_text, default_port, text)


def _port(port_text: str | None, default_port: int, text: str) -> int:
    if not port_text:
        return default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"address {text!r}: port {port_text!r} is not a number from 0 to 65535")
    return int(port_text)


def join_host_port(host: str, port: int) -> str:
    """`HOST:PORT`, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """True for localhost and the loopback addresses (IPv4 127/8, IPv6 ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
