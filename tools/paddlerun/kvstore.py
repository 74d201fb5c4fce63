"""The key-value stores the node launchers rendezvous in, behind one small interface.

Every store offers set(key, value), get(key) -> str or None, add(key, delta) -> int (atomic) and
clear() (removes every key of the job; the last launcher to exit calls it).
Waiting is done by the rendezvous with get() and a deadline, so no store call blocks for long:
each one is bounded by the store's own timeout and raises StoreError (whose message names the
endpoint) when the store cannot be reached.

  TcpStoreServer / TcpStore  newline-delimited JSON over TCP, both sides authenticated with the
                             job token (Note [Store handshake]); the launcher of node rank 0
                             hosts the server, one I/O thread, at --rdzv-endpoint
  FileStore                  one file per key in a shared directory, add() under flock
  EtcdStore                  etcd's v3 JSON gateway (POST /v3/kv/range, put, txn; base64 keys)

Note [Store handshake]
Anything that reaches the port can connect, so the server serves nobody before the handshake,
and a client with a token uses no server that has not proved it knows the token (no downgrade):
  1. server -> client  {"server": SERVER_NAME, "nonce": Ns}            Ns: 16 fresh random bytes
  2. client -> server  {"op": "auth", "nonce": Nc, "mac": HMAC-SHA256(token, "client" Ns Nc)}
                       ("mac": null without a token)
  3. server -> client  {"ok": true, "mac": HMAC-SHA256(token, "server" Nc Ns)}  (null without a
                       token), or {"ok": false, "error": why} and it closes the connection and
                       logs the client's address.
The token never crosses the wire; both nonces are fresh, so a recorded exchange cannot be
replayed, and the labels keep either side's answer from serving as the other's. Nonces and macs
travel as lowercase hex. Then requests {"op": "set"|"get"|"add", ...}, one line each, each
answered by one line {"ok": true, ...} or {"ok": false, "error": why}.
Limits, so that no client can hurt the others (the server logs each drop with the address):
a line longer than MAX_LINE_BYTES gets an error and the connection closes; a connection that has
not authenticated within handshake_timeout, or has sent nothing for idle_timeout, is dropped;
with max_connections open, a newcomer replaces the oldest unauthenticated connection, or when
every one is authenticated it is told the store is full (the client retries until its timeout).
"""
import base64
import errno
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import selectors
import socket
import threading
import time
import urllib.error
import urllib.request

SERVER_NAME = "paddlerun-store/2"
MAX_LINE_BYTES = 1 << 20
_NONCE_RE = re.compile(r"[0-9a-f]{32,128}")
_TOKEN_HINT = ("check that every launcher of the job has the same token (PADDLE_STORE_TOKEN or "
               "--token-file)")


class StoreError(Exception):
    """The store could not be reached or answered nonsense; the message says which and why."""


def _mac(token, label, first_nonce, second_nonce):
    """Hex HMAC-SHA256 of the handshake step `label` (Note [Store handshake])."""
    message = label + b"\0" + bytes.fromhex(first_nonce) + bytes.fromhex(second_nonce)
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def _mac_matches(mac, want):
    """Constant-time comparison that tolerates anything a peer may send as `mac`."""
    return isinstance(mac, str) and mac.isascii() and hmac.compare_digest(mac, want)


def _line(obj):
    return json.dumps(obj).encode() + b"\n"


class _Conn:
    """One client of the server: its buffers and where it is in Note [Store handshake]."""

    def __init__(self, sock, peer, now):
        self.sock = sock
        self.peer = peer
        self.nonce = secrets.token_hex(16)
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.authenticated = False
        self.closing_since = None  # refused: the reply goes out, the rest of the input is drained
        self.closed = False
        self.accepted = now
        self.active = now  # last byte received


