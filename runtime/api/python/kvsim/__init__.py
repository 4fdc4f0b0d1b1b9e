"""kvsim: Python bindings of libkvsim, the simulator of LLM-serving engines (ctypes, no compiled
extension).

    import kvsim
    with kvsim.Engine({"num-gpu-blocks": 512, "kv-events": True}) as e:
        e.add(1, input_len=100, max_tokens=8)
        e.run()
        print(e.events(), e.record(1), e.report()["summary"])

    kvsim.replay({"engines": 2}, requests=[{"id": 1, "input_len": 64}, ...])

Options are those of `kvsim replay` (docs/api.md), by name with '-' or '_': Config(max_num_seqs=8)
equals Config({"max-num-seqs": 8}). Booleans become "true"/"false", numbers their decimal text.
Every error of the C library raises kvsim.Error (a RuntimeError) whose .code is the negative
errno and whose text is the library's message ("option --max-num-seqs: ...").

Objects are not thread-safe by design of the C API (one thread at a time); each one serialises
its own calls with a lock, so sharing one between threads is safe, merely not parallel.
"""

import array
import ctypes
import errno as _errno
import json
import numbers
import operator
import threading
import weakref
from ctypes import byref, c_uint32, c_uint64, c_void_p

from . import _native
from ._native import LIBRARY_PATH, LIBRARY_VERSION, BUILT_FOR_VERSION

__all__ = ["Error", "Config", "Engine", "replay", "version", "version_info", "allocator",
           "strerror", "finish_reason_name", "LIBRARY_PATH", "LIBRARY_VERSION",
           "BUILT_FOR_VERSION", "EDEADEND", "EINVARIANT", "ESTALE", "ESCENARIO", "ENOREPRO",
           "EFINISHED"]

_lib = _native.lib

# kvsim's own error codes (KVSIM_ERRNO_MAP of kvsim.h): negative errno values.
EDEADEND = -_errno.EDEADLK
EINVARIANT = -_errno.EUCLEAN
ESTALE = -_errno.ESTALE
ESCENARIO = -_errno.EBADMSG
ENOREPRO = -_errno.EPROTO
EFINISHED = -_errno.EALREADY

EVENT_KINDS = ("scheduled", "token", "preempted", "finished")
KV_EVENT_KINDS = ("stored", "removed", "cleared")

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _text(b):
    return b.decode("utf-8", "replace") if b else ""


def strerror(code):
    """What a kvsim error code (a negative errno) means."""
    return _text(_lib.kvsim_strerror(int(code)))


def finish_reason_name(reason):
    """"stop", "length", "abort", "rejected" (kvsim_finish_reason_name)."""
    return _text(_lib.kvsim_finish_reason_name(int(reason)))


class Error(RuntimeError):
    """An error of libkvsim: .code is the negative errno, str() the library's message."""

    def __init__(self, code, message=None):
        self.code = int(code)
        self.message = message or strerror(code)
        super().__init__(self.message)

    def __repr__(self):
        return "kvsim.Error(%d, %r)" % (self.code, self.message)


def version():
    """The library's version string, "kvsim X.Y.Z"."""
    return _text(_lib.kvsim_version())


def version_info():
    """The loaded library's version as a tuple (major, minor, patch)."""
    return LIBRARY_VERSION


def allocator():
    """"jemalloc" or "libc": the allocator linked into the library."""
    return _text(_lib.kvsim_allocator())


def _take_string(p, what):
    """A malloc'd char * of the library as str, freed with kvsim_free; NULL raises."""
    if not p:
        raise Error(-_errno.ENOMEM, "%s: out of memory" % what)
    try:
        return ctypes.string_at(p).decode("utf-8")
    finally:
        _lib.kvsim_free(p)


def _int(name, v, lo, hi):
    if isinstance(v, bool):
        raise TypeError("%s must be an integer, not bool" % name)
    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError("%s must be an integer, not %s" % (name, type(v).__name__)) from None
    if not lo <= v <= hi:
        raise Error(-_errno.EINVAL, "%s: %d is out of range [%d, %d]" % (name, v, lo, hi))
    return v


def _array(name, code, values):
    try:
        a = array.array(code, values)
    except OverflowError as exc:
        raise Error(-_errno.EINVAL, "%s: a value is out of range (%s)" % (name, exc)) from None
    except TypeError as exc:
        raise TypeError("%s must be a sequence of integers (%s)" % (name, exc)) from None
    return a


# array type codes of exactly 32 and 64 bits.
_A32 = next(c for c in "IL" if array.array(c).itemsize == 4)
_A64 = next(c for c in "LQ" if array.array(c).itemsize == 8)


