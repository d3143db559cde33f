#!/usr/bin/env python3
"""Jepsen-style fault injection for `fak serve --store` (issue 31). Python 3 standard library only.

Starts on loopback: a redis-server (deploy/redis.conf), a TCP fault proxy in front of it, N
`fak serve --store redis://127.0.0.1:PROXY` replicas and one reference `fak serve` without a store.
Workers drive sessions on random replicas; every write is applied first to the reference (version
k+1 of session s is the reference session `s.v(k+1)`), so every reply and every read has an exact
expected value. A seeded schedule injects one fault at a time (redis killed and restarted empty or
with its data, paused, keys evicted, a replica killed, proxy delay/stall/reset, sentinel failover).
At the end everything is healed and every live session is read on every replica.

Exit 0 = no anomaly, 1 = anomalies, 2 = the suite itself could not run.

  python3 tests/fault/fault_suite.py --fak build/fak --seconds 90 --seed 1
  python3 tests/fault/fault_suite.py --fak build/fak --seconds 600 --seeds 1,2,3 --json out.json
  python3 tests/fault/fault_suite.py --fak build/fak --seconds 60 --no-faults     # must be clean
"""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import sys
import threading
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import processes  # noqa: E402
from processes import REGISTRY, Fak, Redis, Sentinel  # noqa: E402
from tcp_proxy import FaultProxy  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAULT_KINDS = ["redis_kill_empty", "redis_kill_keep", "redis_pause", "evict_keys", "replica_kill",
               "proxy_delay", "proxy_stall", "proxy_reset"]
SENTINEL_KINDS = ["redis_pause", "evict_keys", "replica_kill", "failover"]

# Errors that are loud (the client is told): not anomalies on a read.
LOUD_CODES = {"session_lost", "session_conflict", "session_busy", "store_unavailable",
              "store_recovering"}
DESC_FIELDS = ("tokens", "segments", "size", "text")
ABSENT = "absent"

WORDS = ["x", "y", "total", "items", "count", "name", "value", "data", "i", "n", "result", "key"]


def now():
    return time.time()


# ------------------------------------------------------------------------------------------------
# HTTP
# ------------------------------------------------------------------------------------------------
class Resp:
    __slots__ = ("status", "body", "code", "err", "ms")

    def __init__(self, status=None, body=None, code=None, err=None, ms=0):
        self.status, self.body, self.code, self.err, self.ms = status, body, code, err, ms

    @property
    def ok(self):
        return self.status is not None and 200 <= self.status < 300

    def short(self):
        if self.status is None:
            return "ERR(%s)" % self.err
        return "%d%s" % (self.status, (" " + self.code) if self.code else "")


def http_call(port, method, path, body, key, timeout):
    t0 = now()
    if port is None:
        return Resp(err="replica down", ms=0)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": "Bearer " + key}
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        try:
            j = json.loads(raw) if raw else None
        except ValueError:
            j = {"raw": raw[:200].decode(errors="replace")}
        code = None
        if isinstance(j, dict) and isinstance(j.get("error"), dict):
            code = j["error"].get("code")
        return Resp(r.status, j, code, None, int((now() - t0) * 1000))
    except socket.timeout:
        return Resp(err="timeout", ms=int((now() - t0) * 1000))
    except (OSError, http.client.HTTPException) as e:
        return Resp(err=type(e).__name__, ms=int((now() - t0) * 1000))
    finally:
        conn.close()


def same_desc(real, ref):
    return isinstance(real, dict) and all(real.get(f) == ref.get(f) for f in DESC_FIELDS)


def reply_diff(real, ref):
    """Fields of the reference's reply that the real reply does not equal (ids mapped away)."""
    if not isinstance(real, dict):
        return ["<no json>"]
    return [k for k, v in ref.items() if k not in ("id", "cloned_from") and real.get(k) != v]


# ------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------
class Sess:
    def __init__(self, sid, worker):
        self.sid = sid
        self.worker = worker
        self.k = 0
        self.state = "new"  # live | deleted | lost_loud | retired | absent
        self.desc = None  # reference describe of version k
        self.old_tokens = []  # tokens of acknowledged versions before k (stale classification)

    def ref(self, k=None):
        return "%s.v%d" % (self.sid, self.k if k is None else k)