class TcpStoreServer:
    """Serves TcpStore clients on host:port from one I/O thread until close().

    With a token, only clients that prove they know it are served (Note [Store handshake]).
    Every refusal or drop is passed to log(message) with the client's address."""

    def __init__(self, host, port, token=None, *, max_connections=1024, handshake_timeout=10.0,
                 idle_timeout=600.0, log=None):
        self.endpoint = f"{host}:{port}"
        self._token = token or None
        self._max_connections = max_connections
        self._handshake_timeout = handshake_timeout
        self._idle_timeout = idle_timeout
        self._log = log or (lambda message: None)
        self._listener = self._listen(host, port)
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"{host}:{self.port}"
        self._data = {}
        self._conns = {}  # socket -> _Conn, oldest first
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, "listen")
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        self._next_sweep = 0.0
        self._warned = []  # times of recent warnings, to bound what a flood of clients can log
        self._thread = threading.Thread(target=self._loop, name="paddlerun-store", daemon=True)
        self._thread.start()

    @staticmethod
    def _listen(host, port):
        where = f"{host}:{port}"
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        except OSError as e:
            raise StoreError(f"cannot host the rendezvous store on {where}: cannot resolve "
                             f"{host}: {e.strerror or e}") from None
        family, _, _, _, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(128)
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE:
                raise StoreError(
                    f"cannot host the rendezvous store on {where}: the port is already in "
                    "use (another job's launcher, or another program); choose a free port in "
                    "--rdzv-endpoint, or --standalone on one node") from None
            raise StoreError(f"cannot host the rendezvous store on {where}: "
                             f"{e.strerror or e}") from None
        sock.setblocking(False)
        return sock

    def close(self):
        """Stops the loop and closes every connection; clients see the connection close."""
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join()
        for c in list(self._conns.values()):
            self._close(c)
        self._sel.close()
        for s in (self._listener, self._wake_r, self._wake_w):
            s.close()

    def _warn(self, message):
        """Logs at most 20 warnings per 10 s, so a flood of bad clients cannot flood the log."""
        now = time.monotonic()
        self._warned = [t for t in self._warned if now - t < 10.0]
        if len(self._warned) < 20:
            self._log(message)
        elif len(self._warned) == 20:
            self._log("more store warnings within 10 s are not shown")
        self._warned.append(now)

    def _loop(self):
        while not self._stopping:
            timeout = self._sweep(time.monotonic())
            for key, mask in self._sel.select(timeout):
                c = key.data if isinstance(key.data, _Conn) else None
                try:
                    if key.data == "listen":
                        self._accept()
                    elif c is not None and mask & selectors.EVENT_READ:
                        self._read(c)
                    if c is not None and mask & selectors.EVENT_WRITE:
                        self._flush(c)
                except Exception as e:  # noqa: BLE001 - one client must never stop the store
                    self._warn(f"internal error{f' serving {c.peer}' if c else ''}: {e!r}")
                    if c is not None:
                        self._close(c)

    def _sweep(self, now):
        """Drops connections past their deadline (at most every 0.25 s); returns how long the
        loop may sleep."""
        if now < self._next_sweep:
            return self._next_sweep - now
        self._next_sweep = now + 0.25
        for c in list(self._conns.values()):
            if c.closing_since is not None:
                if now - c.closing_since >= 2.0:
                    self._close(c)
            elif not c.authenticated and now - c.accepted >= self._handshake_timeout:
                self._refuse(c, f"did not authenticate within {self._handshake_timeout:g} s",
                             "no handshake within the time allowed")
            elif c.authenticated and now - c.active >= self._idle_timeout:
                self._refuse(c, f"sent nothing for {self._idle_timeout:g} s",
                             f"dropped after {self._idle_timeout:g} s without a request")
        return 0.25

    def _accept(self):
        while True:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of file descriptors, or the client gave up already
                if e.errno != errno.ECONNABORTED:
                    self._warn(f"cannot accept a connection: {e.strerror or e}")
                    time.sleep(0.05)
                return
            peer = f"[{addr[0]}]:{addr[1]}" if ":" in addr[0] else f"{addr[0]}:{addr[1]}"
            full = f"the store is full ({self._max_connections} connections)"
            if len(self._conns) >= self._max_connections:
                oldest = next((c for c in self._conns.values() if not c.authenticated), None)
                if oldest is None:
                    self._warn(f"refused {peer}: {full}")
                    try:
                        sock.send(_line({"ok": False, "busy": True, "error": full}))
                    except OSError:
                        pass
                    sock.close()
                    continue
                if oldest.closing_since is None:
                    self._warn(f"dropped {oldest.peer} (not authenticated yet) to make room for "
                               f"{peer}: {full}")
                    oldest.outbuf += _line({"ok": False, "busy": True, "error": full})
                    self._flush(oldest)
                self._close(oldest)
            sock.setblocking(False)
            c = _Conn(sock, peer, time.monotonic())
            self._conns[sock] = c
            self._sel.register(sock, selectors.EVENT_READ, c)
            c.outbuf += _line({"server": SERVER_NAME, "nonce": c.nonce})
            self._flush(c)

    def _read(self, c):
        try:
            chunk = c.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        if not chunk:
            self._close(c)
            return
        if c.closing_since is not None:
            return  # drained, so that closing sends FIN, not RST (which could lose the reply)
        c.active = time.monotonic()
        c.inbuf += chunk
        while c.closing_since is None:
            end = c.inbuf.find(b"\n")
            if end > MAX_LINE_BYTES or (end < 0 and len(c.inbuf) > MAX_LINE_BYTES):
                self._refuse(c, f"sent a line longer than {MAX_LINE_BYTES} bytes",
                             f"request line longer than {MAX_LINE_BYTES} bytes")
                return
            if end < 0:
                break
            line = bytes(c.inbuf[:end])
            del c.inbuf[:end + 1]
            self._handle(c, line)
        self._flush(c)

    def _handle(self, c, line):
        """Answers one request line (Note [Store handshake] before the handshake is done)."""
        try:
            req = json.loads(line)
        except (ValueError, RecursionError) as e:
            req = None
            why = f"malformed JSON ({type(e).__name__})"
        else:
            why = "a request must be a JSON object with a string \"op\""
        if not isinstance(req, dict) or not isinstance(req.get("op"), str):
            if not c.authenticated:
                self._refuse(c, f"sent {why} instead of the handshake", f"bad request: {why}")
            else:
                self._reply(c, ok=False, error=f"bad request: {why}")
            return
        if not c.authenticated:
            self._authenticate(c, req)
            return
        op, key = req["op"], req.get("key")
        if not isinstance(key, str):
            self._reply(c, ok=False, error=f"bad request: {op!r} needs a string \"key\"")
        elif op == "set":
            if not isinstance(req.get("value"), str):
                self._reply(c, ok=False, error="bad request: set needs a string \"value\"")
                return
            self._data[key] = req["value"]
            self._reply(c, ok=True)
        elif op == "get":
            self._reply(c, ok=True, value=self._data.get(key))
        elif op == "add":
            delta = req.get("delta")
            if not isinstance(delta, int) or isinstance(delta, bool):
                self._reply(c, ok=False, error="bad request: add needs an integer \"delta\"")
                return
            try:
                value = int(self._data.get(key, "0")) + delta
            except ValueError:
                self._reply(c, ok=False, error=f"add: the value of {key!r} is not an integer")
                return
            if not -2**63 <= value < 2**63:
                self._reply(c, ok=False, error=f"add: {key!r} would leave the 64-bit range")
                return
            self._data[key] = str(value)
            self._reply(c, ok=True, value=value)
        else:
            self._reply(c, ok=False, error=f"unknown op {op!r}")

    def _authenticate(self, c, req):
        """Step 3 of Note [Store handshake]."""
        nonce, mac = req.get("nonce"), req.get("mac")
        if req["op"] != "auth" or not isinstance(nonce, str) or not _NONCE_RE.fullmatch(nonce):
            self._refuse(c, f"sent {str(req['op'])[:40]!r} instead of the handshake",
                         "the store expects the paddlerun handshake first")
            return
        proof = None
        if self._token is not None:
            if mac is None:
                self._refuse(c, "no job token", f"this store requires the job token; "
                             f"{_TOKEN_HINT}")
                return
            if not _mac_matches(mac, _mac(self._token, b"client", c.nonce, nonce)):
                self._refuse(c, "wrong job token", f"wrong job token; {_TOKEN_HINT}")
                return
            proof = _mac(self._token, b"server", nonce, c.nonce)
        c.authenticated = True
        self._reply(c, ok=True, mac=proof)

    def _reply(self, c, **reply):
        c.outbuf += _line(reply)

    def _refuse(self, c, log_why, client_why):
        """Tells the client why (best effort), logs it with the client's address, closes."""
        self._warn(f"refused {c.peer}: {log_why}")
        self._reply(c, ok=False, error=client_why)
        c.closing_since = time.monotonic()
        c.inbuf.clear()
        self._flush(c)

    def _flush(self, c):
        """Sends what it can without blocking; stops reading from a client that does not read
        its replies, and ends the sending side of a refused connection once its reply is out."""
        if c.closed:
            return
        if c.outbuf:
            try:
                sent = c.sock.send(c.outbuf)
                del c.outbuf[:sent]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._close(c)
                return
        if c.closing_since is not None and not c.outbuf:
            try:
                c.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._close(c)
                return
        events = selectors.EVENT_READ if len(c.outbuf) <= 4 * MAX_LINE_BYTES else 0
        if c.outbuf:
            events |= selectors.EVENT_WRITE
        if self._sel.get_key(c.sock).events != events:
            self._sel.modify(c.sock, events, c)

    def _close(self, c):
        if c.closed:
            return
        c.closed = True
        self._conns.pop(c.sock, None)
        try:
            self._sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()


