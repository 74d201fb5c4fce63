"""The key-value stores the node launchers rendezvous in, behind one small interface.

Every store offers set(key, value), get(key) -> str or None, add(key, delta) -> int (atomic) and
clear() (removes every key of the job; the last launcher to exit calls it).
Waiting is done by the rendezvous with get() and a deadline, so no store call blocks for long:
each one is bounded by the store's own timeout and raises StoreError (whose message names the
endpoint) when the store cannot be reached.

  TcpStoreServer / TcpStore  newline-delimited JSON over TCP; the launcher of node rank 0 hosts
                             the server in a thread at --rdzv-endpoint
  FileStore                  one file per key in a shared directory, add() under flock
  EtcdStore                  etcd's v3 JSON gateway (POST /v3/kv/range, put, txn; base64 keys)
"""
import base64
import errno
import fcntl
import json
import os
import socket
import socketserver
import threading
import time
import urllib.error
import urllib.request

SERVER_NAME = "paddlerun-store/1"


class StoreError(Exception):
    """The store could not be reached or answered nonsense; the message says which and why."""


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        data = self.server.data
        lock = self.server.lock
        for line in self.rfile:
            try:
                req = json.loads(line)
                op, key = req["op"], req.get("key", "")
                with lock:
                    if op == "set":
                        data[key] = req["value"]
                        reply = {"ok": True}
                    elif op == "get":
                        reply = {"ok": True, "value": data.get(key)}
                    elif op == "add":
                        value = int(data.get(key, "0")) + int(req["delta"])
                        data[key] = str(value)
                        reply = {"ok": True, "value": value}
                    elif op == "hello":
                        reply = {"ok": True, "server": SERVER_NAME}
                    else:
                        reply = {"ok": False, "error": f"unknown op {op!r}"}
            except (ValueError, KeyError, TypeError) as e:
                reply = {"ok": False, "error": f"bad request: {e}"}
            self.wfile.write(json.dumps(reply).encode() + b"\n")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class TcpStoreServer:
    """Serves a TcpStore on host:port from a daemon thread until close()."""

    def __init__(self, host, port):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        _Server.address_family = family
        try:
            self._server = _Server((host, port), _Handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise StoreError(
                    f"cannot host the rendezvous store on {host}:{port}: the port is already in "
                    "use (another job's launcher, or another program); choose a free port in "
                    "--rdzv-endpoint, or --standalone on one node") from None
            raise StoreError(f"cannot host the rendezvous store on {host}:{port}: {e.strerror}")
        self._server.data = {}
        self._server.lock = threading.Lock()
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()


class TcpStore:
    """A client of TcpStoreServer; connects (retrying) until `timeout` seconds have passed."""

    def __init__(self, host, port, timeout):
        self.endpoint = f"{host}:{port}"
        self._lock = threading.Lock()
        deadline = time.monotonic() + timeout
        last = None
        attempts = 0
        while True:
            attempts += 1
            try:
                self._sock = socket.create_connection(
                    (host, port), timeout=max(0.1, min(5.0, deadline - time.monotonic())))
                break
            except OSError as e:
                last = e.strerror or str(e)
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"cannot reach the rendezvous store at {self.endpoint} within {timeout:g} s "
                    f"({attempts} attempts, last: {last}); is the launcher of node rank 0 "
                    "running there, and is --rdzv-endpoint its address and port?")
            time.sleep(0.2)
        self._sock.settimeout(max(5.0, timeout))
        self._file = self._sock.makefile("rb")
        self.local_addr = self._sock.getsockname()[0]
        reply = self._call({"op": "hello"})
        if reply.get("server") != SERVER_NAME:
            raise StoreError(f"{self.endpoint} answered {reply!r}, not as a paddlerun store")

    def _call(self, req):
        with self._lock:
            try:
                self._sock.sendall(json.dumps(req).encode() + b"\n")
                line = self._file.readline()
            except OSError as e:
                raise StoreError(f"lost the rendezvous store at {self.endpoint}: {e}") from None
        if not line:
            raise StoreError(f"the rendezvous store at {self.endpoint} closed the connection "
                             "(did node rank 0's launcher exit?)")
        try:
            reply = json.loads(line)
        except ValueError:
            raise StoreError(f"{self.endpoint} is not a paddlerun store (it answered "
                             f"{line[:60]!r})") from None
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