def _attach(keep, name, code, ctype, values):
    """A C array of values (kept alive in keep) and its length, for a request field."""
    a = _array(name, code, values)
    if len(a) > _U32:
        raise Error(-_errno.EINVAL, "%s: too many (%d)" % (name, len(a)))
    if not len(a):
        return None, 0
    buf = (ctype * len(a)).from_buffer(a)
    keep.append(buf)
    return ctypes.cast(buf, ctypes.POINTER(ctype)), len(a)


def _fill_request(req, keep, id=0, arrival_ns=0, tokens=None, hash_ids=None, hash_block_size=16,
                  input_len=0, max_tokens=16, min_tokens=0, stop_after=0, priority=0):
    """Fills the kvsim_request_t req; keep receives the arrays it points to."""
    req.size = ctypes.sizeof(_native.Request)
    req.id = _int("id", id, 0, _U64)
    req.arrival_ns = _int("arrival_ns", arrival_ns, _I64_MIN, _I64_MAX)
    if tokens is not None:
        req.tokens, req.num_tokens = _attach(keep, "tokens", _A32, c_uint32, tokens)
    if hash_ids is not None:
        req.hash_ids, req.num_hash_ids = _attach(keep, "hash_ids", _A64, c_uint64, hash_ids)
    req.hash_block_size = _int("hash_block_size", hash_block_size, 0, _U32)
    req.input_len = _int("input_len", input_len, 0, _U32)
    req.max_tokens = _int("max_tokens", max_tokens, 0, _U32)
    req.min_tokens = _int("min_tokens", min_tokens, 0, _U32)
    req.stop_after = _int("stop_after", stop_after, 0, _U32)
    req.priority = _int("priority", priority, _I64_MIN, _I64_MAX)
    return req


def _struct_dict(s, skip=("size",)):
    return {name: getattr(s, name) for name, _ in s._fields_ if name not in skip}


# --- configuration -----------------------------------------------------------------------------


def _option_value(value):
    if value is None:
        return None  # NULL: a flag's "true"
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, bytes):
        return value
    if isinstance(value, (int, float)):
        return repr(value).encode() if isinstance(value, float) else str(value).encode()
    if isinstance(value, str):
        return value.encode("utf-8")
    try:
        return str(operator.index(value)).encode()  # numpy integers and the like
    except TypeError:
        pass
    if isinstance(value, numbers.Real):
        return repr(float(value)).encode()  # numpy floats, fractions, ...
    if hasattr(value, "__fspath__"):
        import os
        return os.fsencode(value)
    raise TypeError("option value must be a str, bool, number or path, not %s" %
                    type(value).__name__)


