"""The kernel's byte counters of open TCP sockets, read over netlink (``sock_diag``).

This is the query ``ss -tin state connected`` makes, without starting ``ss``: the link meter
reads it once a second, and starting a program from the test process cost about 3 ms of
CPU each time (fork and exec, and ``ss`` loading its libraries), several times what the query
and its parsing cost here. Linux only; elsewhere :func:`socket_bytes` raises ``OSError`` and
the caller falls back to ``ss``.

For each socket whose local port is one of ``ports``: ``tcp_info``'s ``bytes_received`` (what
the peer sent to it) and ``bytes_acked`` (what it sent and the peer acknowledged), the two
numbers ``ss -i`` prints under those names.

A dump walks the kernel's whole table of TCP connections, however few sockets match: 1.7 ms
here, for a table of 262,144 buckets. :class:`SocketCounters`, for a meter that reads the same
ports again and again, dumps only when a connection may have been accepted since its last read
(the kernel's count of passive opens moved); otherwise it asks for the sockets it already knows
by their addresses, each a hash lookup.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping

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
# nlmsghdr's length and type, then inet_diag_msg: 4 bytes, then the sockid: sport (network
# order, read here in host order: see _dump).
_MSG_HEAD = struct.Struct("=IH14xH")
_MSG_SIZE = 72  # sizeof(struct inet_diag_msg)
_FIRST_ATTR = 16 + _MSG_SIZE  # from the message's start
_ATTR = struct.Struct("=HH")  # rtattr and nlattr: length, type
_HEADER_WORD = struct.Struct("=I")  # the same four bytes as one word, to compare whole
_BC_OP = struct.Struct("=BBH")  # inet_diag_bc_op: code, yes, no (jumps in bytes)
# struct tcp_info: bytes_acked at offset 120 and bytes_received at 128 (Linux >= 4.1/4.2).
_TCP_BYTES = struct.Struct("=QQ")
_TCP_BYTES_AT = 120
_TCP_INFO_BYTES = _ATTR.size + _TCP_BYTES_AT  # from the INET_DIAG_INFO attribute's start
_RECV_SIZE = 1 << 16


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


_SOCKID_AT, _SOCKID_SIZE = 20, 48  # inet_diag_sockid, from a message's start
ENOENT = 2
LOOKUPS_PER_SEND = 32
ANSWER_TIMEOUT_S = 2.0  # a kernel answers in microseconds; never hang a meter on it


class _Answers:
    """The sums of one dump's answers, read in place from each ``recv``'s buffer.

    Written for the link meter's rate (once a second, a hundred sockets and more): no copy of
    a message, no generator, and two struct calls per socket. The kernel puts the same
    attributes before each connected socket's ``INET_DIAG_INFO`` (shutdown, mark, cgroup,
    socket options on Linux 6): the first walk over them learns their headers, and a message
    whose headers are those same bytes, so whose walk would take the same steps, is read by one
    struct that also takes the two counters. Any other message is walked."""

    def __init__(self, ports: Mapping[int, str]) -> None:
        # Keyed by the port's two bytes read in host order, so one struct call per message
        # reads the header (host order) and the port (network order) together.
        self.wanted = {socket.htons(port): name for port, name in ports.items()}
        self.totals: dict[str, dict[str, float]] = {}
        self.layout: struct.Struct | None = None
        self.headers: tuple[int, ...] = ()
        self.ids: list[bytes] = []  # each counted socket's inet_diag_sockid, to ask for again
        self.awaited: int | None = None  # lookups: answers still to come (a dump ends on DONE)

    def add(self, data: bytearray, end: int) -> bool:
        """Add the sockets of ``data[:end]``; True at the dump's end."""
        # Locals: this loop runs once per socket, and attribute and global lookups add up.
        head, wanted, totals = _MSG_HEAD.unpack_from, self.wanted, self.totals
        layout, headers, known = self.layout, self.headers, len(self.headers)
        offset = 0
        while offset + _HEADER.size <= end:
            length, kind, sport = head(data, offset)
            if kind == NLMSG_DONE:
                return True
            if length < _HEADER.size:
                raise OSError("sock_diag answered a malformed message")
            if self.awaited is not None:
                self.awaited -= 1
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", data, offset + _HEADER.size)[0]
                if code != ENOENT or self.awaited is None:  # a looked-up socket that closed
                    raise OSError(code, "sock_diag refused the query")
                name = None
            else:
                name = wanted.get(sport)
            if name is not None:
                self.ids.append(
                    bytes(data[offset + _SOCKID_AT : offset + _SOCKID_AT + _SOCKID_SIZE])
                )
                stop = offset + length if offset + length < end else end
                first = offset + _FIRST_ATTR
                counted = None
                if layout is not None and first + layout.size <= stop:
                    values = layout.unpack_from(data, first)
                    if values[:known] == headers:
                        counted = values[known + 1], values[known]
                if counted is None:
                    counted = self._walk(data, first, stop)
                    layout, headers, known = self.layout, self.headers, len(self.headers)
                if counted is not None:
                    mine = totals.get(name)
                    if mine is None:
                        mine = totals[name] = {"upstream": 0.0, "downstream": 0.0}
                    mine["upstream"] += counted[0]
                    mine["downstream"] += counted[1]
            offset += (length + 3) & ~3
        return self.awaited == 0

    def _walk(self, data: bytearray, first: int, stop: int) -> tuple[int, int] | None:
        """(bytes_received, bytes_acked) from the message's INET_DIAG_INFO attribute, walking
        its attributes from ``first``; the first success learns the layout."""
        attr, seen = first, []
        while attr + _ATTR.size <= stop:
            size, kind = _ATTR.unpack_from(data, attr)
            if size < _ATTR.size:
                return None
            seen.append(attr - first)
            if kind == INET_DIAG_INFO and size >= _TCP_INFO_BYTES + _TCP_BYTES.size:
                acked, received = _TCP_BYTES.unpack_from(data, attr + _TCP_INFO_BYTES)
                if self.layout is None:
                    self._learn(data, first, seen)
                return received, acked
            attr += (size + 3) & ~3
        return None

    def _learn(self, data: bytearray, first: int, positions: list[int]) -> None:
        fmt, at = "=", 0
        for position in positions:
            fmt += f"{position - at}xI"
            at = position + _HEADER_WORD.size
        self.layout = struct.Struct(f"{fmt}{_TCP_BYTES_AT}x{_TCP_BYTES.format[1:]}")
        self.headers = tuple(_HEADER_WORD.unpack_from(data, first + p)[0] for p in positions)


