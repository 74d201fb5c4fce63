"""Elastic training from Python: workers leave and join a running job, nothing is lost.

The C++ engine does the work (paddle/parallel/elastic.h, elastic_state.h); this module gives it
a Python shape. Workers meet in numbered generations through the job's store (paddlerun hosts
it for `--min-nproc` / `--nnodes=MIN:MAX` jobs and sets MASTER_ADDR, MASTER_PORT,
PADDLE_ELASTIC_MIN_SIZE and PADDLE_ELASTIC_MAX_SIZE). A training loop:

    group = elastic.ElasticGroup()                 # from the launcher's environment
    state = elastic.State(model, optimizer)
    def generation(pg):                            # pg: this generation's ProcessGroup
        ddp = dist.DistributedDataParallel(model, group=pg)
        while training:
            ... one step on this rank's share of the global batch ...
            change = group.agree_on_change(value=loss_part)   # SIGTERM noticed here
            if step % K == 0 or change.any:
                state.commit()
            if change.any:
                return change                      # regroup (planned: no rollback)
        return True                                # done
    elastic.run(group, state, generation)

`run` joins a generation, broadcasts rank 0's commit to every member (a joining worker gets the
state this way, never from a file), calls `generation`, and on a failure of the group
(DistPeerError, DistNetworkError, a timeout) leaves it, rolls back to the last commit and joins
the next generation with whoever is left (the progress counters state.epoch, state.step,
state.samples are part of the commit, so they roll back too). Note [Elastic commit] in
paddle/parallel/elastic_state.cc says why a commit is a point every rank agrees on.
"""
import os
import signal
import time

from paddle import _C
from paddle._C.distributed.elastic import epoch_order, share_of_global_batch, steps_per_epoch

__all__ = ["ElasticGroup", "State", "Change", "run", "step_done", "epoch_order",
           "share_of_global_batch", "steps_per_epoch"]


def _env_int(name, default=None):
    value = os.environ.get(name)
    if value is None:
        if default is not None:
            return default
        raise RuntimeError(f"elastic: environment variable {name} is not set; start the workers "
                           f"with paddlerun --nproc=N --min-nproc=M")
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(f"elastic: environment variable {name} is '{value}', not an "
                           f"integer") from None


class Change:
    """What the members agreed after a step: workers waiting to join and ranks that leave."""

    def __init__(self, joiners, leavers, total):
        self.joiners, self.leavers, self.total = joiners, list(leavers), total

    @property
    def any(self):
        return self.joiners > 0 or bool(self.leavers)


class ElasticGroup:
    """Membership of an elastic job. Arguments left None come from the launcher's environment
    (MASTER_ADDR, MASTER_PORT, PADDLE_ELASTIC_MIN_SIZE, PADDLE_ELASTIC_MAX_SIZE)."""

    def __init__(self, backend="native", timeout=None, host=None, port=None, min_size=None,
                 max_size=None, prefix="elastic"):
        host = host if host is not None else os.environ.get("MASTER_ADDR")
        if host is None:
            raise RuntimeError("elastic: MASTER_ADDR is not set (the job's store)")
        port = port if port is not None else _env_int("MASTER_PORT")
        self.min_size = min_size if min_size is not None else _env_int("PADDLE_ELASTIC_MIN_SIZE",
                                                                       1)
        self.max_size = max_size if max_size is not None else _env_int("PADDLE_ELASTIC_MAX_SIZE")
        self._native = _C.distributed.elastic.ElasticGroup(
            host, port, self.min_size, self.max_size, backend, timeout, prefix)
        # The first workers expect each other; a restarted one expects nobody in particular.
        self.expected = self.max_size if _env_int("PADDLE_RESTART_COUNT", 0) == 0 else 0
        self.leave_requested = False

    def agree_on_change(self, leaving=None, value=0.0):
        """Collective, once per step: returns a Change whose `total` is `value` summed over the
        ranks (a step's loss parts, say: no extra collective)."""
        if leaving is None:
            leaving = self.leave_requested
        return Change(*self._native.agree_on_change(bool(leaving), float(value)))

    def mark_done(self):
        self._native.mark_done()

    def job_started(self):
        return self._native.job_started()

    @property
    def rank(self):
        return self._native.rank

    @property
    def size(self):
        return self._native.size

    @property
    def generation(self):
        return self._native.generation

    @property
    def changes(self):
        """Generations this worker joined after its first."""
        return self._native.changes


