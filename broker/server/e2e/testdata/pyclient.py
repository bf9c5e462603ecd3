#!/usr/bin/env python3
"""A Felix protocol client written from docs/protocol.md alone.

It checks that the document is precise enough for another language: it
appends, reads, trims and provokes CursorTooOld and OffsetMismatch, then
prints one JSON object with what it saw. Usage: pyclient.py HOST:PORT STREAM
"""
import json
import socket
import struct
import sys


def u8(v): return struct.pack(">B", v)
def u16(v): return struct.pack(">H", v)
def u32(v): return struct.pack(">I", v)
def u64(v): return struct.pack(">Q", v)
def string(s): b = s.encode(); return u16(len(b)) + b
def blob(b): return u32(len(b)) + b
def headers(hs): return u16(len(hs)) + b"".join(string(k) + blob(v) for k, v in hs)
def shard(stream, n): return string(stream) + u32(n)


class Reader:
    def __init__(self, b): self.b, self.o = b, 0
    def take(self, n):
        v = self.b[self.o:self.o + n]
        assert len(v) == n, "short body"
        self.o += n
        return v
    def u8(self): return self.take(1)[0]
    def u16(self): return struct.unpack(">H", self.take(2))[0]
    def u32(self): return struct.unpack(">I", self.take(4))[0]
    def u64(self): return struct.unpack(">Q", self.take(8))[0]
    def string(self): return self.take(self.u16()).decode()
    def blob(self): return self.take(self.u32())
    def headers(self): return [(self.string(), self.blob()) for _ in range(self.u16())]
    def done(self): assert self.o == len(self.b), "trailing bytes"


class Conn:
    def __init__(self, addr, features):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=10)
        self.next_id = 0
        self.features = 0
        typ, rid, body = self.call_raw(0x01, 0, b"FELX" + u16(1) + u64(features))
        assert typ == 0x02 and rid == 0, (typ, rid)
        r = Reader(body)
        self.version, self.features = r.u16(), r.u64()
        self.max_frame, self.max_batch = r.u32(), r.u32()

    def send(self, typ, rid, body):
        self.s.sendall(u32(5 + len(body)) + u8(typ) + u32(rid) + body)

    def recv_exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    def recv(self):
        (length,) = struct.unpack(">I", self.recv_exact(4))
        rest = self.recv_exact(length)
        return rest[0], struct.unpack(">I", rest[1:5])[0], rest[5:]

    def call_raw(self, typ, rid, body):
        self.send(typ, rid, body)
        return self.recv()

    def call(self, typ, body):
        self.next_id += 1
        rtyp, rid, rbody = self.call_raw(typ, self.next_id, body)
        assert rid == self.next_id
        if rtyp == 0x7F:
            return None, self.error(rbody)
        assert rtyp == typ + 1, (typ, rtyp)
        return Reader(rbody), None

    def error(self, body):
        r = Reader(body)
        e = {"code": r.u16(), "message": r.string()}
        if e["code"] == 1:
            e["expected"], e["tail"] = r.u64(), r.u64()
        elif e["code"] == 2:
            e["from"], e["floor"] = r.u64(), r.u64()
            if self.features & 2:
                if r.u8() == 1:
                    e["trimHeaders"] = {k: v.decode() for k, v in r.headers()}
        r.done()
        return e


def main():
    addr, stream = sys.argv[1], sys.argv[2]
    out = {}
    c = Conn(addr, features=2)  # trim-tag
    out["features"] = c.features
    recs = [([("epoch", b"1")], b"one"), ([], b"two")]
    r, err = c.call(0x10, shard(stream, 0) + u8(0) + u32(len(recs)) + b"".join(headers(h) + blob(p) for h, p in recs))
    assert err is None, err
    out["append"] = {"first": r.u64(), "tail": r.u64()}
    r.done()
    r, err = c.call(0x10, shard(stream, 0) + u8(1) + u64(0) + u32(1) + headers([]) + blob(b"stale"))
    out["offsetMismatch"] = err
    r, err = c.call(0x12, shard(stream, 0) + u8(1) + u64(0) + u32(0) + u32(0) + u32(0))
    assert err is None, err
    nxt, count = r.u64(), r.u32()
    records = []
    for _ in range(count):
        off, epoch, ts = r.u64(), r.u64(), r.u64()
        hs, payload = r.headers(), r.blob()
        records.append({"offset": off, "headers": {k: v.decode() for k, v in hs}, "payload": payload.decode()})
    r.done()
    out["read"] = {"next": nxt, "records": records}
    r, err = c.call(0x14, shard(stream, 0) + u64(1) + u64(2) + headers([("epoch", b"5")]))
    assert err is None, err
    out["trim"] = {"tail": r.u64(), "floor": r.u64()}
    r, err = c.call(0x12, shard(stream, 0) + u8(0) + u64(0) + u32(0) + u32(0) + u32(0))
    out["cursorTooOld"] = err
    r, err = c.call(0x16, shard(stream, 0))
    assert err is None, err
    out["describe"] = {"base": r.u64(), "floor": r.u64(), "tail": r.u64(), "committed": r.u64()}
    r.done()
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