class Run:
    def __init__(self, args, seed):
        self.args = args
        self.seed = seed
        self.rng = random.Random(seed)
        self.t0 = now()
        self.lock = threading.Lock()
        self.history = []
        self.anomalies = []
        self.lost_loudly = []
        self.faults = []
        self.active_fault = None
        self.counts = {"attempted": 0, "acknowledged": 0, "indeterminate": 0, "loud_failures": 0,
                       "reads": 0, "reads_ok": 0, "reads_loud": 0, "ref_errors": 0,
                       "resolved_old": 0, "resolved_new": 0, "unresolved": 0}
        self.per_op = {}
        self.error_codes = {}
        self.stop = threading.Event()
        self.replicas = []
        self.ref_server = None
        self.redis = None
        self.redis_replica = None
        self.sentinels = []
        self.proxy = None
        self.workers = []
        self.final = {}

    def t(self):
        return round(now() - self.t0, 3)

    def log(self, msg):
        if self.args.verbose:
            print("[%8.3f] %s" % (self.t(), msg), flush=True)

    # --- bookkeeping -----------------------------------------------------------------------------
    def record(self, worker, replica, op, sid, summary, resp, outcome):
        e = {"i": None, "t": self.t(), "worker": worker, "replica": replica, "op": op,
             "session": sid, "req": summary, "status": resp.status if resp else None,
             "code": (resp.code or resp.err) if resp else None, "ms": resp.ms if resp else None,
             "outcome": outcome, "fault": self.active_fault}
        with self.lock:
            e["i"] = len(self.history)
            self.history.append(e)
            if outcome in ("indeterminate", "loud", "terminal"):
                c = "%s %s" % (op, resp.short() if resp else "-")
                self.error_codes[c] = self.error_codes.get(c, 0) + 1
            if op not in ("read", "resolve-read", "read-deleted") and not op.startswith("final"):
                st = self.per_op.setdefault(op, {"attempted": 0, "ack": 0, "indeterminate": 0,
                                                 "loud": 0})
                st["attempted"] += 1
                if outcome in ("ack", "wrong_reply"):
                    st["ack"] += 1
                elif outcome == "indeterminate":
                    st["indeterminate"] += 1
                else:
                    st["loud"] += 1
        return e

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def anomaly(self, kind, sess, replica, op, detail):
        a = {"kind": kind, "t": self.t(), "worker": sess.worker, "session": sess.sid,
             "version": sess.k, "replica": replica, "op": op, "detail": detail,
             "fault": self.active_fault}
        with self.lock:
            a["history_index"] = len(self.history) - 1
            self.anomalies.append(a)
        print("[%8.3f] ANOMALY %s session=%s replica=%s op=%s: %s (fault: %s)" %
              (a["t"], kind, sess.sid, replica, op, detail, self.active_fault), flush=True)

    # --- servers ---------------------------------------------------------------------------------
    def keys(self, w):
        return "fault-key-%d" % w

    def ref_call(self, method, path, body, w):
        return http_call(self.ref_server.port, method, path, body, self.keys(w), self.args.http_timeout)

    def real_call(self, ri, method, path, body, w):
        return http_call(self.replicas[ri].port, method, path, body, self.keys(w),
                         self.args.http_timeout)

    def start(self):
        a = self.args
        keys_env = {"FAK_FAULT_KEYS": ",".join(self.keys(w) for w in range(a.workers))}
        conf = os.path.join(REPO, "deploy", "redis.conf")
        if a.sentinel:
            # As deploy/README.md's Sentinel setup: a primary that cannot reach a replica refuses
            # writes (so an old primary that was paused and failed over cannot take any when it
            # resumes: Redis's split brain).
            guard = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"]
            self.redis = Redis(conf, name="redis-primary", extra=guard)
            self.redis_replica = Redis(conf, replicaof=self.redis.port, name="redis-replica",
                                       extra=guard)
            self.sentinels = [Sentinel(self.redis.port, "sentinel%d" % i) for i in range(3)]
            store = "redis-sentinel://" + ",".join("127.0.0.1:%d" % s.port for s in self.sentinels) \
                + "/mymaster"
        else:
            self.redis = Redis(conf)
            self.proxy = FaultProxy("127.0.0.1", self.redis.port)
            store = "redis://127.0.0.1:%d" % self.proxy.port
        self.store_url = store
        model = a.model
        # A private copy: a rebuild of build/fak during the run must not change what restarts run.
        bdir = REGISTRY.tempdir("fak-fault-bin-")
        binary = os.path.join(bdir, "fak")
        shutil.copy2(a.fak, binary)
        self.binary_mtime = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(a.fak)))
        self.ref_server = Fak(binary, "reference", keys_env, store=None, model=model, cwd=REPO)
        self.replicas = [Fak(binary, "replica%d" % i, keys_env, store=store, model=model, cwd=REPO,
                             store_timeout=a.store_timeout) for i in range(a.replicas)]
        for f in [self.ref_server] + self.replicas:
            f.start()
        self.log("started: redis :%d, store %s, replicas %s, reference :%d" %
                 (self.redis.port, store, [r.port for r in self.replicas], self.ref_server.port))

    # --- faults ----------------------------------------------------------------------------------
    def schedule(self):
        kinds = list(SENTINEL_KINDS if self.args.sentinel else FAULT_KINDS)
        if self.args.self_check:
            kinds = ["sabotage", "total_loss"]
        if self.args.faults:
            kinds = [k for k in self.args.faults.split(",") if k]
        plan = list(kinds)
        self.rng.shuffle(plan)
        for _ in range(500):
            plan.append(self.rng.choice(kinds))
        out = []
        for k in plan:
            f = {"kind": k, "hold_s": round(self.rng.uniform(1, 5), 2),
                 "gap_s": round(self.rng.uniform(1, 3), 2)}
            if k == "proxy_delay":
                f["delay_ms"] = self.rng.randint(50, 300)
            if k == "replica_kill":
                f["replica"] = self.rng.randrange(self.args.replicas)
            if k == "evict_keys":
                f["evict_seed"] = self.rng.randrange(1 << 30)
            out.append(f)
        return out, set(kinds)

    def current_primary(self):
        for s in self.sentinels:
            try:
                p = s.master_port()
                if p:
                    return p
            except Exception:
                pass
        return self.redis.port

    def primary_redis(self):
        p = self.current_primary()
        for r in (self.redis, self.redis_replica):
            if r and r.port == p:
                return r
        return self.redis

    def evict(self, seed):
        # What an allkeys-lru policy takes: session records (each written once per change) and
        # the generation key. A tenant's id set (*:l:*) is written by every session change of the
        # tenant, so LRU takes it after its sessions; losing a record *and* its id set at once is
        # the double loss deploy/README.md says a replica that never held the session cannot see
        # (it answers 404), so this fault does not delete them.
        r = self.primary_redis()
        rng = random.Random(seed)
        keys = set()
        for pat in ("*:s:*", "*version*", "*gen*"):
            keys.update(k for k in r.cli("--scan", "--pattern", pat).split("\n") if k)
        keys = sorted(keys)
        victims = [k for k in keys if rng.random() < 0.5]
        for i in range(0, len(victims), 50):
            r.cli("DEL", *victims[i:i + 50])
        fams = {}
        for key in r.cli("--scan").split("\n"):
            if key:
                parts = key.split(":")
                fam = parts[2] if len(parts) > 2 else key
                fams[fam] = fams.get(fam, 0) + 1
        return {"matched": len(keys), "deleted": len(victims), "key_families": fams,
                "sample": victims[:3]}

    def sabotage(self):
        for wk in self.workers:
            for s in wk.live():
                r = self.real_call(0, "POST", "/v1/fak/sessions/%s/append" % s.sid,
                                   {"text": "# sabotage\n"}, wk.w)
                self.record("fault", 0, "sabotage-append", s.sid, "# sabotage", r,
                            "ack" if r.ok else "failed")
                if r.ok:
                    return {"session": s.sid}
        return {"session": None}

    def apply_fault(self, f):
        k = f["kind"]
        info = {}
        if k in ("redis_kill_empty", "redis_kill_keep"):
            self.redis.kill()
        elif k == "redis_pause":
            r = self.primary_redis()
            r.pause()
            f["_paused"] = r
        elif k == "evict_keys":
            info = self.evict(f["evict_seed"])
        elif k == "replica_kill":
            self.replicas[f["replica"]].kill()
        elif k == "proxy_delay":
            self.proxy.set_delay(f["delay_ms"])
        elif k == "proxy_stall":
            self.proxy.set_stall()
        elif k == "proxy_reset":
            self.proxy.set_reset()
        elif k == "total_loss":  # self-check: the store and every replica's memory are gone
            for rep in self.replicas:
                rep.kill()
            self.redis.cli("FLUSHALL")
        elif k == "sabotage":  # self-check: a write the reference never sees
            info = self.sabotage()
        elif k == "failover":
            r = self.primary_redis()
            r.kill()
            f["_killed"] = r
            info = {"killed_port": r.port}
        return info

    def heal_fault(self, f):
        k = f["kind"]
        if k == "redis_kill_empty":
            self.redis.start(empty=True)
        elif k == "redis_kill_keep":
            self.redis.start(empty=False)
        elif k == "redis_pause":
            f.pop("_paused").resume()
        elif k == "replica_kill":
            self.replicas[f["replica"]].start()
        elif k == "total_loss":
            for rep in self.replicas:
                rep.start()
        elif k in ("proxy_delay", "proxy_stall", "proxy_reset"):
            self.proxy.set_pass()
        elif k == "failover":
            r = f.pop("_killed")
            deadline = now() + 20
            while now() < deadline and self.current_primary() == r.port:
                time.sleep(0.2)
            r.replicaof = self.current_primary()
            r.start(empty=True)

    def run_faults(self, schedule, kinds, deadline):
        done_kinds = set()
        hard_deadline = deadline + 90  # every kind must have run once, but the run stays bounded
        for f in schedule:
            if self.stop.is_set():
                break
            t = now()
            if t >= deadline and done_kinds >= kinds:
                break
            if t >= hard_deadline:
                break
            rec = {"kind": f["kind"], "start": self.t()}
            rec.update({k: v for k, v in f.items() if not k.startswith("_") and k != "kind"})
            self.active_fault = f["kind"]
            print("[%8.3f] fault %s %s" % (self.t(), f["kind"],
                                           {k: v for k, v in f.items() if k not in ("kind",)}),
                  flush=True)
            try:
                rec["info"] = self.apply_fault(f)
                time.sleep(f["hold_s"])
            finally:
                try:
                    self.heal_fault(f)
                except Exception as e:
                    rec["heal_error"] = repr(e)
                    print("heal failed: %r" % e, flush=True)
                self.active_fault = None
            rec["healed"] = self.t()
            self.faults.append(rec)
            done_kinds.add(f["kind"])
            time.sleep(f["gap_s"])
            self.check_replicas()
        return done_kinds

    def check_replicas(self):
        """A replica that ended while no fault was killing it crashed: an anomaly (with the end of its
        log, where a crash says why), and it is started again so that the run goes on."""
        for i, rep in enumerate(self.replicas):
            if rep.alive():
                continue
            rc = rep.proc.poll() if rep.proc else None
            a = {"kind": "replica_died", "t": self.t(), "worker": None, "session": None,
                 "version": None, "replica": i, "op": None,
                 "detail": "replica %d ended by itself (%s): %s" % (
                     i, "signal %d" % -rc if rc is not None and rc < 0 else "exit %s" % rc,
                     rep.log_tail(1500)),
                 "fault": self.active_fault}
            with self.lock:
                a["history_index"] = len(self.history) - 1
                self.anomalies.append(a)
            print("[%8.3f] ANOMALY replica_died replica=%d: %s" % (a["t"], i, a["detail"]), flush=True)
            try:
                rep.start()
            except Exception as e:
                print("restart failed: %r" % e, flush=True)

    def heal_all(self):
        if self.proxy:
            self.proxy.set_pass()
        for r in (self.redis, self.redis_replica):
            if r is None:
                continue
            if r.paused:
                r.resume()
            if not r.alive():
                r.start()
        for rep in self.replicas:
            if not rep.alive():
                rep.start()

    # --- main ------------------------------------------------------------------------------------
    def run(self):
        a = self.args
        self.start()
        for w in range(a.workers):
            wk = Worker(self, w, random.Random(self.seed * 1000 + w))
            self.workers.append(wk)
        threads = [threading.Thread(target=wk.loop, name="worker%d" % wk.w, daemon=True)
                   for wk in self.workers]
        for th in threads:
            th.start()
        deadline = now() + a.seconds
        time.sleep(min(3.0, a.seconds / 10))
        kinds_ran = set()
        kinds = set()
        if not a.no_faults:
            schedule, kinds = self.schedule()
            kinds_ran = self.run_faults(schedule, kinds, deadline)
        while now() < deadline:
            time.sleep(0.2)
        self.stop.set()
        self.log("stopping workers")
        for th in threads:
            th.join(timeout=a.http_timeout * 3)
        self.heal_all()
        self.final_check()
        missing = sorted(kinds - kinds_ran)
        return missing

    def final_check(self):
        a = self.args
        self.check_replicas()
        time.sleep(1.0)
        settle = now() + a.settle  # retries on loud errors until then (at least 2 s per read)
        checked = {"sessions": 0, "reads": 0, "deleted_checked": 0}
        for wk in self.workers:
            for s in wk.sessions:
                if s.state == "live":
                    checked["sessions"] += 1
                    for ri in range(len(self.replicas)):
                        checked["reads"] += 1
                        wk.final_read(s, ri, settle)
                elif s.state == "deleted":
                    checked["deleted_checked"] += 1
                    for ri in range(len(self.replicas)):
                        wk.final_read_deleted(s, ri, settle)
        self.final = checked

    def summary(self, missing, wall):
        by_kind = {}
        for an in self.anomalies:
            by_kind[an["kind"]] = by_kind.get(an["kind"], 0) + 1
        sessions_by_kind = {}
        for an in self.anomalies:
            sessions_by_kind.setdefault(an["kind"], set()).add(an["session"])
        anomalies = []
        for an in self.anomalies:
            ex = [h for h in self.history[:an["history_index"] + 1]
                  if h["session"] == an["session"]][-12:]
            an = dict(an)
            an["history"] = ex
            anomalies.append(an)
        return {
            "seed": self.seed, "seconds": self.args.seconds, "wall_s": round(wall, 1),
            "replicas": len(self.replicas), "workers": self.args.workers,
            "store": getattr(self, "store_url", None),
            "no_faults": self.args.no_faults,
            "faults": self.faults, "fault_kinds_missing": missing,
            "counts": self.counts, "per_op": self.per_op, "errors": self.error_codes, "final": self.final,
            "anomaly_counts": by_kind,
            "anomaly_sessions": {k: len(v) for k, v in sessions_by_kind.items()},
            "anomalies": anomalies, "lost_loudly": self.lost_loudly,
            "history_len": len(self.history),
        }


