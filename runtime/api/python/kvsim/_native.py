"""ctypes declarations of libkvsim's public C API (runtime/kvsim.h, installed as <kvsim/kvsim.h>).

Everything here mirrors the header exactly: the structs with their fields in the header's order
and types, and the argument and result types of every function the package calls. The library
is found, in this order, at:

  1. the path in the environment variable KVSIM_LIBRARY (a file; nothing else is tried if set);
  2. LIBDIR of kvsim/_build_config.py, which `cmake --install` writes with the library's
     installed directory;
  3. ctypes.util.find_library("kvsim"), then the plain soname (the loader's own search,
     LD_LIBRARY_PATH included).

The library's kvsim_version_hex() is checked against the KVSIM_VERSION_* this package was
installed with (or, run from the source tree, those of runtime/kvsim.h): another major version
refuses to load, an older minor version warns.
"""

import ctypes
import ctypes.util
import os
import re
import warnings
from ctypes import (POINTER, CFUNCTYPE, Structure, c_char_p, c_double, c_int, c_int32, c_int64,
                    c_long, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)

SONAME = "libkvsim.so.0"

# --- the structs -------------------------------------------------------------------------------


class Request(Structure):
    """kvsim_request_t"""
    _fields_ = [
        ("size", c_size_t),
        ("id", c_uint64),
        ("arrival_ns", c_int64),
        ("tokens", POINTER(c_uint32)),
        ("num_tokens", c_uint32),
        ("hash_ids", POINTER(c_uint64)),
        ("num_hash_ids", c_uint32),
        ("hash_block_size", c_uint32),
        ("input_len", c_uint32),
        ("max_tokens", c_uint32),
        ("min_tokens", c_uint32),
        ("stop_after", c_uint32),
        ("priority", c_int64),
    ]


class Event(Structure):
    """kvsim_event_t"""
    _fields_ = [
        ("t_ns", c_int64),
        ("id", c_uint64),
        ("kind", c_uint32),
        ("a", c_uint32),
        ("b", c_uint32),
    ]


class Load(Structure):
    """kvsim_load_t"""
    _fields_ = [
        ("size", c_size_t),
        ("now_ns", c_int64),
        ("num_running", c_uint32),
        ("num_waiting", c_uint32),
        ("num_pending", c_uint32),
        ("num_unfinished", c_uint32),
        ("total_blocks", c_uint32),
        ("free_blocks", c_uint32),
        ("active_blocks", c_uint32),
        ("kv_usage", c_double),
        ("queued_prompt_tokens", c_uint64),
        ("steps", c_uint64),
        ("preemptions", c_uint64),
        ("prefix_queries", c_uint64),
        ("prefix_hits", c_uint64),
    ]


class KvEvent(Structure):
    """kvsim_kv_event_t"""
    _fields_ = [
        ("kind", c_uint32),
        ("has_parent", c_uint32),
        ("parent_hash", c_uint64),
        ("num_hashes", c_uint32),
        ("hashes", POINTER(c_uint64)),
    ]


class Record(Structure):
    """kvsim_record_t"""
    _fields_ = [
        ("size", c_size_t),
        ("id", c_uint64),
        ("arrival_ns", c_int64),
        ("first_scheduled_ns", c_int64),
        ("first_token_ns", c_int64),
        ("last_token_ns", c_int64),
        ("finish_ns", c_int64),
        ("input_len", c_uint32),
        ("output_tokens", c_uint32),
        ("cached_tokens", c_uint32),
        ("preemptions", c_uint32),
        ("finish_reason", c_int32),
    ]


class Summary(Structure):
    """kvsim_summary_t"""
    _fields_ = [("size", c_size_t)] + [
        (n, c_uint64) for n in ("num_requests", "completed", "rejected", "incomplete", "aborted",
                                "preemptions", "input_tokens", "output_tokens", "cached_tokens")
    ] + [
        (n, c_double) for n in ("prefix_cache_reuse", "duration_s", "requests_per_s",
                                "output_tokens_per_s", "ttft_mean_ms", "ttft_p50_ms",
                                "ttft_p99_ms", "tpot_mean_ms", "tpot_p50_ms", "tpot_p99_ms",
                                "itl_p50_ms", "itl_p99_ms", "e2e_mean_ms", "e2e_p50_ms",
                                "e2e_p99_ms", "token_gap_p50_ms", "token_gap_p99_ms")
    ]


class _ConfigT(Structure):
    """kvsim_config_t (opaque)"""
    _fields_ = []


class _EngineT(Structure):
    """kvsim_engine_t (opaque)"""
    _fields_ = []


ConfigP = POINTER(_ConfigT)
EngineP = POINTER(_EngineT)
EventFn = CFUNCTYPE(None, c_void_p, POINTER(Event))
KvEventFn = CFUNCTYPE(None, c_void_p, POINTER(KvEvent))

INT64_MAX = (1 << 63) - 1