class _Busy(Exception):
    """The server is full; the client tries again until its timeout."""


class TcpStore:
    """A client of TcpStoreServer; connects (retrying) until `timeout` seconds have passed.

    With a token it proves the token to the server and uses it only if the server proves it
    back (Note [Store handshake]); without one, only a server without a token accepts it."""

    def __init__(self, host, port, timeout, token=None):
        self.endpoint = f"{host}:{port}"
        self._lock = threading.Lock()
        deadline = time.monotonic() + timeout
        last = None
        attempts = 0
        while True:
            attempts += 1
            sock = None
            wait = max(0.1, min(5.0, deadline - time.monotonic()))
            try:
                sock = socket.create_connection((host, port), timeout=wait)
                self._handshake(sock, token)
                break
            except (OSError, _Busy) as e:
                last = (f"no greeting within {wait:g} s, not a paddlerun store?"
                        if isinstance(e, socket.timeout) and sock is not None
                        else getattr(e, "strerror", None) or str(e))
                if sock is not None:
                    sock.close()
            except StoreError:
                sock.close()
                raise
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"cannot reach the rendezvous store at {self.endpoint} within {timeout:g} s "
                    f"({attempts} attempts, last: {last}); is the launcher of node rank 0 "
                    "running there, and is --rdzv-endpoint its address and port?")
            time.sleep(0.2)
        self._sock = sock
        self._sock.settimeout(max(5.0, timeout))
        self.local_addr = self._sock.getsockname()[0]

    def _handshake(self, sock, token):
        """Steps 1-3 of Note [Store handshake] as the client."""
        self._file = sock.makefile("rb")
        if not self._file.peek(1):
            raise _Busy("the store closed the connection before its greeting")
        greeting = self._read()
        if greeting.get("busy"):
            raise _Busy(greeting.get("error"))
        server_nonce = greeting.get("nonce")
        if (greeting.get("server") != SERVER_NAME or not isinstance(server_nonce, str) or
                not _NONCE_RE.fullmatch(server_nonce)):
            raise StoreError(f"{self.endpoint} greeted with {str(greeting)[:80]!r}, not as a "
                             f"paddlerun store ({SERVER_NAME})")
        nonce = secrets.token_hex(16)
        mac = _mac(token, b"client", server_nonce, nonce) if token else None
        sock.sendall(_line({"op": "auth", "nonce": nonce, "mac": mac}))
        reply = self._read()
        if reply.get("busy"):
            raise _Busy(reply.get("error"))
        if not reply.get("ok"):
            raise StoreError(f"the rendezvous store at {self.endpoint} refused this launcher: "
                             f"{reply.get('error')}")
        if token and not _mac_matches(reply.get("mac"),
                                      _mac(token, b"server", nonce, server_nonce)):
            raise StoreError(
                f"the rendezvous store at {self.endpoint} did not prove that it knows the job "
                f"token ({'it has none' if reply.get('mac') is None else 'a wrong proof'}), so "
                f"this launcher does not use it; {_TOKEN_HINT}, and that {self.endpoint} is "
                "this job's store")

    def _read(self):
        """One reply as a dict; StoreError when the line is not one of ours."""
        line = self._file.readline(MAX_LINE_BYTES + 1)
        if not line:
            raise StoreError(f"the rendezvous store at {self.endpoint} closed the connection "
                             "(did node rank 0's launcher exit?)")
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            reply = None
        if not line.endswith(b"\n") or not isinstance(reply, dict):
            raise StoreError(f"{self.endpoint} is not a paddlerun store (it answered "
                             f"{line[:60]!r})")
        return reply

    def _call(self, req):
        data = _line(req)
        if len(data) > MAX_LINE_BYTES:
            raise StoreError(f"a {req['op']} of {req.get('key')!r} is {len(data)} bytes; the "
                             f"rendezvous store takes at most {MAX_LINE_BYTES}")
        with self._lock:
            try:
                self._sock.sendall(data)
                reply = self._read()
            except OSError as e:
                raise StoreError(f"lost the rendezvous store at {self.endpoint}: {e}") from None
        if not reply.get("ok"):
            raise StoreError(f"the rendezvous store at {self.endpoint}: {reply.get('error')}")
        return reply

    def set(self, key, value):
        self._call({"op": "set", "key": key, "value": value})

    def get(self, key):
        return self._call({"op": "get", "key": key})["value"]

    def add(self, key, delta):
        return self._call({"op": "add", "key": key, "delta": delta})["value"]

    def clear(self):
        pass  # the keys live in the hosting launcher's memory and end with it

    def close(self):
        self._sock.close()