class _Closable:
    """A C handle freed by close(), by a with block's end, or at garbage collection."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Config(_Closable):
    """A kvsim configuration (kvsim_config_t): `kvsim replay`'s options, set by name.

    Config({"max-num-seqs": 8}, block_size=16): the mapping first (in its order), then the
    keywords. A bad name or value raises kvsim.Error with the library's message.
    """

    def __init__(self, options=None, **kw):
        self._lock = threading.RLock()
        self._free = _lib.kvsim_config_free
        h = _native.ConfigP()
        rc = _lib.kvsim_config_new(byref(h))
        if rc < 0:
            raise Error(rc)
        if not h:
            raise Error(-_errno.ENOMEM, "kvsim_config_new returned no configuration")
        self._h = h
        try:
            if options is not None:
                self.update(options)
            self.update(kw)
        except BaseException:
            self.close()
            raise

    def _handle(self):
        h = self._h
        if h is None:
            raise ValueError("kvsim.Config is closed")
        return h

    def _error(self, rc):
        msg = _text(_lib.kvsim_config_error(self._h)) if self._h is not None else ""
        return Error(rc, msg or None)

    def set(self, name, value=None):
        """Sets option name (with or without dashes, '_' or '-') to value (None = a flag's
        "true"). Returns self."""
        if isinstance(name, str):
            bname = name.encode("utf-8")
        elif isinstance(name, bytes):
            bname = name
        else:
            raise TypeError("option name must be a str, not %s" % type(name).__name__)
        bvalue = _option_value(value)
        with self._lock:
            rc = _lib.kvsim_config_set(self._handle(), bname, bvalue)
            if rc < 0:
                raise self._error(rc)
        return self

    def update(self, options=(), **kw):
        """Sets every option of a mapping (or of (name, value) pairs), then of the keywords."""
        items = options.items() if hasattr(options, "items") else options
        for name, value in items:
            self.set(name, value)
        for name, value in kw.items():
            self.set(name, value)
        return self

    def set_json(self, text):
        """Sets every key of a JSON object (a str, or a dict to serialise) in its order."""
        if not isinstance(text, (str, bytes)):
            text = json.dumps(text)
        if isinstance(text, str):
            text = text.encode("utf-8")
        with self._lock:
            rc = _lib.kvsim_config_set_json(self._handle(), text)
            if rc < 0:
                raise self._error(rc)
        return self

    def to_json(self):
        """Every option set, as the JSON text of kvsim_config_json."""
        with self._lock:
            return _take_string(_lib.kvsim_config_json(self._handle()), "kvsim_config_json")

    def to_dict(self):
        """Every option set, name -> value (strings as given), in the order set."""
        return json.loads(self.to_json())

    def copy(self):
        """An independent configuration with the same options."""
        c = Config()
        try:
            c.set_json(self.to_json())
        except BaseException:
            c.close()
            raise
        return c

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._free(h)

    def __repr__(self):
        if getattr(self, "_h", None) is None:
            return "<kvsim.Config (closed)>"
        return "<kvsim.Config %s>" % self.to_json()


def _as_config(config, options):
    """(Config, owned): config itself when it is a Config and there are no options, else a new
    configuration the caller must close."""
    if isinstance(config, Config) and not options:
        config._handle()
        return config, False
    if isinstance(config, Config):
        c = config.copy()
    else:
        c = Config()
    try:
        if config is not None and not isinstance(config, Config):
            c.update(config)
        c.update(options)
    except BaseException:
        c.close()
        raise
    return c, True


# --- an engine ---------------------------------------------------------------------------------


def _event_dict(ev):
    kind = ev.kind
    d = {"t_ns": ev.t_ns, "id": ev.id,
         "kind": EVENT_KINDS[kind] if kind < len(EVENT_KINDS) else kind, "a": ev.a, "b": ev.b}
    if kind == 3:
        d["reason"] = finish_reason_name(ev.a)
    return d


def _record_dict(r):
    d = _struct_dict(r)
    for k in ("arrival_ns", "first_scheduled_ns", "first_token_ns", "last_token_ns",
              "finish_ns"):
        if d[k] == -1:
            d[k] = None
    d["finish_reason"] = None if r.finish_reason < 0 else finish_reason_name(r.finish_reason)
    return d


class Engine(_Closable):
    """One engine you drive (kvsim_engine_t), of a Config, a dict of options or the defaults
    (plus keyword options).

    Advancing (step, run_until, run_next, run) returns the number of events waiting to be read
    by events(). After an error the engine only answers observations (events, load, record,
    report) and close.
    """

    _EVENT_BATCH = 256

    def __init__(self, config=None, **options):
        self._lock = threading.RLock()
        self._free = _lib.kvsim_engine_free
        self._h = None
        self._ids = []
        self._in_callback = 0
        self._callback = None
        self._callback_error = None
        cfg, owned = _as_config(config, options)
        try:
            h = _native.EngineP()
            rc = _lib.kvsim_engine_new(cfg._handle(), byref(h))
            if rc < 0:
                raise cfg._error(rc)
            if not h:
                raise Error(-_errno.ENOMEM, "kvsim_engine_new returned no engine")
            self._h = h
        finally:
            if owned:
                cfg.close()

    # -- plumbing

    def _handle(self):
        if self._in_callback:
            raise Error(-_errno.EBUSY, "an event callback must not call back into its engine")
        h = self._h
        if h is None:
            raise ValueError("kvsim.Engine is closed")
        return h

    def _error(self, rc):
        msg = _text(_lib.kvsim_engine_errmsg(self._h)) if self._h is not None else ""
        return Error(rc, msg or None)

    def _check(self, rc):
        err, self._callback_error = self._callback_error, None
        if rc < 0:
            e = self._error(rc)
            if err is not None:
                raise e from err
            raise e
        if err is not None:
            raise err
        return rc

    # -- requests

    def add(self, id, arrival_ns=0, tokens=None, hash_ids=None, hash_block_size=16,
            input_len=0, max_tokens=16, min_tokens=0, stop_after=0, priority=0):
        """Adds a request (kvsim_request_t): a prompt of token ids, of Mooncake hash ids (one
        per hash_block_size tokens, input_len tokens in all) or of input_len unique tokens."""
        keep = []
        req = _fill_request(_native.Request(), keep, id, arrival_ns, tokens, hash_ids,
                            hash_block_size, input_len, max_tokens, min_tokens, stop_after,
                            priority)
        with self._lock:
            self._check(_lib.kvsim_engine_add(self._handle(), byref(req)))
            self._ids.append(req.id)

    def abort(self, id):
        """Aborts request id: it finishes as "abort" at the engine's clock."""
        id = _int("id", id, 0, _U64)
        with self._lock:
            self._check(_lib.kvsim_engine_abort(self._handle(), id))

    def prompt_hashes(self, id=0, arrival_ns=0, tokens=None, hash_ids=None, hash_block_size=16,
                      input_len=0, max_tokens=16, min_tokens=0, stop_after=0, priority=0):
        """The block hashes this engine gives the full blocks of the request's prompt (what a
        KV-aware router matches against kv_events())."""
        keep = []
        req = _fill_request(_native.Request(), keep, id, arrival_ns, tokens, hash_ids,
                            hash_block_size, input_len, max_tokens, min_tokens, stop_after,
                            priority)
        cap = 64
        with self._lock:
            h = self._handle()
            while True:
                buf = (c_uint64 * cap)()
                n = _lib.kvsim_engine_prompt_hashes(h, byref(req), buf, cap)
                if n < 0:
                    raise self._error(n)
                if n <= cap:
                    return buf[:n]
                cap = n

    # -- advancing

    def step(self):
        """Runs to the end of the next engine step. Returns the number of waiting events."""
        with self._lock:
            return self._check(_lib.kvsim_engine_step(self._handle()))

    def run_until(self, t_ns):
        """Processes everything at or before t_ns; the clock becomes t_ns."""
        t_ns = _int("t_ns", t_ns, _I64_MIN, _I64_MAX)
        with self._lock:
            return self._check(_lib.kvsim_engine_run_until(self._handle(), t_ns))

    def run_next(self):
        """Runs to the next instant anything happens (nothing pending: unchanged)."""
        with self._lock:
            return self._check(_lib.kvsim_engine_run_next(self._handle()))

    def run(self):
        """Runs until nothing is pending (every request added so far has finished)."""
        with self._lock:
            n = 0
            while self.next_time is not None:
                before = (self.now, self.next_time)
                n = self.run_next()
                if (self.now, self.next_time) == before:
                    # run_next must move the clock or consume what was pending.
                    n = self.step()
                    if (self.now, self.next_time) == before:
                        raise Error(EDEADEND, "engine makes no progress at t=%d ns (next event "
                                    "at %d ns)" % before)
            return n

    @property
    def now(self):
        """The engine's clock (virtual ns)."""
        with self._lock:
            return _lib.kvsim_engine_now(self._handle())

    @property
    def next_time(self):
        """The next instant anything happens (virtual ns), None when nothing is pending."""
        with self._lock:
            t = _lib.kvsim_engine_next_time(self._handle())
        return None if t == _native.INT64_MAX else t

    # -- observing

    def events(self, max_events=None):
        """The waiting events, oldest first, as dicts {"t_ns", "id", "kind", "a", "b"} (and
        "reason" for "finished"); they are consumed."""
        out = []
        buf = (_native.Event * self._EVENT_BATCH)()
        with self._lock:
            h = self._handle()
            while max_events is None or len(out) < max_events:
                cap = self._EVENT_BATCH
                if max_events is not None:
                    cap = min(cap, max_events - len(out))
                n = _lib.kvsim_engine_events(h, buf, cap)
                if n > cap:
                    raise Error(-_errno.EPROTO, "kvsim_engine_events moved %d events into a "
                                "buffer of %d" % (n, cap))
                out.extend(_event_dict(buf[i]) for i in range(n))
                if n < cap:
                    break
        return out

    def set_event_callback(self, fn):
        """fn(event_dict) receives each event as it happens instead of the queue (None: queue
        again). fn must not call the engine; an exception it raises is re-raised by the call
        that produced the event (later events are then dropped until that call returns)."""
        with self._lock:
            h = self._handle()
            if fn is None:
                _lib.kvsim_engine_set_event_callback(h, _native.EventFn(), None)  # NULL
                self._callback = None
                return
            if not callable(fn):
                raise TypeError("the event callback must be callable")
            wself = weakref.ref(self)

            def trampoline(ctx, evp):
                self_ = wself()
                if self_ is None or self_._callback_error is not None:
                    return
                self_._in_callback += 1
                try:
                    fn(_event_dict(evp.contents))
                except BaseException as exc:  # never let it unwind through C
                    self_._callback_error = exc
                finally:
                    self_._in_callback -= 1

            cb = _native.EventFn(trampoline)
            _lib.kvsim_engine_set_event_callback(h, cb, None)
            self._callback = cb  # keep it alive as long as the engine holds it

    def load(self):
        """The engine's load (kvsim_load_t) as a dict."""
        out = _native.Load(size=ctypes.sizeof(_native.Load))
        with self._lock:
            rc = _lib.kvsim_engine_load(self._handle(), byref(out))
            if rc < 0:
                raise self._error(rc)
        return _struct_dict(out)

    def kv_events(self):
        """The KV events since the last call ("kv-events" must be on), as dicts {"kind":
        "stored"/"removed"/"cleared", "parent_hash" (None without a parent), "hashes"}."""
        out = []
        errors = []

        def collect(ctx, evp):
            try:
                ev = evp.contents
                kind = ev.kind
                n = ev.num_hashes
                out.append({
                    "kind": KV_EVENT_KINDS[kind] if kind < len(KV_EVENT_KINDS) else kind,
                    "parent_hash": ev.parent_hash if ev.has_parent else None,
                    "hashes": ev.hashes[:n] if n else [],
                })
            except BaseException as exc:  # never let it unwind through C
                errors.append(exc)

        cb = _native.KvEventFn(collect)
        with self._lock:
            rc = _lib.kvsim_engine_kv_events(self._handle(), cb, None)
            if rc < 0:
                raise self._error(rc)
        if errors:
            raise errors[0]
        if rc != len(out):
            raise Error(-_errno.EPROTO, "kvsim_engine_kv_events returned %d for %d events" %
                        (rc, len(out)))
        return out

    def record(self, id):
        """Request id's record as a dict (times in virtual ns, None = has not happened;
        "finish_reason" None while unfinished)."""
        id = _int("id", id, 0, _U64)
        out = _native.Record(size=ctypes.sizeof(_native.Record))
        with self._lock:
            rc = _lib.kvsim_engine_record(self._handle(), id, byref(out))
            if rc < 0:
                raise self._error(rc)
        return _record_dict(out)

    def records(self):
        """The records of every request added through this object, in the order added."""
        with self._lock:
            return [self.record(i) for i in self._ids]

    def report(self):
        """The report of every request added so far (`kvsim replay --report`'s JSON), parsed."""
        with self._lock:
            return json.loads(_take_string(_lib.kvsim_engine_report_json(self._handle()),
                                           "kvsim_engine_report_json"))

    def errmsg(self):
        """The engine's last error message ("" if none)."""
        with self._lock:
            return _text(_lib.kvsim_engine_errmsg(self._handle()))

    # -- lifetime

    def close(self):
        h = getattr(self, "_h", None)
        if h is None:
            return
        if getattr(self, "_in_callback", 0):
            raise Error(-_errno.EBUSY, "an event callback must not close its engine")
        self._h = None
        self._free(h)
        self._callback = None

    def __repr__(self):
        if getattr(self, "_h", None) is None:
            return "<kvsim.Engine (closed)>"
        return "<kvsim.Engine now=%d ns, %d requests>" % (self.now, len(self._ids))