# name: (restype, argtypes). Strings the caller must kvsim_free are c_void_p, never c_char_p
# (ctypes would copy and lose the pointer).
_PROTOTYPES = {
    "kvsim_version": (c_char_p, []),
    "kvsim_version_hex": (c_uint, []),
    "kvsim_allocator": (c_char_p, []),
    "kvsim_strerror": (c_char_p, [c_int]),
    "kvsim_free": (None, [c_void_p]),
    "kvsim_config_new": (c_int, [POINTER(ConfigP)]),
    "kvsim_config_free": (None, [ConfigP]),
    "kvsim_config_set": (c_int, [ConfigP, c_char_p, c_char_p]),
    "kvsim_config_set_json": (c_int, [ConfigP, c_char_p]),
    "kvsim_config_error": (c_char_p, [ConfigP]),
    "kvsim_config_json": (c_void_p, [ConfigP]),
    "kvsim_engine_new": (c_int, [ConfigP, POINTER(EngineP)]),
    "kvsim_engine_free": (None, [EngineP]),
    "kvsim_engine_add": (c_int, [EngineP, POINTER(Request)]),
    "kvsim_engine_abort": (c_int, [EngineP, c_uint64]),
    "kvsim_finish_reason_name": (c_char_p, [c_int]),
    "kvsim_engine_run_until": (c_int, [EngineP, c_int64]),
    "kvsim_engine_step": (c_int, [EngineP]),
    "kvsim_engine_run_next": (c_int, [EngineP]),
    "kvsim_engine_now": (c_int64, [EngineP]),
    "kvsim_engine_next_time": (c_int64, [EngineP]),
    "kvsim_engine_events": (c_size_t, [EngineP, POINTER(Event), c_size_t]),
    "kvsim_engine_set_event_callback": (None, [EngineP, EventFn, c_void_p]),
    "kvsim_engine_load": (c_int, [EngineP, POINTER(Load)]),
    "kvsim_engine_kv_events": (c_long, [EngineP, KvEventFn, c_void_p]),
    "kvsim_engine_prompt_hashes": (c_long, [EngineP, POINTER(Request), POINTER(c_uint64),
                                            c_size_t]),
    "kvsim_engine_record": (c_int, [EngineP, c_uint64, POINTER(Record)]),
    "kvsim_engine_report_json": (c_void_p, [EngineP]),
    "kvsim_engine_errmsg": (c_char_p, [EngineP]),
    "kvsim_replay": (c_int, [ConfigP, POINTER(Summary), POINTER(c_void_p)]),
    "kvsim_replay_requests": (c_int, [ConfigP, POINTER(Request), c_size_t, POINTER(Summary),
                                      POINTER(c_void_p)]),
}

# --- finding and loading the library -----------------------------------------------------------


def _build_config():
    try:
        from . import _build_config as bc  # written by `cmake --install`
    except ImportError:
        return None
    return bc


def _source_tree_version():
    """KVSIM_VERSION_* of runtime/kvsim.h when the package runs from the source tree."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                          os.pardir, "kvsim.h")
    try:
        with open(header, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    parts = []
    for p in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define KVSIM_VERSION_%s (\d+)" % p, text, re.M)
        if not m:
            return None
        parts.append(int(m.group(1)))
    return tuple(parts)


def _load():
    tried = []
    env = os.environ.get("KVSIM_LIBRARY")
    if env:
        try:
            return ctypes.CDLL(env), env
        except OSError as exc:
            raise ImportError("kvsim: cannot load KVSIM_LIBRARY=%r: %s" % (env, exc)) from None
    bc = _build_config()
    candidates = []
    if bc is not None and getattr(bc, "LIBDIR", ""):
        candidates.append(os.path.join(bc.LIBDIR, getattr(bc, "LIBRARY", SONAME)))
    found = ctypes.util.find_library("kvsim")
    if found:
        candidates.append(found)
    candidates.append(SONAME)
    for path in candidates:
        try:
            return ctypes.CDLL(path), path
        except OSError as exc:
            tried.append("%s (%s)" % (path, exc))
    raise ImportError("kvsim: cannot find libkvsim (set KVSIM_LIBRARY to its path); tried: " +
                      "; ".join(tried))


def _declare(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            raise ImportError("kvsim: the library %s has no function %s (an older libkvsim?)" %
                              (lib._name, name)) from None
        f.restype = restype
        f.argtypes = argtypes


def _expected_version():
    bc = _build_config()
    if bc is not None and hasattr(bc, "VERSION_MAJOR"):
        return (bc.VERSION_MAJOR, bc.VERSION_MINOR, bc.VERSION_PATCH)
    return _source_tree_version()


def _check_version(lib, path):
    hexv = lib.kvsim_version_hex()
    have = ((hexv >> 16) & 0xff, (hexv >> 8) & 0xff, hexv & 0xff)
    want = _expected_version()
    if want is None:
        return have, None
    if have[0] != want[0]:
        raise ImportError("kvsim: the library %s is version %d.%d.%d, this package was built for "
                          "%d.%d.%d (another major version)" % ((path,) + have + want))
    if have[:2] < want[:2]:
        warnings.warn("kvsim: the library %s is version %d.%d.%d, older than the %d.%d.%d this "
                      "package was built for" % ((path,) + have + want), RuntimeWarning,
                      stacklevel=3)
    return have, want


def _check_abi():
    # The header's layout on LP64 (x86-64, aarch64): a mismatch here is a bug in this file.
    if ctypes.sizeof(c_size_t) == 8:
        expect = {Request: 80, Event: 32, Load: 96, KvEvent: 32, Record: 80, Summary: 216}
        for cls, size in expect.items():
            if ctypes.sizeof(cls) != size:
                raise ImportError("kvsim: internal error: sizeof(%s) is %d, not %d" %
                                  (cls.__doc__, ctypes.sizeof(cls), size))


_check_abi()
lib, LIBRARY_PATH = _load()
_declare(lib)
LIBRARY_VERSION, BUILT_FOR_VERSION = _check_version(lib, LIBRARY_PATH)
