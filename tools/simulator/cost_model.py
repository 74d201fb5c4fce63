"""The cost of one message on one kind of link, and the parameter file that holds them.

One step of an algorithm in which a rank sends b bytes in P pieces and its receiver reduces r
bytes costs
    alpha + overhead * (P - 1) + beta * b * share + gamma * r          (microseconds)
alpha: latency of one dependent hop, its first message included; overhead: the software cost of
each further message of a pipelined step (the ring's pieces); beta: time per byte on the link
when it is not shared; share: how many flows share the busiest link the message crosses (1
inside a host); gamma: the reduction kernel's time per byte. The time is linear in the
parameters, so fit.py finds them by least squares from measured sweeps.

params.json: {"version": 1, "transports": {NAME: {"alpha_us", "overhead_us", "beta_us_per_byte",
"gamma_us_per_byte", ...fit statistics}}}. A NAME may carry "@R" (e.g. "tcp@4"): parameters fitted
on runs with R ranks per host, preferred by lookups for that many ranks per host.
"""
import dataclasses
import json
import math

PARAM_NAMES = ("alpha_us", "overhead_us", "beta_us_per_byte", "gamma_us_per_byte")
# Optional in params.json (0 when absent): the memory term of Note [Cache knee], the
# rendezvous of Note [Eager and rendezvous] and the term of Note [Small pages] (engine.py). The
# tuning file's link lines hold PARAM_NAMES + OPTIONAL_NAMES in this order.
OPTIONAL_NAMES = ("memory_us_per_byte", "rendezvous_us", "rendezvous_beta_us_per_byte",
                  "cache_bytes", "eager_bytes", "small_page_us_per_byte", "huge_page_bytes")
# LinkParams.vector(), engine.link_features' columns.
LINEAR_NAMES = PARAM_NAMES + OPTIONAL_NAMES[:3] + ("small_page_us_per_byte",)


class ParamsError(ValueError):
    """A parameter file or value that cannot be used; the message names the file and field."""


@dataclasses.dataclass(frozen=True)
class LinkParams:
    alpha_us: float
    overhead_us: float
    beta_us_per_byte: float
    gamma_us_per_byte: float
    memory_us_per_byte: float = 0.0
    rendezvous_us: float = 0.0
    rendezvous_beta_us_per_byte: float = 0.0
    cache_bytes: float = 0.0
    eager_bytes: float = 0.0
    small_page_us_per_byte: float = 0.0
    huge_page_bytes: float = 0.0

    def vector(self):
        """The coefficients of the linear terms (LINEAR_NAMES), engine.link_features' columns."""
        return [getattr(self, name) for name in LINEAR_NAMES]

    def miss_fraction(self, working_set_bytes):
        """The share of an operation's bytes that come from memory rather than cache (Note
        [Cache knee]); 0 without a knee."""
        if self.cache_bytes <= 0 or self.memory_us_per_byte <= 0:
            return 0.0
        return max(0.0, 1.0 - self.cache_bytes / max(float(working_set_bytes), 1.0))

    def small_pages(self, working_set_bytes):
        """1 when an allreduce of this many bytes has its buffers on small pages (Note [Small
        pages]), else 0; 0 without a threshold."""
        return 1.0 if 0 < working_set_bytes < self.huge_page_bytes else 0.0

    def with_bandwidth(self, gbit_per_s):
        """The same link at another bandwidth (beta from Gbit/s; 1 Gbit/s = 125 bytes/us)."""
        if not gbit_per_s > 0:
            raise ParamsError(f"link bandwidth must be > 0 Gbit/s, got {gbit_per_s}")
        return dataclasses.replace(self, beta_us_per_byte=1.0 / (gbit_per_s * 125.0))

    def describe(self):
        bw = 1.0 / self.beta_us_per_byte / 1e3 if self.beta_us_per_byte > 0 else math.inf
        red = 1.0 / self.gamma_us_per_byte / 1e3 if self.gamma_us_per_byte > 0 else math.inf
        text = (f"alpha {self.alpha_us:.2f} us, overhead {self.overhead_us:.2f} us/message, "
                f"{bw:.2f} GB/s on the wire, {red:.2f} GB/s reduction")
        if self.eager_bytes > 0:
            rbw = (1.0 / self.rendezvous_beta_us_per_byte / 1e3
                   if self.rendezvous_beta_us_per_byte > 0 else math.inf)
            text += (f"; beyond {self.eager_bytes / 1024:g} KiB +{self.rendezvous_us:.2f} us a "
                     f"message, {rbw:.2f} GB/s")
        if self.huge_page_bytes > 0 and self.small_page_us_per_byte > 0:
            text += (f", +{self.small_page_us_per_byte * 1e3:.3f} ns/byte of those under "
                     f"{self.huge_page_bytes / (1 << 20):g} MiB")
        if self.miss_fraction(math.inf) > 0:
            text += (f", +{self.memory_us_per_byte * 1e3:.3f} ns/byte beyond "
                     f"{self.cache_bytes / (1 << 20):g} MiB")
        return text


