"""The kernel's byte counters of open TCP sockets, read over netlink (``sock_diag``).

This is the query ``ss -tin state connected`` makes, without starting ``ss``: the link meter
reads it four times a second, and starting a program from the test process cost about 3 ms of
CPU each time (fork and exec, and ``ss`` loading its libraries), several times what the query
and its parsing cost here. Linux only; elsewhere :func:`socket_bytes` raises ``OSError`` and
the caller falls back to ``ss``.

For each socket whose local port is one of ``ports``: ``tcp_info``'s ``bytes_received`` (what
the peer sent to it) and ``bytes_acked`` (what it sent and the peer acknowledged), the two
numbers ``ss -i`` prints under those names.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator, Mapping

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO = 2
INET_DIAG_REQ_BYTECODE = 1
INET_DIAG_BC_JMP = 1
INET_DIAG_BC_S_EQ = 11  # Linux >= 4.16; an older kernel refuses the filter (EINVAL)
TCP_CLOSE, TCP_LISTEN = 7, 10
# Every TCP state but CLOSE and LISTEN: ss's "state connected".
CONNECTED = sum(1 << state for state in range(1, 12) if state not in (TCP_CLOSE, TCP_LISTEN))

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
# inet_diag_req_v2: family, protocol, extensions, pad, states, then inet_diag_sockid (48 bytes)
_REQUEST = struct.Struct("=BBBBI48x")
_MSG_SPORT = struct.Struct(">H")  # inet_diag_msg: 4 bytes, then the sockid: sport (big-endian)
_MSG_SIZE = 72  # sizeof(struct inet_diag_msg)
_ATTR = struct.Struct("=HH")  # rtattr and nlattr: length, type
_BC_OP = struct.Struct("=BBH")  # inet_diag_bc_op: code, yes, no (jumps in bytes)
# struct tcp_info: bytes_acked at offset 120 and bytes_received at 128 (Linux >= 4.1/4.2).
_TCP_BYTES = struct.Struct("=QQ")
_TCP_BYTES_AT = 120


def _align(n: int) -> int:
    return (n + 3) & ~3


def _port_filter(ports: list[int]) -> bytes:
    """A ``sock_diag`` filter program: local port is one of ``ports``. The kernel runs it on
    every socket and sends only the matches (a loaded machine has thousands of sockets, and
    dumping them all cost more than starting ``ss``). The program accepts when it ends exactly
    at its end and rejects when it jumps 4 bytes past it. One block of 12 bytes per port, as
    ``ss`` compiles an "or": a port test (8 bytes) that on a match falls through to a jump to
    the end (4 bytes; a test's own jump is one byte, too short for 81 links) and on a miss goes
    to the next block, or past the end after the last one."""
    length = 12 * len(ports)
    ops = b""
    for i, port in enumerate(ports):
        miss = 12 if i < len(ports) - 1 else 16
        ops += _BC_OP.pack(INET_DIAG_BC_S_EQ, 8, miss) + _BC_OP.pack(0, 0, port)
        ops += _BC_OP.pack(INET_DIAG_BC_JMP, 4, length - (12 * i + 8))
    return ops


def _request(family: int, ports: list[int]) -> bytes:
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, CONNECTED)
    program = _port_filter(ports)
    body += _ATTR.pack(_ATTR.size + len(program), INET_DIAG_REQ_BYTECODE) + program
    flags = NLM_F_REQUEST | NLM_F_DUMP
    return _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, flags, 1, 0) + body


def _messages(sock: socket.socket) -> Iterator[bytes]:
    """Each answer's body until the dump's end."""
    while True:
        data = sock.recv(1 << 16)
        if not data:
            return
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", data, offset + _HEADER.size)[0]
                raise OSError(code, "sock_diag refused the query")
            yield data[offset + _HEADER.size : offset + length]
            offset += _align(length)


def _tcp_bytes(message: bytes) -> tuple[float, float] | None:
    """(bytes_received, bytes_acked) from one socket's INET_DIAG_INFO attribute."""
    offset = _MSG_SIZE
    while offset + _ATTR.size <= len(message):
        length, kind = _ATTR.unpack_from(message, offset)
        if length < _ATTR.size:
            return None
        if kind == INET_DIAG_INFO and length - _ATTR.size >= _TCP_BYTES_AT + _TCP_BYTES.size:
            acked, received = _TCP_BYTES.unpack_from(message, offset + _ATTR.size + _TCP_BYTES_AT)
            return float(received), float(acked)
        offset += _align(length)
    return None


def socket_bytes(ports: Mapping[int, str]) -> dict[str, dict[str, float]]:
    """Per name in ``ports`` (local port -> name): ``upstream`` = bytes received and
    ``downstream`` = bytes acknowledged, summed over its open IPv4 sockets (the links listen on
    127.0.0.1). ``OSError`` when the kernel does not answer."""
    totals: dict[str, dict[str, float]] = {}
    if not ports:
        return totals
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as sock:
        sock.sendto(_request(socket.AF_INET, sorted(ports)), (0, 0))
        for message in _messages(sock):
            name = ports.get(_MSG_SPORT.unpack_from(message, 4)[0])
            counted = _tcp_bytes(message) if name is not None else None
            if name is None or counted is None:
                continue
            mine = totals.setdefault(name, {"upstream": 0.0, "downstream": 0.0})
            mine["upstream"] += counted[0]
            mine["downstream"] += counted[1]
    return totals
