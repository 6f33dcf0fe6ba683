"""The sock_diag answer parser, on answers built byte by byte as the kernel lays them out:
totals per name, sockets without tcp_info, the kernel's refusal, several messages and several
reads per dump."""

from __future__ import annotations

import socket
import struct

import pytest

from pytest_wedge.links import sockdiag

HEADER = struct.Struct("=IHHII")
SOCK_DIAG_BY_FAMILY = 20
INET_DIAG_SHUTDOWN = 8
INET_DIAG_MARK = 15
TCP_INFO_SIZE = 232  # Linux 6.x; bytes_acked and bytes_received sit at 120 and 128


def attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def tcp_info(received: int, acked: int) -> bytes:
    info = bytearray(TCP_INFO_SIZE)
    struct.pack_into("=QQ", info, 120, acked, received)
    return bytes(info)


def socket_message(
    sport: int, received: int | None, acked: int = 0, *, dport: int = 9, before_info: bytes = b""
) -> bytes:
    """One inet_diag_msg for a socket on local port ``sport``; no INET_DIAG_INFO when
    ``received`` is None (the kernel leaves it out for a socket in TIME_WAIT, for one)."""
    msg = struct.pack("=BBBB", socket.AF_INET, 1, 0, 0)
    msg += struct.pack(">HH", sport, dport) + b"\x7f\0\0\x01" + b"\0" * 12 + b"\x7f\0\0\x01"
    msg += b"\0" * 12 + struct.pack("=IQ", 0, 0)  # interface, cookie
    msg += struct.pack("=IIIII", 0, 0, 0, 0, 1234)  # expires, rqueue, wqueue, uid, inode
    assert len(msg) == 72
    msg += attr(INET_DIAG_SHUTDOWN, b"\0") + before_info  # before the info, as the kernel sends
    if received is not None:
        msg += attr(sockdiag.INET_DIAG_INFO, tcp_info(received, acked))
    return netlink(SOCK_DIAG_BY_FAMILY, msg)


def netlink(kind: int, body: bytes) -> bytes:
    length = HEADER.size + len(body)
    return HEADER.pack(length, kind, 2, 1, 0) + body + b"\0" * (-length % 4)


DONE = netlink(sockdiag.NLMSG_DONE, struct.pack("=i", 0))


class Answers:
    """A netlink socket that answers with ``reads``, one per ``recv_into``."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = list(reads)
        self.sent: list[bytes] = []

    def sendto(self, data: bytes, address: tuple[int, int]) -> int:
        self.sent.append(data)
        return len(data)

    def recv_into(self, buffer: bytearray, nbytes: int = 0) -> int:
        data = self.reads.pop(0) if self.reads else b""
        assert len(data) <= (nbytes or len(buffer))
        buffer[: len(data)] = data
        return len(data)


def dump(reads: list[bytes], ports: dict[int, str]) -> dict[str, dict[str, float]]:
    sock = Answers(reads)
    totals = sockdiag._dump(sock, ports)  # type: ignore[arg-type]
    assert len(sock.sent) == 1 and not sock.reads, "one query, every answer read"
    return totals


def test_sums_per_name_over_many_messages_and_skips_what_is_not_asked() -> None:
    answer = b"".join(
        [
            socket_message(4001, 100, 10),
            socket_message(4002, 7, 70),
            socket_message(4001, 5, 50),
            socket_message(5555, 999, 999),  # a port nobody asked about
            socket_message(4001, None),  # no tcp_info: not counted
            socket_message(4003, None),  # only without tcp_info: no entry at all
            DONE,
        ]
    )
    ports = {4001: "router", 4002: "prefill", 4003: "decode"}
    assert dump([answer], ports) == {
        "router": {"upstream": 105.0, "downstream": 60.0},
        "prefill": {"upstream": 7.0, "downstream": 70.0},
    }


def test_a_socket_whose_attributes_differ_from_the_others_is_read_all_the_same() -> None:
    mark = attr(INET_DIAG_MARK, struct.pack("=I", 7))
    answer = b"".join(
        [
            socket_message(4001, 1, 10),
            socket_message(4001, 2, 20, before_info=mark),
            socket_message(4001, 4, 40, before_info=mark + attr(INET_DIAG_MARK, b"\0" * 5)),
            socket_message(4001, None, before_info=mark),
            socket_message(4001, 8, 80),
            DONE,
        ]
    )
    assert dump([answer], {4001: "l"}) == {"l": {"upstream": 15.0, "downstream": 150.0}}


def test_a_dump_over_several_reads_ends_at_done_only() -> None:
    first = socket_message(4001, 1, 2) + socket_message(4001, 3, 4)
    second = socket_message(4001, 2**40, 2**41) + DONE
    later = socket_message(4001, 1000, 1000)  # after DONE: never read
    sock = Answers([first, second, later])
    assert sockdiag._dump(sock, {4001: "l"}) == {  # type: ignore[arg-type]
        "l": {"upstream": 4.0 + 2**40, "downstream": 6.0 + 2**41}
    }
    assert sock.reads == [later]


def test_done_alone_in_the_last_bytes_of_a_full_read_ends_the_dump() -> None:
    filler = socket_message(4001, 1, 1)
    count = (sockdiag._RECV_SIZE - len(DONE)) // len(filler)
    pad = sockdiag._RECV_SIZE - len(DONE) - count * len(filler)
    # An unasked socket's message stretched so DONE's 20 bytes end the 64 KiB exactly.
    stretched = socket_message(1, 0)
    body = stretched[HEADER.size :] + b"\0" * pad
    assert pad % 4 == 0
    first = filler * (count - 1) + netlink(SOCK_DIAG_BY_FAMILY, body) + DONE
    assert len(first) == sockdiag._RECV_SIZE
    later = socket_message(4001, 1000, 1000)
    sock = Answers([first, later])
    assert sockdiag._dump(sock, {4001: "l"}) == {  # type: ignore[arg-type]
        "l": {"upstream": count - 1.0, "downstream": count - 1.0}
    }
    assert sock.reads == [later], "read on past the dump's end"


def test_the_kernels_refusal_raises_its_errno() -> None:
    refusal = netlink(sockdiag.NLMSG_ERROR, struct.pack("=i", -22) + b"\0" * 16)
    with pytest.raises(OSError) as raised:
        dump([socket_message(4001, 1, 1) + refusal], {4001: "l"})
    assert raised.value.errno == 22


def test_an_answer_cut_short_ends_the_dump_with_what_was_read() -> None:
    assert dump([socket_message(4001, 3, 4)], {4001: "l"}) == {
        "l": {"upstream": 3.0, "downstream": 4.0}
    }


def test_the_query_filters_on_the_asked_ports() -> None:
    sock = Answers([DONE])
    assert sockdiag._dump(sock, {4002: "b", 4001: "a"}) == {}  # type: ignore[arg-type]
    (query,) = sock.sent
    length, kind, flags, _, _ = HEADER.unpack_from(query)
    assert (length, kind) == (len(query), SOCK_DIAG_BY_FAMILY)
    assert flags == sockdiag.NLM_F_REQUEST | sockdiag.NLM_F_DUMP
    assert query.endswith(sockdiag._port_filter([4001, 4002]))