# ------------------------------------------------------------------------------------------------
# A worker: owns its sessions, one op at a time
# ------------------------------------------------------------------------------------------------
class Worker:
    def __init__(self, run, w, rng):
        self.run = run
        self.w = w
        self.rng = rng
        self.sessions = []
        self.n = 0

    def live(self):
        return [s for s in self.sessions if s.state == "live"]

    def new_sid(self):
        self.n += 1
        return "w%d-s%d" % (self.w, self.n)

    def pick_replica(self):
        return self.rng.randrange(len(self.run.replicas))

    def content(self):
        if self.rng.random() < 0.25:
            return {"ids": [self.rng.randrange(40, 400) for _ in range(self.rng.randint(2, 6))]}
        a, b = self.rng.choice(WORDS), self.rng.choice(WORDS)
        forms = ["%s = %s + %d\n" % (a, b, self.rng.randint(0, 99)),
                 "def f_%s(%s):\n" % (a, b),
                 "    return %s * %d\n" % (b, self.rng.randint(2, 9)),
                 "# %s %s\n" % (a, b),
                 "for %s in %s:\n" % (a, b)]
        return {"text": self.rng.choice(forms)}

    def summary(self, body):
        return json.dumps(body, separators=(",", ":"))[:120] if body is not None else ""

    # --- reference helpers -----------------------------------------------------------------------
    def ref_fail(self, what, r):
        self.run.count("ref_errors")
        self.run.record(self.w, "ref", "ref-" + what, None, "", r, "ref_error")
        self.run.log("w%d reference %s failed: %s %s" % (self.w, what, r.short(), r.body))

    def ref_describe(self, name):
        r = self.run.ref_call("GET", "/v1/fak/sessions/" + name, None, self.w)
        return r.body if r.ok else None

    def ref_delete(self, name):
        self.run.ref_call("DELETE", "/v1/fak/sessions/" + name, None, self.w)

    def retire(self, s, state):
        s.state = state
        self.ref_delete(s.ref())

    # --- classification --------------------------------------------------------------------------
    def mismatch_kind(self, s, body):
        toks = body.get("tokens") if isinstance(body, dict) else None
        if toks is not None and any(toks == o for o in s.old_tokens):
            return "stale_read"
        return "wrong_read"

    def resolve(self, s, cands, op, ri_first):
        """A write that was not acknowledged: read until the session is one of `cands`
        [(label, desc-or-ABSENT)]. Returns the label, 'lost', 'lost_loud' or None (unresolved)."""
        run = self.run
        deadline = now() + self.run.args.resolve_timeout
        flagged = False
        ri = ri_first
        while now() < deadline:
            r = run.real_call(ri, "GET", "/v1/fak/sessions/" + s.sid, None, self.w)
            if r.status == 200:
                for label, d in cands:
                    if d is not ABSENT and same_desc(r.body, d):
                        run.record(self.w, ri, "resolve-read", s.sid, op, r, "resolved:%s" % label)
                        return label
                kind = self.mismatch_kind(s, r.body)
                run.record(self.w, ri, "resolve-read", s.sid, op, r, kind)
                if not flagged:
                    run.anomaly(kind, s, ri, "resolve " + op,
                                "after an unacknowledged %s the session is neither version %s: "
                                "size %s, tokens %s..." % (op, [c[0] for c in cands],
                                                          r.body.get("size"),
                                                          str(r.body.get("tokens"))[:80]))
                    flagged = True
            elif r.status == 404 and r.code in (None, "session_not_found"):
                for label, d in cands:
                    if d is ABSENT:
                        run.record(self.w, ri, "resolve-read", s.sid, op, r,
                                   "resolved:%s" % label)
                        return label
                run.record(self.w, ri, "resolve-read", s.sid, op, r, "lost")
                run.anomaly("lost", s, ri, "resolve " + op,
                            "404 for a session whose creation was acknowledged")
                return "lost"
            elif r.status == 409 and r.code == "session_lost":
                run.record(self.w, ri, "resolve-read", s.sid, op, r, "lost_loud")
                return "lost_loud"
            else:
                run.record(self.w, ri, "resolve-read", s.sid, op, r, "loud")
            time.sleep(0.25)
            ri = self.pick_replica()
        return None

    def handle_terminal(self, s, r, ri, op):
        """404 / 409 session_lost on an op over a live session: True when handled."""
        if r.status == 409 and r.code == "session_lost":
            self.run.lost_loudly.append({"t": self.run.t(), "session": s.sid, "op": op,
                                         "replica": ri})
            self.retire(s, "lost_loud")
            self.run.real_call(ri, "DELETE", "/v1/fak/sessions/" + s.sid, None, self.w)
            return True
        if r.status == 404 and r.code in (None, "session_not_found"):
            self.run.anomaly("lost", s, ri, op, "404 %s for a live session (version %d)" %
                             (r.code, s.k))
            self.retire(s, "retired")
            return True
        return False

    # --- ops -------------------------------------------------------------------------------------
    def op_create(self):
        run = self.run
        s = Sess(self.new_sid(), self.w)
        body = self.content()
        rr = run.ref_call("POST", "/v1/fak/sessions", dict(body, id=s.ref(0)), self.w)
        if not rr.ok:
            return self.ref_fail("create", rr)
        desc = self.ref_describe(s.ref(0))
        if desc is None:
            self.ref_delete(s.ref(0))
            return self.ref_fail("describe", rr)
        self.sessions.append(s)
        s.desc = desc
        ri = self.pick_replica()
        run.count("attempted")
        r = run.real_call(ri, "POST", "/v1/fak/sessions", dict(body, id=s.sid), self.w)
        if r.ok:
            s.state = "live"
            run.count("acknowledged")
            diff = reply_diff(r.body, rr.body)
            e = run.record(self.w, ri, "create", s.sid, self.summary(body), r,
                           "wrong_reply" if diff else "ack")
            if diff or r.body.get("id") != s.sid:
                run.anomaly("wrong_reply", s, ri, "create", "fields %s: %s vs reference %s" %
                            (diff, r.body, rr.body))
            return e
        run.count("indeterminate")
        run.record(self.w, ri, "create", s.sid, self.summary(body), r, "indeterminate")
        s.state = "live"
        got = self.resolve(s, [(ABSENT, ABSENT), ("v0", desc)], "create", ri)
        if got == "v0":
            run.count("resolved_new")
        elif got == ABSENT:
            run.count("resolved_old")
            self.retire(s, "absent")
        elif got == "lost_loud":
            self.run.lost_loudly.append({"t": run.t(), "session": s.sid, "op": "create"})
            self.retire(s, "lost_loud")
        else:
            run.count("unresolved")
            self.retire(s, "retired")

    def op_write(self, s, op):
        run = self.run
        k = s.k
        if op == "append":
            path, body = "/append", self.content()
        elif op == "generate":
            path, body = "/generate", {"max_tokens": self.rng.randint(4, 8), "temperature": 0}
        else:
            nseg = len(s.desc.get("segments", []))
            if nseg < 2:
                return self.op_write(s, "append")
            path, body = "/quarantine", {"message": self.rng.randrange(nseg), "mode": "exact"}
        rc = run.ref_call("POST", "/v1/fak/sessions/%s/clone" % s.ref(k), {"id": s.ref(k + 1)},
                          self.w)
        if not rc.ok:
            return self.ref_fail("clone", rc)
        rr = run.ref_call("POST", "/v1/fak/sessions/" + s.ref(k + 1) + path, body, self.w)
        if not rr.ok:
            self.ref_delete(s.ref(k + 1))
            if rr.status == 400:  # an op the session does not allow (context, ids): skip it
                return
            return self.ref_fail(op, rr)
        desc = self.ref_describe(s.ref(k + 1))
        if desc is None:
            self.ref_delete(s.ref(k + 1))
            return self.ref_fail("describe", rr)
        ri = self.pick_replica()
        run.count("attempted")
        r = run.real_call(ri, "POST", "/v1/fak/sessions/" + s.sid + path, body, self.w)
        if r.ok:
            run.count("acknowledged")
            diff = reply_diff(r.body, rr.body)
            run.record(self.w, ri, op, s.sid, self.summary(body), r,
                       "wrong_reply" if diff else "ack")
            if diff:
                run.anomaly("wrong_reply", s, ri, op, "fields %s: got %s, reference %s" %
                            (diff, {f: r.body.get(f) for f in diff},
                             {f: rr.body.get(f) for f in diff}))
            self.advance(s, desc)
            return
        if r.status in (404, 409) and r.code in (None, "session_not_found", "session_lost"):
            run.count("loud_failures")
            run.record(self.w, ri, op, s.sid, self.summary(body), r, "terminal")
            self.ref_delete(s.ref(k + 1))
            self.handle_terminal(s, r, ri, op)
            return
        run.count("indeterminate")
        run.record(self.w, ri, op, s.sid, self.summary(body), r, "indeterminate")
        got = self.resolve(s, [("v%d" % k, s.desc), ("v%d" % (k + 1), desc)], op, ri)
        if got == "v%d" % (k + 1):
            run.count("resolved_new")
            self.advance(s, desc)
        elif got == "v%d" % k:
            run.count("resolved_old")
            self.ref_delete(s.ref(k + 1))
        else:
            self.ref_delete(s.ref(k + 1))
            if got == "lost_loud":
                run.lost_loudly.append({"t": run.t(), "session": s.sid, "op": op})
                self.retire(s, "lost_loud")
            elif got == "lost":
                self.retire(s, "retired")
            else:
                run.count("unresolved")
                self.retire(s, "retired")

    def advance(self, s, desc):
        self.ref_delete(s.ref())
        s.old_tokens.append(s.desc.get("tokens"))
        s.old_tokens = s.old_tokens[-50:]
        s.k += 1
        s.desc = desc

    def op_clone(self, s):
        run = self.run
        n = Sess(self.new_sid(), self.w)
        rc = run.ref_call("POST", "/v1/fak/sessions/%s/clone" % s.ref(), {"id": n.ref(0)}, self.w)
        if not rc.ok:
            return self.ref_fail("clone", rc)
        n.desc = s.desc
        n.old_tokens = []
        self.sessions.append(n)
        ri = self.pick_replica()
        run.count("attempted")
        r = run.real_call(ri, "POST", "/v1/fak/sessions/%s/clone" % s.sid, {"id": n.sid}, self.w)
        if r.ok:
            run.count("acknowledged")
            bad = not isinstance(r.body, dict) or r.body.get("id") != n.sid or \
                r.body.get("cloned_from") != s.sid
            run.record(self.w, ri, "clone", n.sid, "from " + s.sid, r, "wrong_reply" if bad else "ack")
            if bad:
                run.anomaly("wrong_reply", s, ri, "clone", "reply %s" % r.body)
            n.state = "live"
            return
        if r.status in (404, 409) and r.code in (None, "session_not_found", "session_lost"):
            run.count("loud_failures")
            run.record(self.w, ri, "clone", n.sid, "from " + s.sid, r, "terminal")
            self.retire(n, "absent")
            self.handle_terminal(s, r, ri, "clone")
            return
        run.count("indeterminate")
        run.record(self.w, ri, "clone", n.sid, "from " + s.sid, r, "indeterminate")
        n.state = "live"
        got = self.resolve(n, [(ABSENT, ABSENT), ("v0", n.desc)], "clone", ri)
        if got == "v0":
            run.count("resolved_new")
        elif got == ABSENT:
            run.count("resolved_old")
            self.retire(n, "absent")
        else:
            if got is None:
                run.count("unresolved")
            self.retire(n, "lost_loud" if got == "lost_loud" else "retired")

    def op_delete(self, s):
        run = self.run
        ri = self.pick_replica()
        run.count("attempted")
        r = run.real_call(ri, "DELETE", "/v1/fak/sessions/" + s.sid, None, self.w)
        if r.ok:
            run.count("acknowledged")
            run.record(self.w, ri, "delete", s.sid, "", r, "ack")
            self.retire(s, "deleted")
            return
        if r.status in (404, 409) and r.code in (None, "session_not_found", "session_lost"):
            run.count("loud_failures")
            run.record(self.w, ri, "delete", s.sid, "", r, "terminal")
            self.handle_terminal(s, r, ri, "delete")
            return
        run.count("indeterminate")
        run.record(self.w, ri, "delete", s.sid, "", r, "indeterminate")
        got = self.resolve(s, [("v%d" % s.k, s.desc), (ABSENT, ABSENT)], "delete", ri)
        if got == ABSENT:
            run.count("resolved_new")
            self.retire(s, "deleted")
        elif got == "v%d" % s.k:
            run.count("resolved_old")
        else:
            if got is None:
                run.count("unresolved")
            self.retire(s, "lost_loud" if got == "lost_loud" else "retired")

    def check_read(self, s, ri, r, op):
        """One read of a live session: 'ok', 'loud' or the anomaly kind."""
        run = self.run
        if r.status == 200:
            if same_desc(r.body, s.desc):
                run.record(self.w, ri, op, s.sid, "v%d" % s.k, r, "ok")
                return "ok"
            kind = self.mismatch_kind(s, r.body)
            run.record(self.w, ri, op, s.sid, "v%d" % s.k, r, kind)
            run.anomaly(kind, s, ri, op, "read size %s, reference v%d size %s; tokens %s vs %s" %
                        (r.body.get("size") if isinstance(r.body, dict) else None, s.k,
                         s.desc.get("size"),
                         str(r.body.get("tokens") if isinstance(r.body, dict) else r.body)[:60],
                         str(s.desc.get("tokens"))[:60]))
            return kind
        if r.status == 404 and r.code in (None, "session_not_found"):
            run.record(self.w, ri, op, s.sid, "v%d" % s.k, r, "lost")
            run.anomaly("lost", s, ri, op, "404 for a live session (version %d)" % s.k)
            return "lost"
        run.record(self.w, ri, op, s.sid, "v%d" % s.k, r, "loud")
        return "loud"

    def op_read(self, s):
        run = self.run
        ri = self.pick_replica()
        r = run.real_call(ri, "GET", "/v1/fak/sessions/" + s.sid, None, self.w)
        run.count("reads")
        res = self.check_read(s, ri, r, "read")
        if res == "ok":
            run.count("reads_ok")
        elif res == "loud":
            run.count("reads_loud")
            if r.status == 409 and r.code == "session_lost":
                run.lost_loudly.append({"t": run.t(), "session": s.sid, "op": "read"})
                self.retire(s, "lost_loud")
        elif res == "lost":
            self.retire(s, "retired")

    def read_deleted(self, s, ri, op):
        run = self.run
        r = run.real_call(ri, "GET", "/v1/fak/sessions/" + s.sid, None, self.w)
        if r.status == 200:
            run.record(self.w, ri, op, s.sid, "deleted", r, "resurrected")
            run.anomaly("resurrected", s, ri, op, "200 after an acknowledged delete: size %s" %
                        (r.body.get("size") if isinstance(r.body, dict) else None))
            s.state = "resurrected"
            return "bad"
        run.record(self.w, ri, op, s.sid, "deleted", r, "ok" if r.status == 404 else "loud")
        return "ok" if r.status == 404 else "loud"

    def final_read(self, s, ri, settle_until):
        deadline = max(settle_until, now() + 2)
        while True:
            r = self.run.real_call(ri, "GET", "/v1/fak/sessions/" + s.sid, None, self.w)
            loud = r.status not in (200, 404) or (r.status == 404 and r.code not in
                                                  (None, "session_not_found"))
            if loud and now() < deadline:
                time.sleep(0.5)
                continue
            if r.status == 409 and r.code == "session_lost":
                self.run.lost_loudly.append({"t": self.run.t(), "session": s.sid,
                                             "op": "final-read", "replica": ri})
                self.run.record(self.w, ri, "final-read", s.sid, "v%d" % s.k, r, "lost_loud")
                return "lost_loud"
            res = self.check_read(s, ri, r, "final-read")
            if res == "loud":
                self.run.anomaly("unavailable_at_end", s, ri, "final-read",
                                 "still %s after the settling time" % r.short())
            return res

    def final_read_deleted(self, s, ri, settle_until):
        deadline = max(settle_until, now() + 2)
        while True:
            res = self.read_deleted(s, ri, "final-read-deleted")
            if res == "loud" and now() < deadline:
                time.sleep(0.5)
                continue
            return res

    def loop(self):
        run = self.run
        try:
            while not run.stop.is_set():
                live = self.live()
                if len(live) < run.args.sessions_per_worker:
                    self.op_create()
                    continue
                s = self.rng.choice(live)
                x = self.rng.random()
                big = s.desc.get("size", 0) > run.args.max_size
                if big:
                    if self.rng.random() < 0.5 and len(s.desc.get("segments", [])) >= 2:
                        self.op_write(s, "quarantine")
                    else:
                        self.op_delete(s)
                elif x < 0.30:
                    self.op_read(s)
                elif x < 0.50:
                    self.op_write(s, "append")
                elif x < 0.72:
                    self.op_write(s, "generate")
                elif x < 0.82:
                    self.op_write(s, "quarantine")
                elif x < 0.88 and len(live) < run.args.sessions_per_worker + 2:
                    self.op_clone(s)
                elif x < 0.91:
                    self.op_delete(s)
                else:
                    dead = [d for d in self.sessions if d.state == "deleted"]
                    if dead:
                        self.read_deleted(self.rng.choice(dead), self.pick_replica(),
                                          "read-deleted")
                    else:
                        self.op_read(s)
        except Exception:
            traceback.print_exc()
            run.worker_errors = getattr(run, "worker_errors", 0) + 1