def _link_from(name, entry, path):
    if not isinstance(entry, dict):
        raise ParamsError(f"{path}: transports.{name} must be an object")
    values = {}
    for field in PARAM_NAMES:
        value = entry.get(field)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ParamsError(f"{path}: transports.{name}.{field} must be a finite number >= 0, "
                              f"got {value!r}")
        values[field] = float(value)
    for field in OPTIONAL_NAMES:
        value = entry.get(field, 0.0)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ParamsError(f"{path}: transports.{name}.{field} must be a finite number >= 0 "
                              f"(or absent), got {value!r}")
        values[field] = float(value)
    return LinkParams(**values)


class ParamSet:
    """The transports of one params.json."""

    def __init__(self, links, extra=None, path="<params>"):
        self.links = dict(links)
        self.extra = dict(extra or {})
        self.path = path

    @classmethod
    def load(cls, path):
        try:
            with open(path) as f:
                doc = json.load(f)
        except OSError as e:
            raise ParamsError(f"cannot read params file {path}: {e.strerror}") from e
        except json.JSONDecodeError as e:
            raise ParamsError(f"{path}: not JSON ({e})") from e
        if not isinstance(doc, dict) or doc.get("version") != 1:
            raise ParamsError(f"{path}: expected an object with \"version\": 1 (from "
                              "`tools/simulate fit`)")
        transports = doc.get("transports")
        if not isinstance(transports, dict) or not transports:
            raise ParamsError(f"{path}: \"transports\" must be a non-empty object")
        links = {name: _link_from(name, entry, path) for name, entry in transports.items()}
        return cls(links, {name: entry for name, entry in transports.items()}, path)

    def to_json(self):
        transports = {}
        for name, link in sorted(self.links.items()):
            entry = dict(self.extra.get(name, {}))
            entry.update(dataclasses.asdict(link))
            transports[name] = entry
        return {"version": 1, "transports": transports}

    def has(self, transport):
        """Whether there are parameters for `transport`, pooled or fitted at some "@R"."""
        return transport in self.links or any(k.startswith(transport + "@") for k in self.links)

    def get(self, transport, ranks_per_host=None):
        """The link for `transport`, preferring "transport@R" for R ranks per host."""
        if ranks_per_host is not None and f"{transport}@{ranks_per_host}" in self.links:
            return self.links[f"{transport}@{ranks_per_host}"]
        if transport in self.links:
            return self.links[transport]
        # The nearest per-R fit when there is no pooled one.
        fitted = sorted((int(k.split("@")[1]), k) for k in self.links
                        if k.startswith(transport + "@"))
        if fitted:
            want = ranks_per_host or 0
            return self.links[min(fitted, key=lambda rk: (abs(rk[0] - want), rk[0]))[1]]
        raise ParamsError(f"{self.path}: no parameters for transport \"{transport}\"; it has "
                          f"{', '.join(sorted(self.links))}")