# --- the multi-engine replay -------------------------------------------------------------------


def replay(config_or_dict=None, requests=None, **options):
    """`kvsim replay` with these options: over its trace (or the synthetic workload), or over
    requests, a list of dicts with Engine.add()'s keywords. Returns {"summary": the headline
    figures (kvsim_summary_t), "report": the full JSON report}."""
    cfg, owned = _as_config(config_or_dict, options)
    try:
        summary = _native.Summary(size=ctypes.sizeof(_native.Summary))
        report = c_void_p()
        if requests is None:
            rc = _lib.kvsim_replay(cfg._handle(), byref(summary), byref(report))
        else:
            requests = list(requests)
            keep = []
            reqs = (_native.Request * len(requests))()
            for i, r in enumerate(requests):
                if not hasattr(r, "keys"):
                    raise TypeError("requests[%d] must be a dict, not %s" %
                                    (i, type(r).__name__))
                try:
                    _fill_request(reqs[i], keep, **r)
                except TypeError as exc:
                    raise TypeError("requests[%d]: %s" % (i, exc)) from None
                except Error as exc:
                    raise Error(exc.code, "requests[%d]: %s" % (i, exc.message)) from None
            rc = _lib.kvsim_replay_requests(cfg._handle(), reqs, len(requests), byref(summary),
                                            byref(report))
        if rc < 0:
            if report.value:
                _lib.kvsim_free(report.value)
            raise cfg._error(rc)
        text = _take_string(report.value, "kvsim_replay")
        return {"summary": _struct_dict(summary), "report": json.loads(text)}
    finally:
        if owned:
            cfg.close()