class State:
    """The replica's model, optimizer state and progress (epoch, step, samples of the epoch
    consumed by all ranks together, the epoch's running loss) with commit() and rollback().
    `extras` names integers of the program committed with the rest (a generator's offset)."""

    def __init__(self, model, optimizer, extras=()):
        self.model, self.optimizer = model, optimizer  # kept alive with the native state
        self._native = _C.distributed.elastic.ElasticState(model, optimizer)
        for key in extras:
            self._native.set_extra(key, 0)

    def commit(self):
        self._native.commit()

    def rollback(self):
        self._native.rollback()

    def broadcast(self, group, root=0):
        self._native.broadcast(group._native, root)

    def __getitem__(self, key):
        return self._native.get_extra(key)

    def __setitem__(self, key, value):
        self._native.set_extra(key, int(value))

    has_commit = property(lambda self: self._native.has_commit)
    committed_step = property(lambda self: self._native.committed_step)
    commit_bytes = property(lambda self: self._native.commit_bytes)


def _progress_field(name):
    return property(lambda self: getattr(self._native, name),
                    lambda self, v: setattr(self._native, name, v))


for _name in ("epoch", "step", "samples", "loss_sum", "loss_count"):
    setattr(State, _name, _progress_field(_name))


def _on_sigterm(group):
    def handler(signum, frame):  # preemption notice: finish the step, let the others commit
        group.leave_requested = True
    return handler


_recovery = {"failed_at": None, "max_s": 0.0}


def step_done():
    """Call after each completed step: returns the seconds since the failure this step is the
    first to complete after (None if there was none), and keeps their maximum."""
    failed_at = _recovery["failed_at"]
    if failed_at is None:
        return None
    seconds = time.monotonic() - failed_at
    _recovery["max_s"] = max(_recovery["max_s"], seconds)
    _recovery["failed_at"] = None
    return seconds


def run(group, state, generation, max_failures_in_a_row=10, log=print):
    """Runs `generation(process_group)` once per generation until training is done or this
    worker leaves (SIGTERM: it finishes its step, the others commit, it returns normally).

    `generation` returns True when training is done, or the Change that ended the generation
    (after committing: the members regroup without a rollback). A DistError raised in it (a peer
    died, a collective timed out) makes this worker leave the generation, roll back to its last
    commit and join the next one with whoever is left. Returns a dict: membership_changes,
    recovery_s_max (seconds from a failure to the first step_done() after it), left."""
    from paddle.distributed import ProcessGroup  # the package's wrapper of a native group
    signal.signal(signal.SIGTERM, _on_sigterm(group))
    native = group._native
    failures = 0
    while True:
        joined = native.join(state.committed_step if state.has_commit else -1, group.expected)
        if joined is None:
            log("elastic: the job has finished; nothing to join")
            break
        generation_id, _, size, _ = joined
        pg = ProcessGroup(native.group(), range(size))
        try:
            state.broadcast(pg, 0)
            outcome = generation(pg)
        except RuntimeError as e:  # DistError and whatever else ended the generation
            failures += 1
            if failures > max_failures_in_a_row:
                raise
            log(f"elastic: generation {generation_id} failed ({e}); regrouping")
            if _recovery["failed_at"] is None:
                _recovery["failed_at"] = time.monotonic()
            del pg
            native.leave(str(e))
            if state.has_commit:
                state.rollback()
            group.expected = max(1, size - 1)
            continue
        failures = 0
        del pg
        if outcome is True:
            if group.rank == 0:
                group.mark_done()
            break
        if group.leave_requested and native.rank in outcome.leavers:
            native.leave(None)
            log(f"elastic: left the job after step {state.step} (SIGTERM)")
            return {"membership_changes": group.changes, "recovery_s_max": _recovery["max_s"],
                    "left": True}
        group.expected = size - len(outcome.leavers) + outcome.joiners
    return {"membership_changes": group.changes, "recovery_s_max": _recovery["max_s"],
            "left": False}
