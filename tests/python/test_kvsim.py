"""Tests of the kvsim Python package, as installed (ctest python_kvsim_unittest).

ctest runs this with PYTHONPATH=<build>/test-prefix/lib/python3/dist-packages after the
install_prefix fixture installed the build there; KVSIM_TEST_PREFIX and KVSIM_TEST_PYTHONPATH
say where, so the tests can check that they exercise the installed package and library. By hand:

    cmake --install BUILD --prefix BUILD/test-prefix
    KVSIM_TEST_PREFIX=BUILD/test-prefix \
    KVSIM_TEST_PYTHONPATH=BUILD/test-prefix/lib/python3/dist-packages \
    PYTHONPATH=BUILD/test-prefix/lib/python3/dist-packages python3 tests/python/test_kvsim.py
"""

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import kvsim

MS = 1_000_000


def _env_path(name):
    v = os.environ.get(name)
    if not v:
        raise unittest.SkipTest(name + " is not set")
    return os.path.realpath(v)


def finished(events):
    return {ev["id"]: ev for ev in events if ev["kind"] == "finished"}


def tokens_of(events, rid):
    return [ev for ev in events if ev["id"] == rid and ev["kind"] == "token"]


class InstalledPackage(unittest.TestCase):
    def test_imports_the_installed_package_and_library(self):
        for name in ("KVSIM_TEST_PREFIX", "KVSIM_TEST_PYTHONPATH"):
            self.assertTrue(os.environ.get(name), name + " must be set (run through ctest)")
        pypath = _env_path("KVSIM_TEST_PYTHONPATH")
        prefix = _env_path("KVSIM_TEST_PREFIX")
        self.assertTrue(os.path.realpath(kvsim.__file__).startswith(pypath + os.sep),
                        kvsim.__file__)
        self.assertNotIn("KVSIM_LIBRARY", os.environ)
        # The library came from the directory recorded at install time, inside the prefix.
        from kvsim import _build_config
        self.assertTrue(os.path.realpath(_build_config.LIBDIR).startswith(prefix + os.sep),
                        _build_config.LIBDIR)
        self.assertEqual(kvsim.LIBRARY_PATH,
                         os.path.join(_build_config.LIBDIR, _build_config.LIBRARY))
        self.assertTrue(os.path.exists(kvsim.LIBRARY_PATH), kvsim.LIBRARY_PATH)

    def test_version(self):
        self.assertEqual(kvsim.version(), "kvsim %d.%d.%d" % kvsim.version_info())
        self.assertEqual(kvsim.BUILT_FOR_VERSION, kvsim.version_info())
        self.assertIn(kvsim.allocator(), ("jemalloc", "libc"))

    def test_strerror(self):
        self.assertIn("dead end", kvsim.strerror(kvsim.EDEADEND))
        self.assertIn("already finished", kvsim.strerror(kvsim.EFINISHED))
        self.assertEqual(kvsim.finish_reason_name(0), "stop")
        self.assertEqual(kvsim.finish_reason_name(3), "rejected")

    def _import_in_subprocess(self, env_update, pythonpath=None):
        env = dict(os.environ)
        env.update(env_update)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        return subprocess.run([sys.executable, "-B", "-c", "import kvsim; print(kvsim.LIBRARY_PATH)"],
                              env=env, capture_output=True, text=True, timeout=60)

    def test_kvsim_library_env_comes_first(self):
        r = self._import_in_subprocess({"KVSIM_LIBRARY": "/nonexistent/libkvsim.so.0"})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("KVSIM_LIBRARY='/nonexistent/libkvsim.so.0'", r.stderr)
        r = self._import_in_subprocess({"KVSIM_LIBRARY": kvsim.LIBRARY_PATH})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), kvsim.LIBRARY_PATH)

    def test_another_major_version_refuses_to_load(self):
        pkg = os.path.dirname(os.path.abspath(kvsim.__file__))
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(pkg, os.path.join(tmp, "kvsim"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            bc = os.path.join(tmp, "kvsim", "_build_config.py")
            with open(bc, encoding="utf-8") as f:
                text = f.read()
            major = kvsim.version_info()[0]
            text = text.replace("VERSION_MAJOR = %d" % major, "VERSION_MAJOR = %d" % (major + 1))
            with open(bc, "w", encoding="utf-8") as f:
                f.write(text)
            r = self._import_in_subprocess({}, pythonpath=tmp)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("another major version", r.stderr)


class ConfigTest(unittest.TestCase):
    def test_bad_value_names_the_option(self):
        with kvsim.Config() as c:
            with self.assertRaises(kvsim.Error) as cm:
                c.set("max-num-seqs", "0")
        self.assertIsInstance(cm.exception, RuntimeError)
        self.assertEqual(cm.exception.code, -errno.EINVAL)
        self.assertIn("max-num-seqs", str(cm.exception))

    def test_unknown_option(self):
        with self.assertRaises(kvsim.Error) as cm:
            kvsim.Config({"no-such-option": 1})
        self.assertEqual(cm.exception.code, -errno.EINVAL)
        self.assertIn("no-such-option", str(cm.exception))

    def test_bad_number_as_int(self):
        with self.assertRaises(kvsim.Error) as cm:
            kvsim.Config(max_num_seqs=0)
        self.assertIn("max", str(cm.exception))

    def test_values_and_to_dict(self):
        with kvsim.Config({"max-num-seqs": 8}, block_size=32, enable_prefix_caching=False,
                          kv_events=True) as c:
            d = c.to_dict()
            self.assertEqual(len(d), 4, d)
            values = sorted(d.values())
            self.assertEqual(values, sorted(["8", "32", "false", "true"]), d)
            # A later setting replaces the earlier one.
            c.set("max-num-seqs", 16)
            d2 = c.to_dict()
            self.assertEqual(len(d2), 4, d2)
            self.assertIn("16", d2.values())
            self.assertNotIn("8", d2.values())
            c2 = c.copy()
            self.assertEqual(c2.to_dict(), d2)
            c2.close()

    def test_float_value(self):
        with kvsim.Config(arrival_speedup=2.5) as c:
            self.assertEqual(list(c.to_dict().values()), ["2.5"])

    def test_closed(self):
        c = kvsim.Config()
        c.close()
        c.close()
        with self.assertRaises(ValueError):
            c.set("max-num-seqs", 4)

    def test_engine_of_bad_options(self):
        with self.assertRaises(kvsim.Error) as cm:
            kvsim.Engine({"num-gpu-blocks": "abc"})
        self.assertIn("num-gpu-blocks", str(cm.exception))


class EngineTest(unittest.TestCase):
    def engine(self, **options):
        e = kvsim.Engine(options)
        self.addCleanup(e.close)
        return e

    def test_runs_to_completion(self):
        e = self.engine(num_gpu_blocks=256)
        e.add(1, input_len=32, max_tokens=5)
        e.add(2, arrival_ns=3 * MS, input_len=20, max_tokens=10, stop_after=3)
        e.add(3, arrival_ns=3 * MS, tokens=list(range(100, 140)), max_tokens=8, stop_after=2,
              min_tokens=4)
        self.assertEqual(e.load()["num_pending"] + e.load()["num_unfinished"], 3)
        e.run()
        self.assertIsNone(e.next_time)
        self.assertGreater(e.now, 0)
        evs = e.events()
        self.assertEqual(e.events(), [])
        times = [ev["t_ns"] for ev in evs]
        self.assertEqual(times, sorted(times), "event times go back")
        fin = finished(evs)
        self.assertEqual(sorted(fin), [1, 2, 3])
        self.assertEqual(len(tokens_of(evs, 1)), 5)
        self.assertEqual((fin[1]["reason"], fin[1]["b"]), ("length", 5))
        self.assertEqual(len(tokens_of(evs, 2)), 3)
        self.assertEqual((fin[2]["reason"], fin[2]["b"]), ("stop", 3))
        self.assertGreaterEqual(len(tokens_of(evs, 3)), 4)  # min_tokens beats stop_after
        for rid in (1, 2, 3):
            mine = [ev for ev in evs if ev["id"] == rid]
            self.assertEqual(mine[0]["kind"], "scheduled")
            self.assertEqual(mine[-1]["kind"], "finished")
            self.assertEqual([ev["a"] for ev in mine if ev["kind"] == "token"],
                             list(range(len(tokens_of(evs, rid)))))
            r = e.record(rid)
            self.assertEqual(r["id"], rid)
            self.assertEqual(r["output_tokens"], len(tokens_of(evs, rid)))
            self.assertEqual(r["finish_reason"], fin[rid]["reason"])
            self.assertGreater(r["first_token_ns"] - r["arrival_ns"], 0, r)  # TTFT > 0
            self.assertLessEqual(r["first_token_ns"], r["last_token_ns"])
            self.assertLessEqual(r["last_token_ns"], r["finish_ns"])
            self.assertEqual(r["first_token_ns"], tokens_of(evs, rid)[0]["t_ns"])
        self.assertEqual(e.record(3)["input_len"], 40)
        self.assertEqual([r["id"] for r in e.records()], [1, 2, 3])
        load = e.load()
        self.assertGreater(load["steps"], 0)
        self.assertEqual(load["num_unfinished"], 0)
        self.assertEqual(load["active_blocks"], 0)
        # Exact values, field by field: the ctypes mirror of kvsim_load_t must match the C one.
        self.assertEqual(load["total_blocks"], 255)  # num_gpu_blocks less the null block
        self.assertEqual(load["free_blocks"], 255)
        self.assertEqual(load["kv_usage"], 0.0)
        self.assertEqual(load["queued_prompt_tokens"], 0)
        self.assertEqual(load["prefix_queries"], 32 + 20 + 40)  # every prompt, first admission
        self.assertEqual(load["steps"], e.report()["timing"]["steps"])
        self.assertEqual(load["preemptions"], 0)
        rep = e.report()
        self.assertIsInstance(rep, dict)

    def test_step_and_run_until(self):
        e = self.engine()
        self.assertIsNone(e.next_time)
        e.add(7, arrival_ns=5 * MS, input_len=16, max_tokens=3)
        self.assertEqual(e.next_time, 5 * MS)
        self.assertEqual(e.record(7)["first_scheduled_ns"], None)
        self.assertIsNone(e.record(7)["finish_reason"])
        e.run_until(2 * MS)
        self.assertEqual(e.now, 2 * MS)
        self.assertEqual(e.events(), [])
        n = e.step()
        self.assertGreater(e.now, 5 * MS)
        self.assertEqual(n, len(e.events()))
        e.run_next()
        while e.next_time is not None:
            e.run_next()
        self.assertEqual(e.record(7)["finish_reason"], "length")
        with self.assertRaises(kvsim.Error) as cm:
            e.run_until(0)  # the clock only moves forward
        self.assertLess(cm.exception.code, 0)

    def test_abort(self):
        e = self.engine()
        e.add(1, input_len=64, max_tokens=1000)
        e.step()
        e.step()
        e.abort(1)
        e.run()  # an abort during a step in flight takes effect at its end
        evs = e.events()
        self.assertEqual(finished(evs)[1]["reason"], "abort")
        self.assertEqual(evs[-1]["kind"], "finished")
        self.assertLess(len(tokens_of(evs, 1)), 1000)
        self.assertEqual(e.record(1)["finish_reason"], "abort")
        with self.assertRaises(kvsim.Error) as cm:
            e.abort(1)
        self.assertEqual(cm.exception.code, kvsim.EFINISHED)
        with self.assertRaises(kvsim.Error) as cm:
            e.abort(99)
        self.assertEqual(cm.exception.code, -errno.ENOENT)
        self.assertIn("99", str(cm.exception))
        self.assertEqual(e.load()["active_blocks"], 0)
        # A request aborted before its arrival never runs.
        e.add(2, arrival_ns=e.now + 10 * MS, input_len=16, max_tokens=4)
        e.abort(2)
        e.run()
        evs = e.events()
        self.assertEqual([ev["kind"] for ev in evs if ev["id"] == 2], ["finished"])
        self.assertEqual(finished(evs)[2]["reason"], "abort")

    def test_add_errors(self):
        e = self.engine()
        e.add(1, input_len=16)
        with self.assertRaises(kvsim.Error) as cm:
            e.add(1, input_len=16)  # the id is taken
        self.assertEqual(cm.exception.code, -errno.EINVAL)
        self.assertTrue(str(cm.exception))
        e.run_until(10 * MS)
        with self.assertRaises(kvsim.Error) as cm:
            e.add(2, arrival_ns=MS, input_len=16)  # before the clock
        self.assertEqual(cm.exception.code, -errno.EINVAL)
        self.assertTrue(str(cm.exception))
        with self.assertRaises(kvsim.Error):
            e.add(3, input_len=16, max_tokens=-1)  # not a uint32: never wrapped around
        with self.assertRaises(kvsim.Error):
            e.add(4, tokens=[1, 2, -3])
        with self.assertRaises(TypeError):
            e.add(5, tokens=[1.5])
        with self.assertRaises(kvsim.Error) as cm:
            e.record(12345)
        self.assertEqual(cm.exception.code, -errno.ENOENT)

    def test_rejected(self):
        e = self.engine(num_gpu_blocks=8, block_size=16)
        e.add(1, input_len=16 * 64, max_tokens=4)  # bigger than the whole KV cache
        e.run()
        self.assertEqual(finished(e.events())[1]["reason"], "rejected")

    def test_prefix_is_cached(self):
        e = self.engine(block_size=16)
        prefix = list(range(1000, 1064))
        e.add(1, tokens=prefix + [1, 2, 3], max_tokens=2)
        e.run()
        self.assertEqual(e.record(1)["cached_tokens"], 0)
        e.events()
        e.add(2, arrival_ns=e.now, tokens=prefix + [7, 8, 9, 10], max_tokens=2)
        e.run()
        r = e.record(2)
        self.assertGreater(r["cached_tokens"], 0)
        self.assertLessEqual(r["cached_tokens"], 64)
        sched = [ev for ev in e.events() if ev["id"] == 2 and ev["kind"] == "scheduled"]
        self.assertEqual(sched[0]["a"], r["cached_tokens"])
        self.assertGreater(e.load()["prefix_hits"], 0)

    def test_kv_events_match_prompt_hashes(self):
        e = self.engine(kv_events=True, block_size=16)
        tokens = list(range(500, 540))  # two full blocks and a partial one
        ph = e.prompt_hashes(tokens=tokens)
        self.assertEqual(len(ph), 2)
        self.assertEqual(ph, e.prompt_hashes(id=9, tokens=tokens))
        self.assertEqual(ph[:1], e.prompt_hashes(tokens=tokens[:16]))
        self.assertNotEqual(ph[1], e.prompt_hashes(tokens=tokens[:16] + [0] * 16)[1])
        e.add(1, tokens=tokens, max_tokens=2)
        e.run()
        kv = e.kv_events()
        stored = [ev for ev in kv if ev["kind"] == "stored"]
        self.assertTrue(stored, kv)
        self.assertIsNone(stored[0]["parent_hash"])
        hashes = [h for ev in stored for h in ev["hashes"]]
        self.assertEqual(hashes[:2], ph)
        for ev in kv:
            for h in ev["hashes"]:
                self.assertTrue(0 <= h < 1 << 64)
        self.assertEqual(e.kv_events(), [])  # consumed

    def test_prompt_hashes_of_hash_ids(self):
        e = self.engine(block_size=16)
        a = e.prompt_hashes(hash_ids=[1, 2, 3], hash_block_size=16)
        b = e.prompt_hashes(hash_ids=[1, 2, 4], hash_block_size=16)
        self.assertEqual(len(a), 3)
        self.assertEqual(a[:2], b[:2])
        self.assertNotEqual(a[2], b[2])
        many = e.prompt_hashes(hash_ids=range(200), hash_block_size=16)  # > the first buffer
        self.assertEqual(len(many), 200)
        self.assertEqual(many[:3], e.prompt_hashes(hash_ids=[0, 1, 2], hash_block_size=16))

    def test_kv_events_need_the_option(self):
        e = self.engine()
        with self.assertRaises(kvsim.Error) as cm:
            e.kv_events()
        self.assertEqual(cm.exception.code, -errno.EINVAL)

    def test_event_callback(self):
        e = self.engine()
        got = []
        e.set_event_callback(got.append)
        e.add(1, input_len=16, max_tokens=3)
        e.run()
        self.assertEqual(e.events(), [])
        self.assertEqual(len([ev for ev in got if ev["kind"] == "token"]), 3)
        self.assertEqual(got[-1]["reason"], "length")
        e.set_event_callback(None)
        e.add(2, arrival_ns=e.now, input_len=16, max_tokens=2)
        e.run()
        self.assertEqual(len(tokens_of(e.events(), 2)), 2)

        def boom(ev):
            raise KeyError("from the callback")

        e.set_event_callback(boom)
        e.add(3, arrival_ns=e.now, input_len=16, max_tokens=2)
        with self.assertRaises(KeyError):
            e.run()

        def reenter(ev):
            e.load()

        e.set_event_callback(reenter)
        e.add(4, arrival_ns=e.now, input_len=16, max_tokens=2)
        with self.assertRaises(kvsim.Error) as cm:
            e.run()
        self.assertEqual(cm.exception.code, -errno.EBUSY)

    def test_closed_engine(self):
        with kvsim.Engine() as e:
            e.add(1, input_len=16)
        with self.assertRaises(ValueError):
            e.step()
        e.close()
        kvsim.Engine().add(1, input_len=16)  # freed by __del__

    def test_engine_of_config_object(self):
        with kvsim.Config(max_num_seqs=1) as c:
            e = kvsim.Engine(c)
        self.addCleanup(e.close)
        for i in range(3):
            e.add(i, input_len=16, max_tokens=4)
        e.run_until(0)
        e.step()
        self.assertLessEqual(e.load()["num_running"], 1)
        e.run()
        self.assertEqual(len(finished(e.events())), 3)


class ReplayTest(unittest.TestCase):
    def test_requests(self):
        reqs = [{"id": i, "arrival_ns": i * 2 * MS, "hash_ids": [1, 2, 10 + i],
                 "hash_block_size": 16, "input_len": 40, "max_tokens": 4} for i in range(6)]
        out = kvsim.replay({"engines": 2, "threads": 1}, requests=reqs)
        s = out["summary"]
        self.assertEqual(s["num_requests"], len(reqs))
        self.assertEqual(s["completed"], len(reqs))
        self.assertEqual(s["output_tokens"], 4 * len(reqs))
        self.assertEqual(s["input_tokens"], 40 * len(reqs))
        self.assertGreater(s["ttft_mean_ms"], 0)
        self.assertIsInstance(out["report"], dict)

    def test_requests_with_options_and_config(self):
        with kvsim.Config(engines=1) as c:
            out = kvsim.replay(c, requests=[{"id": 1, "input_len": 30, "stop_after": 3}],
                               threads=1)
            self.assertEqual(list(c.to_dict().values()), ["1"])  # the options went to a copy
        self.assertEqual(out["summary"]["completed"], 1)
        self.assertEqual(out["summary"]["output_tokens"], 3)

    def test_token_prompts_are_refused(self):
        with self.assertRaises(kvsim.Error) as cm:
            kvsim.replay(requests=[{"id": 1, "tokens": [1, 2, 3]}])
        self.assertEqual(cm.exception.code, -errno.EINVAL)
        with self.assertRaises(TypeError):
            kvsim.replay(requests=[{"id": 1, "input_len": 3, "no_such_key": 1}])

    def test_missing_trace(self):
        with self.assertRaises(kvsim.Error) as cm:
            kvsim.replay({"trace": "/nonexistent"})
        self.assertLess(cm.exception.code, 0)
        self.assertIn("/nonexistent", str(cm.exception))

    def test_synthetic(self):
        out = kvsim.replay(engines=2, synthetic_requests=20, threads=1)
        self.assertEqual(out["summary"]["completed"], 20)

    def test_an_option_that_does_nothing_is_refused(self):
        # max_requests limits a trace; the built-in workload takes synthetic_requests (#34)
        with self.assertRaises(kvsim.Error) as cm:
            kvsim.replay(engines=2, max_requests=20, threads=1)
        self.assertIn("--max-requests does nothing here", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