# ------------------------------------------------------------------------------------------------
def print_summary(sm):
    print("=" * 78)
    print("seed %s: %s s of workload, wall %.1f s, store %s%s" %
          (sm["seed"], sm["seconds"], sm["wall_s"], sm["store"],
           " (NO FAULTS)" if sm["no_faults"] else ""))
    for f in sm["faults"]:
        extra = {k: v for k, v in f.items() if k not in ("kind", "start", "healed", "hold_s",
                                                         "gap_s")}
        print("  fault %-17s %7.2f -> %7.2f  %s" % (f["kind"], f["start"], f["healed"],
                                                  extra if extra else ""))
    if sm["fault_kinds_missing"]:
        print("  fault kinds that did not run: %s" % sm["fault_kinds_missing"])
    print("  ops: %s" % sm["counts"])
    for op, st in sorted(sm["per_op"].items()):
        print("    %-10s %s" % (op, st))
    print("  not acknowledged / loud, by op and reply: %s" %
          dict(sorted(sm["errors"].items(), key=lambda kv: -kv[1])))
    print("  final check: %s" % sm["final"])
    print("  lost loudly (409 session_lost): %d" % len(sm["lost_loudly"]))
    print("  anomalies: %s (sessions: %s)" % (sm["anomaly_counts"] or "none",
                                              sm["anomaly_sessions"]))
    shown = {}
    for a in sm["anomalies"]:
        if shown.get(a["kind"], 0) >= 2:
            continue
        shown[a["kind"]] = shown.get(a["kind"], 0) + 1
        print("  --- %s at %.3f: session %s replica %s op %s (fault %s)\n      %s" %
              (a["kind"], a["t"], a["session"], a["replica"], a["op"], a["fault"], a["detail"]))
        for h in a["history"]:
            print("      %8.3f w%s r%-4s %-13s %-9s %-24s %s %s" %
                  (h["t"], h["worker"], h["replica"], h["op"], h["session"],
                   (str(h["status"]) + " " + str(h["code"] or ""))[:24], h["outcome"],
                   ("[" + h["fault"] + "]") if h["fault"] else ""))
    print("=" * 78, flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--fak", default=os.path.join(REPO, "build", "fak"))
    p.add_argument("--model", default=None, help="-m for fak serve (default: the bundled model)")
    p.add_argument("--seconds", type=float, default=90)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seeds", default=None, help="comma-separated: one run per seed")
    p.add_argument("--json", default=None)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--sessions-per-worker", type=int, default=3)
    p.add_argument("--max-size", type=int, default=300, help="tokens before a session is shrunk")
    p.add_argument("--store-timeout", type=int, default=250)
    p.add_argument("--http-timeout", type=float, default=30)
    p.add_argument("--resolve-timeout", type=float, default=30)
    p.add_argument("--settle", type=float, default=15)
    p.add_argument("--no-faults", action="store_true")
    p.add_argument("--faults", default=None, help="comma-separated fault kinds (default: all)")
    p.add_argument("--sentinel", action="store_true",
                   help="primary + replica Redis + 3 sentinels; adds the failover fault")
    p.add_argument("--self-check", action="store_true",
                   help="inject faults no store survives (a write the reference never sees; "
                        "FLUSHALL + every replica killed): exit 0 only if the suite reports anomalies")
    p.add_argument("--history", default=None, help="write every op as JSON lines to this file")
    p.add_argument("--keep-going", action="store_true",
                   help="with --seeds: run every seed even after one found anomalies")
    p.add_argument("--keep-logs", default=None, help="copy the servers' logs to this folder")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    if not os.access(args.fak, os.X_OK):
        print("no fak binary at %s" % args.fak, file=sys.stderr)
        return 2

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)  # also when started in the background (SIG_IGN)
    results = []
    status = 0
    for seed in seeds:
        t0 = now()
        run = Run(args, seed)
        missing = []
        try:
            missing = run.run()
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            run.stop.set()
            REGISTRY.kill_all()
            return 130
        except Exception:
            traceback.print_exc()
            run.stop.set()
            REGISTRY.kill_all(args.keep_logs)
            return 2
        finally:
            run.stop.set()
            if run.proxy:
                run.proxy.close()
            REGISTRY.kill_all(args.keep_logs)
        sm = run.summary(missing, now() - t0)
        sm["binary"] = {"path": args.fak, "mtime": getattr(run, "binary_mtime", None)}
        if args.history:
            with open(args.history if len(seeds) == 1 else "%s.%d" % (args.history, seed), "w") as hf:
                for h in run.history:
                    hf.write(json.dumps(h) + "\n")
        sm["worker_errors"] = getattr(run, "worker_errors", 0)
        results.append(sm)
        print_summary(sm)
        if sm["anomalies"]:
            status = 1
        if sm["worker_errors"] or (missing and not args.faults):
            status = max(status, 2) if not sm["anomalies"] else status
        if args.self_check:
            ok = bool(sm["anomaly_counts"])
            print("self-check: %s (the suite %s the injected losses)" %
                  ("PASS" if ok else "FAIL", "reported" if ok else "did NOT report"))
            status = 0 if ok else 1
        if status and not args.keep_going and len(seeds) > 1 and not args.self_check:
            break
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": results, "exit": status}, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