class FileStore:
    """Keys as files in a directory every node sees (NFS, or one machine's /tmp)."""

    def __init__(self, directory, prefix):
        self.endpoint = directory
        self._dir = os.path.join(directory, prefix)
        try:
            os.makedirs(self._dir, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot use {self._dir} as the rendezvous directory: {e.strerror}")
        self.local_addr = ""

    def _path(self, key):
        return os.path.join(self._dir, key.replace("/", "%"))

    def set(self, key, value):
        tmp = f"{self._path(key)}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(value)
        os.replace(tmp, self._path(key))

    def get(self, key):
        try:
            with open(self._path(key)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def add(self, key, delta):
        with open(os.path.join(self._dir, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            value = int(self.get(key) or "0") + delta
            self.set(key, str(value))
            return value

    def clear(self):
        """Removes every key of the job (the files in its folder, then the folder)."""
        try:
            for name in os.listdir(self._dir):
                path = os.path.join(self._dir, name)
                if os.path.isfile(path):
                    os.unlink(path)
            os.rmdir(self._dir)
        except OSError as e:
            raise StoreError(f"cannot clear the rendezvous directory {self._dir}: {e}") from None

    def close(self):
        pass


def _b64(text):
    return base64.b64encode(text.encode()).decode()


class EtcdStore:
    """Keys under /paddlerun/<prefix>/ in etcd, through its v3 JSON gateway (etcd >= 3.4)."""

    def __init__(self, host, port, prefix, timeout):
        self.endpoint = f"{host}:{port}"
        self._url = f"http://{host}:{port}/v3"
        self._prefix = f"/paddlerun/{prefix}/"
        self._timeout = timeout
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._post("/kv/range", {"key": _b64(self._prefix + "probe")}, timeout=2.0)
                break
            except StoreError as e:
                if time.monotonic() >= deadline:
                    raise StoreError(f"cannot reach etcd at {self.endpoint} within {timeout:g} s "
                                     f"({e}); is etcd running there with "
                                     f"--listen-client-urls http://{host}:{port}?") from None
                time.sleep(0.3)
        with socket.create_connection((host, port), timeout=2.0) as s:
            self.local_addr = s.getsockname()[0]

    def _post(self, path, body, timeout=None):
        req = urllib.request.Request(self._url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self._timeout) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise StoreError(f"etcd at {self.endpoint}{path}: {e}") from None

    def set(self, key, value):
        self._post("/kv/put", {"key": _b64(self._prefix + key), "value": _b64(value)})

    def get(self, key):
        kvs = self._post("/kv/range", {"key": _b64(self._prefix + key)}).get("kvs")
        return base64.b64decode(kvs[0].get("value", "")).decode() if kvs else None

    def add(self, key, delta):
        k = _b64(self._prefix + key)
        while True:  # compare-and-swap until no other node wrote in between
            old = self.get(key)
            new = str(int(old or "0") + delta)
            if old is None:
                compare = {"key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
            else:
                compare = {"key": k, "target": "VALUE", "result": "EQUAL", "value": _b64(old)}
            reply = self._post("/kv/txn", {"compare": [compare], "success": [
                {"requestPut": {"key": k, "value": _b64(new)}}]})
            if reply.get("succeeded"):
                return int(new)

    def clear(self):
        """Deletes every key under the job's prefix."""
        prefix = self._prefix.encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])  # the range [prefix, end) is the prefix
        self._post("/kv/deleterange", {"key": _b64(self._prefix),
                                       "range_end": base64.b64encode(end).decode()})

    def close(self):
        pass
