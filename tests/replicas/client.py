#!/usr/bin/env python3
"""Load for tests/replicas/run.sh: mixed requests through the balancer while one replica is stopped.

Sends --requests requests (completions and chat completions, streamed and not; some in conversations that carry
an X-Session-Id header and go turn by turn) with --concurrency at a time. Once --stop-after requests have
finished it sends --stop-signal to --stop-pid (the replica HAProxy calls --stop-name). Then it checks:

  TERM (a graceful drain): every request succeeds (none refused, none cut: the replica's /health turns 503 so
    the balancer stops sending, what still arrives during --drain is served, running generations finish, and
    the balancer retries what was refused), and nothing sent after the drain is answered by that replica;
  KILL (a crash): requests that were running on the replica may fail (they had started: the balancer does not
    replay them); every request sent after the process was gone succeeds;

and in both: every successful stream is complete (its finish_reason chunk, the usage chunk with as many tokens
as asked for, then `data: [DONE]`), every answer has as many tokens as asked for (a generation cut by the end
of --shutdown-grace would have fewer), both replicas answered before the signal, and the requests of one
session stay on one replica while it is up (they move once at most, off the stopped replica, with a request
answered after the signal). Prints a summary; exits 1 on any violation.
Python 3 standard library only.
"""
import argparse
import http.client
import json
import os
import random
import signal
import sys
import threading
import time
from urllib.parse import urlsplit

KINDS = ["completion", "completion-stream", "chat", "chat-stream"]
MAX_TOKENS = [32, 96, 192, 320, 480]  # with the prompts, within a slot's context (-c 4096 -np 2)


# True once the process is gone with all its threads (its sockets closed): reaped, or a zombie whose other
# threads have exited (a thread group's leader shows Z while the other threads still hold the descriptors).
def process_gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state == "Z" and os.listdir(f"/proc/{pid}/task") == [str(pid)]
    except OSError:
        return True


