"""The workers' output: one pipe per worker, read without blocking, split into lines.

Each line goes to the console as "[rank R] line" (unless --log-dir without --tee, or the worker's
local rank is not in --local-ranks-filter) and, with --log-dir, unprefixed into
LOG_DIR/attempt_<restart>/rank_<R>.log. The last TAIL_LINES lines of every worker are kept so a
failure report can show them. note() adds the launcher's own line to a worker's output, after
what the worker wrote: why the launcher stopped it.
"""
import collections
import os
import selectors
import sys

TAIL_LINES = 20


class _Stream:
    def __init__(self, rank, console, logfile):
        self.rank = rank
        self.console = console
        self.logfile = logfile
        self.partial = b""
        self.tail = collections.deque(maxlen=TAIL_LINES)


class LogMux:
    """Reads every worker's pipe; pump() moves what is there to the console and the log files."""

    def __init__(self, log_dir, attempt, tee, ranks_filter, out=None):
        self._dir = os.path.join(log_dir, f"attempt_{attempt}") if log_dir else ""
        if self._dir:
            os.makedirs(self._dir, exist_ok=True)
        self._tee = tee or not log_dir
        self._filter = ranks_filter
        self._out = out or sys.stdout
        self._sel = selectors.DefaultSelector()
        self._streams = {}

    def log_path(self, rank):
        return os.path.join(self._dir, f"rank_{rank}.log") if self._dir else ""

    def add(self, rank, local_rank, pipe):
        console = self._tee and (self._filter is None or local_rank in self._filter)
        logfile = open(self.log_path(rank), "wb") if self._dir else None
        stream = _Stream(rank, console, logfile)
        self._streams[rank] = stream
        os.set_blocking(pipe.fileno(), False)
        self._sel.register(pipe, selectors.EVENT_READ, stream)

    def _emit(self, stream, line):
        stream.tail.append(line.decode(errors="replace"))
        if stream.logfile:
            stream.logfile.write(line + b"\n")
        if stream.console:
            self._out.write(f"[rank {stream.rank}] {line.decode(errors='replace')}\n")

    def pump(self, timeout):
        """Waits up to `timeout` s for output and handles what arrived; False once all pipes
        are closed."""
        if not self._sel.get_map():
            return False
        for key, _ in self._sel.select(timeout=timeout):
            stream = key.data
            try:
                chunk = key.fileobj.read()
            except OSError:
                chunk = b""
            if chunk is None:
                continue
            if not chunk:
                self._sel.unregister(key.fileobj)
                key.fileobj.close()
                if stream.partial:
                    self._emit(stream, stream.partial)
                    stream.partial = b""
                if stream.logfile:
                    stream.logfile.close()
                continue
            lines = (stream.partial + chunk).split(b"\n")
            stream.partial = lines.pop()
            for line in lines:
                self._emit(stream, line)
            if stream.logfile:
                stream.logfile.flush()
        self._out.flush()
        return bool(self._sel.get_map())

    def drain(self, timeout):
        """Reads until every pipe is closed or `timeout` s passed (a grandchild may hold one)."""
        import time
        deadline = time.monotonic() + timeout
        while self.pump(0.05) and time.monotonic() < deadline:
            pass

    def note(self, rank, text):
        """Ends rank's output (console, log file, tail) with the launcher's line "paddlerun: TEXT",
        so whoever reads only that worker's log learns why it stopped."""
        stream = self._streams.get(rank)
        if stream is None:
            return
        line = f"paddlerun: {text}".encode()
        reopened = stream.logfile is not None and stream.logfile.closed  # its pipe closed
        if reopened:
            stream.logfile = open(self.log_path(rank), "ab")
        self._emit(stream, line)
        if stream.logfile is not None:
            stream.logfile.flush()
            if reopened:
                stream.logfile.close()
        self._out.flush()

    def tail(self, rank):
        return list(self._streams[rank].tail) if rank in self._streams else []