def _lookups(ids: list[bytes]) -> bytes:
    """One message per socket, all sent at once: each asks for the socket with that id."""
    head = _REQUEST.pack(
        socket.AF_INET, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, CONNECTED
    )[:8]
    size = _HEADER.size + len(head) + _SOCKID_SIZE
    return b"".join(
        _HEADER.pack(size, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, seq, 0) + head + id_
        for seq, id_ in enumerate(ids, 1)
    )


def _ask(sock: socket.socket, ports: Mapping[int, str], ids: list[bytes] | None) -> _Answers:
    """Ask ``sock`` (a sock_diag netlink socket) for a dump of ``ports``' sockets, or for the
    sockets ``ids``, and sum the answers until the last."""
    answers = _Answers(ports)
    # Room past the received bytes: a message shorter than _MSG_HEAD (NLMSG_DONE's 20 bytes,
    # last in the buffer) still unpacks with it; what it reads there as a port goes unused.
    buffer = bytearray(_RECV_SIZE + _MSG_HEAD.size)
    if ids is None:
        sock.sendto(_request(socket.AF_INET, sorted(ports)), (0, 0))
        _receive(sock, answers, buffer)
    # The kernel answers a batch of lookups at once, into our socket's receive buffer: a few
    # dozen at a time stay far below its size, so no answer is ever dropped.
    for first in range(0, len(ids or ()), LOOKUPS_PER_SEND):
        batch = (ids or [])[first : first + LOOKUPS_PER_SEND]
        answers.awaited = len(batch)
        sock.sendto(_lookups(batch), (0, 0))
        _receive(sock, answers, buffer)
    return answers


def _receive(sock: socket.socket, answers: _Answers, buffer: bytearray) -> None:
    while True:
        got = sock.recv_into(buffer, _RECV_SIZE)
        if not got or answers.add(buffer, got):
            return


def _dump(sock: socket.socket, ports: Mapping[int, str]) -> dict[str, dict[str, float]]:
    return _ask(sock, ports, None).totals


def passive_opens(path: str = "/proc/net/snmp") -> int | None:
    """How many TCP connections this network namespace has accepted so far (None: unknown)."""
    try:
        with open(path, "rb") as fh:
            names, values = (line.split() for line in fh if line.startswith(b"Tcp:"))
        return int(values[names.index(b"PassiveOpens")])
    except (OSError, ValueError):
        return None


class SocketCounters:
    """:func:`socket_bytes` of fixed ``ports``, read again and again: a dump only when a
    connection may have been accepted since the last read, else a lookup of each socket the
    last read found (one that closed since is gone from the answers, and from the next ask).
    ``OSError`` when the kernel does not answer."""

    def __init__(self, ports: Mapping[int, str]) -> None:
        self.ports = dict(ports)
        self.ids: list[bytes] | None = None  # None: the next read dumps
        self.opens: int | None = None
        self.dumps = 0  # how many reads dumped (for tests and measurements)

    def would_dump(self) -> bool:
        """Whether a read now would dump (a connection may have been accepted since the last)."""
        opens = passive_opens()
        return self.ids is None or opens is None or opens != self.opens

    def read(self) -> dict[str, dict[str, float]]:
        if not self.ports:
            return {}
        opens = passive_opens()
        ids = self.ids if opens is not None and opens == self.opens else None
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as sock:
            sock.settimeout(ANSWER_TIMEOUT_S)
            answers = _ask(sock, self.ports, ids)
        self.dumps += ids is None
        self.ids, self.opens = answers.ids, opens
        return answers.totals


def socket_bytes(ports: Mapping[int, str]) -> dict[str, dict[str, float]]:
    """Per name in ``ports`` (local port -> name): ``upstream`` = bytes received and
    ``downstream`` = bytes acknowledged, summed over its open IPv4 sockets (the links listen on
    127.0.0.1). ``OSError`` when the kernel does not answer."""
    if not ports:
        return {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as sock:
        return _dump(sock, ports)