class Load:
    def __init__(self, args):
        self.a = args
        u = urlsplit(args.lb)
        self.host, self.port = u.hostname, u.port
        self.lock = threading.Lock()
        self.done = 0
        self.results = []
        self.t0 = time.monotonic()
        self.t_stop = None
        self.t_dead = None  # KILL: when the process was gone

    def now(self):
        return time.monotonic() - self.t0

    # One request; returns its record. Never raises.
    def request(self, kind, max_tokens, n, session=None, history=None):
        stream = kind.endswith("-stream")
        if kind.startswith("chat"):
            path = "/v1/chat/completions"
            body = {"messages": (history or []) + [{"role": "user", "content": f"Tell me story number {n}."}]}
        else:
            path = "/v1/completions"
            body = {"prompt": f"Once upon a time, story {n}:"}
        body.update({"max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.8, "seed": n, "stream": stream})
        if stream:
            body["stream_options"] = {"include_usage": True}
        headers = {"Content-Type": "application/json"}
        if session:
            headers["X-Session-Id"] = session
        rec = {"n": n, "kind": kind, "session": session, "max_tokens": max_tokens, "start": self.now(),
               "status": None, "replica": None, "ok": False, "error": None, "started": False, "text": ""}
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.a.timeout)
        try:
            conn.request("POST", path, json.dumps(body), headers)
            res = conn.getresponse()
            rec["status"] = res.status
            rec["replica"] = res.getheader("X-Replica")
            if res.status != 200:
                rec["error"] = f"HTTP {res.status}: {res.read()[:200]!r}"
                return rec
            rec["started"] = True  # a replica answered 200: its generation started
            if stream:
                self.read_stream(res, rec)
            else:
                self.read_whole(res, rec, kind)
        except Exception as e:  # connection refused or reset, timeout, a cut stream: all failures
            rec["error"] = f"{type(e).__name__}: {e}"
        finally:
            conn.close()
            rec["end"] = self.now()
        return rec

    def read_whole(self, res, rec, kind):
        j = json.loads(res.read())
        ch = j["choices"][0]
        rec["text"] = ch["message"]["content"] if kind == "chat" else ch["text"]
        got = j["usage"]["completion_tokens"]
        if ch.get("finish_reason") != "length" or got != rec["max_tokens"]:
            rec["error"] = (f"incomplete answer: finish_reason {ch.get('finish_reason')}, "
                            f"{got} tokens of {rec['max_tokens']}")
            return
        rec["ok"] = True

    def read_stream(self, res, rec):
        events = []
        while True:
            line = res.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if line.startswith("data: "):
                events.append(line[6:])
        if not events or events[-1] != "[DONE]":
            rec["error"] = f"stream without [DONE] ({len(events)} events)"
            return
        chunks = [json.loads(e) for e in events[:-1]]
        finish = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
        finish = [f for f in finish if f]
        usage = [c["usage"] for c in chunks if c.get("usage")]
        for c in chunks:
            for ch in c.get("choices", []):
                rec["text"] += (ch.get("delta", {}).get("content") or "") if "delta" in ch else (ch.get("text") or "")
        got = usage[-1]["completion_tokens"] if usage else None
        if finish != ["length"] or got != rec["max_tokens"]:
            rec["error"] = f"incomplete stream: finish_reason {finish}, {got} tokens of {rec['max_tokens']}"
            return
        rec["ok"] = True

    def finished(self, rec):
        with self.lock:
            self.results.append(rec)
            self.done += 1
            stop = self.done == self.a.stop_after and self.a.stop_pid
            count = self.done
        if stop:
            self.t_stop = self.now()
            os.kill(self.a.stop_pid, getattr(signal, "SIG" + self.a.stop_signal))
            while self.a.stop_signal == "KILL" and not process_gone(self.a.stop_pid):
                time.sleep(0.001)
            self.t_dead = self.now()
            print(f"[{self.t_stop:6.2f}s] SIG{self.a.stop_signal} to {self.a.stop_name} (pid {self.a.stop_pid}) "
                  f"after {count} answers", flush=True)

    # Runs the requests `concurrency` at a time. A conversation's next turn is queued when its previous turn
    # has finished, at a random place among the next 2 x concurrency requests: other requests come between the
    # turns, so that without affinity leastconn would send them to either replica.
    def run(self, ready, rng):
        cv = threading.Condition()
        left = sum(len(t) for t in ready)
        histories = {}

        def worker():
            nonlocal left
            while True:
                with cv:
                    while not ready and left > 0:
                        cv.wait()
                    if not ready:
                        return
                    turns = ready.pop(0)
                kind, mt, n, session = turns[0]
                history = histories.get(session, [])
                rec = self.request(kind, mt, n, session, history)
                self.finished(rec)
                with cv:
                    if session:
                        histories[session] = history + [
                            {"role": "user", "content": f"Tell me story number {n}."},
                            {"role": "assistant", "content": rec["text"][:100]}]
                    if len(turns) > 1:
                        ready.insert(rng.randrange(min(len(ready), 2 * self.a.concurrency) + 1), turns[1:])
                    left -= 1
                    cv.notify_all()

        threads = [threading.Thread(target=worker) for _ in range(self.a.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


# `client.py wait URL [NAME]`: polls GET URL until it answers 200 (from the replica HAProxy calls NAME, when given).
def wait(url, name=None, seconds=30):
    u = urlsplit(url)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=2)
        try:
            conn.request("GET", u.path or "/")
            res = conn.getresponse()
            res.read()
            if res.status == 200 and (name is None or res.getheader("X-Replica") == name):
                return 0
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.1)
    print(f"{url} did not answer 200" + (f" from {name}" if name else "") + f" within {seconds} s")
    return 1


def main():
    if sys.argv[1:2] == ["wait"]:
        sys.exit(wait(*sys.argv[2:4]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--lb", required=True, help="the balancer's base URL")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=16, help="conversations (X-Session-Id) among the requests")
    ap.add_argument("--turns", type=int, default=5, help="requests per conversation")
    ap.add_argument("--stop-after", type=int, default=60, help="answers before the signal")
    ap.add_argument("--stop-pid", type=int, default=0)
    ap.add_argument("--stop-name", default="r1", help="the stopped replica's server name in HAProxy")
    ap.add_argument("--stop-signal", choices=["TERM", "KILL"], default="TERM")
    ap.add_argument("--drain", type=float, default=0, help="the replicas' --shutdown-drain")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--label", default="")
    a = ap.parse_args()

    rng = random.Random(a.seed)
    L = Load(a)
    ready = []  # each entry: the requests of a conversation still to send, in order (one for a single request)
    n = a.seed * 100000
    for s in range(a.sessions):
        ready.append([(("chat", "chat-stream")[rng.randrange(2)], rng.choice(MAX_TOKENS), n + i, f"conv-{a.seed}-{s}")
                      for i in range(a.turns)])
        n += a.turns
    for _ in range(a.requests - a.sessions * a.turns):
        ready.append([(KINDS[rng.randrange(4)], rng.choice(MAX_TOKENS), n, None)])
        n += 1
    rng.shuffle(ready)
    L.run(ready, rng)
    duration = L.now()
    sys.exit(check(a, L.results, L.t_stop, L.t_dead, duration))


def check(a, results, t_stop, t_dead, duration):
    problems = []
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    streams = [r for r in results if r["kind"].endswith("-stream")]
    streams_ok = [r for r in streams if r["ok"]]
    by_replica = {}
    for r in ok:
        by_replica[r["replica"]] = by_replica.get(r["replica"], 0) + 1
    stopped = a.stop_name
    if a.stop_pid and t_stop is None:
        problems.append(f"the signal was never sent (fewer than {a.stop_after} answers)")
    t_stop = t_stop if t_stop is not None else float("inf")
    t_dead = t_dead if t_dead is not None else t_stop
    # requests running when the signal went out (sent before the process was gone, answered after the signal)
    in_flight = [r for r in results if r["start"] < t_dead and t_stop < r["end"]]
    drained = [r for r in in_flight if r["ok"] and r["replica"] == stopped]
    if a.stop_signal == "TERM":
        for r in failed:
            what = "started, then cut" if r["started"] else "never started"
            problems.append(f"request {r['n']} ({r['kind']}, {what}, at {r['start']:.2f}s): {r['error']}")
        late = [r for r in ok if r["replica"] == stopped and r["start"] > t_stop + a.drain + 0.5]
        for r in late:
            problems.append(f"request {r['n']} sent {r['start'] - t_stop:.2f}s after SIGTERM (drain {a.drain}s) "
                            f"was answered by {stopped}")
        if a.stop_pid and not drained:
            problems.append(f"no request was running on {stopped} at SIGTERM: the drain was not exercised")
    else:
        for r in failed:
            if r["started"] and r["replica"] != stopped:
                problems.append(f"request {r['n']} ({r['kind']}) failed on {r['replica']}: {r['error']}")
            elif not (r["start"] < t_dead and t_stop < r["end"]):
                problems.append(f"request {r['n']} ({r['kind']}, at {r['start']:.2f}s, not running at the kill) "
                                f"failed: {r['error']}")
    for need in ("r1", "r2"):
        if not any(r["replica"] == need and r["end"] < t_stop for r in ok):
            problems.append(f"no request was answered by {need} before the signal (balancing)")
    # affinity: per session, answers in order of sending; one move at most, off the stopped replica, with a request
    # answered after the signal (refused there while draining, or sent after)
    sessions = {}
    for r in sorted(ok, key=lambda r: r["start"]):
        if r["session"]:
            sessions.setdefault(r["session"], []).append(r)
    moved = 0
    for s, rs in sessions.items():
        seq = [r["replica"] for r in rs]
        changes = [i for i in range(1, len(seq)) if seq[i] != seq[i - 1]]
        if not changes:
            continue
        i = changes[0]
        if len(changes) > 1 or seq[i - 1] != stopped or rs[i]["end"] < t_stop:  # moved before the signal
            problems.append(f"session {s} moved between replicas: {seq} (signal at {t_stop:.2f}s, sent at "
                            f"{[round(r['start'], 2) for r in rs]})")
        else:
            moved += 1
    # started: a replica answered 200 (for KILL also: running there when it died, whatever the balancer made of it)
    failed_started = [r for r in failed if r["started"] or (a.stop_signal == "KILL" and r in in_flight)]
    print(f"{a.label}: {len(results)} requests in {duration:.1f}s; answered by "
          f"{', '.join(f'{k}: {v}' for k, v in sorted(by_replica.items(), key=lambda kv: str(kv[0])))}; "
          f"failures {len(failed)} (started: {len(failed_started)}, "
          f"never started: {len(failed) - len(failed_started)}); "
          f"streams complete {len(streams_ok)}/{len(streams)}; "
          f"running at the signal {len(in_flight)}, of them finished on {stopped} {len(drained)}; "
          f"sessions {len(sessions)}, moved off {stopped} {moved}")
    for p in problems[:20]:
        print("FAIL: " + p)
    if len(problems) > 20:
        print(f"FAIL: ... and {len(problems) - 20} more")
    return 1 if problems else 0


if __name__ == "__main__":
    main()
