"""A data plane of Envoy's rate limit quota service, written against `xds-protos` (the Python
stubs the gRPC project generates from Envoy's published API), used by the sidecar tests.

It does what Envoy's `rate_limit_quota` filter does (source/extensions/filters/http/
rate_limit_quota in Envoy): it offers traffic per bucket every 50 ms, enforces the
assignment it holds (none yet: allow all; a blanket rule; a token bucket refilled at
tokens_per_fill per whole-second fill_interval; a requests_per_time_unit assignment is
ignored, as Envoy ignores it), sends a bucket's first usage at once and then every bucket's
usage every --report-ms on one StreamRateLimitQuotas stream to --target, with the domain in
every report and time_elapsed in whole seconds (0 on a bucket's first report), as Envoy
does. It prints one JSON summary of what it saw on stdout.

Buckets are JSON: {"id": {"key": "value", ...}, "rps": offered requests per second}.
"""

import argparse
import json
import queue
import threading
import time

import grpc
from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc
from envoy.type.v3 import ratelimit_strategy_pb2

STEP = 0.05


def enforced(strategy):
    """(kind, refill per second, capacity, identity) Envoy enforces for a strategy, or None
    when it ignores the assignment. Envoy keeps its token bucket when the identity (max
    tokens, tokens per fill, the fill interval's nanoseconds) is unchanged, and builds a
    new, full one otherwise."""
    which = strategy.WhichOneof("strategy")
    if which == "token_bucket":
        tb = strategy.token_bucket
        secs = tb.fill_interval.seconds  # Envoy reads whole seconds
        ident = (tb.max_tokens, tb.tokens_per_fill.value, tb.fill_interval.nanos)
        return "TOKEN_BUCKET", tb.tokens_per_fill.value / secs, tb.max_tokens, ident
    if which == "blanket_rule":
        name = ratelimit_strategy_pb2.RateLimitStrategy.BlanketRule.Name(strategy.blanket_rule)
        return name, None, None, name
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--domain", default="payments")
    p.add_argument("--bucket", action="append", default=[])
    p.add_argument("--report-ms", type=int, default=1000)
    p.add_argument("--until-bucket", type=int, action="append",
                   help="run until these buckets hold a token bucket")
    p.add_argument("--then", type=float, default=0.0, help="seconds to run after --until-bucket")
    p.add_argument("--until-rate", type=float, default=None,
                   help="after --then, run on until the --until-bucket buckets hold a token "
                        "bucket refilled at least this fast (or --deadline)")
    p.add_argument("--seconds", type=float, default=0.0, help="run at least this long")
    p.add_argument("--deadline", type=float, default=30.0)
    args = p.parse_args()

    buckets = [json.loads(b) for b in args.bucket]
    state = [
        {
            "assigned": None,  # (kind, refill per second, capacity) in force
            "strategies": {},
            "ignored": 0,
            "rebuilt": 0,
            "allowed_after": 0,
            # Once --until-bucket is met: rebuilds since, and the tokens the bucket could
            # spend beyond its refill (what it held then plus a full bucket per rebuild).
            "rebuilt_after": 0,
            "headroom_after": None,
            # Once --until-bucket is met: the refill rates assigned since, as
            # [seconds after, rate] (the rate in force then first).
            "rates_after": [],
            "last": None,
            "ttl_ms": None,
            "allowed": 0,
            "denied": 0,
            "unreported": [0, 0],
            "reported_at": None,
            "owed": 0.0,
            "tokens": 0.0,
        }
        for _ in buckets
    ]
    by_key = {tuple(sorted(b["id"].items())): i for i, b in enumerate(buckets)}
    lock = threading.Lock()
    outgoing = queue.Queue()
    summary = {"reports": 0, "responses": 0, "status": "OK", "unknown_buckets": 0}

    def requests():
        while True:
            r = outgoing.get()
            if r is None:
                return
            yield r

    channel = grpc.insecure_channel(args.target)
    stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(channel)
    responses = stub.StreamRateLimitQuotas(requests())

    def read():
        try:
            for resp in responses:
                with lock:
                    summary["responses"] += 1
                    for action in resp.bucket_action:
                        key = tuple(sorted(action.bucket_id.bucket.items()))
                        i = by_key.get(key)
                        if i is None:
                            summary["unknown_buckets"] += 1
                            continue
                        if action.WhichOneof("bucket_action") != "quota_assignment_action":
                            continue
                        qa = action.quota_assignment_action
                        e = enforced(qa.rate_limit_strategy)
                        s = state[i]
                        if e is None:
                            s["ignored"] += 1
                            continue
                        kind, rate, cap, ident = e
                        if kind == "TOKEN_BUCKET" and (s["assigned"] is None or s["assigned"][3] != ident):
                            s["tokens"] = cap  # a new token bucket starts full
                            s["rebuilt"] += 1
                            if s["headroom_after"] is not None:
                                s["rebuilt_after"] += 1
                                s["headroom_after"] += cap
                        s["assigned"] = e
                        s["strategies"][kind] = s["strategies"].get(kind, 0) + 1
                        s["last"] = {"kind": kind, "rate": rate, "max_tokens": cap}
                        if until_met is not None:
                            s["rates_after"].append([time.monotonic() - until_met, rate])
                        s["ttl_ms"] = qa.assignment_time_to_live.ToMilliseconds()
        except grpc.RpcError as e:
            with lock:
                summary["status"] = e.code().name
                summary["details"] = e.details()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def report(now, which):
        """A report of buckets `which`, as Envoy builds it."""
        r = rlqs_pb2.RateLimitQuotaUsageReports(domain=args.domain)
        for i in which:
            s = state[i]
            u = r.bucket_quota_usages.add()
            u.bucket_id.bucket.update(buckets[i]["id"])
            since = 0 if s["reported_at"] is None else int(now - s["reported_at"])
            u.time_elapsed.FromSeconds(since)
            u.num_requests_allowed, u.num_requests_denied = s["unreported"]
            s["unreported"] = [0, 0]
            s["reported_at"] = now
        summary["reports"] += 1
        return r

    start = time.monotonic()
    until_met = None
    last = start
    next_report = start + args.report_ms / 1000.0
    while True:
        time.sleep(STEP)
        now = time.monotonic()
        dt = now - last
        last = now
        with lock:
            new = []
            for i, b in enumerate(buckets):
                s = state[i]
                s["owed"] += b["rps"] * dt
                offered = int(s["owed"])
                s["owed"] -= offered
                kind, rate, cap, _ = s["assigned"] or ("ALLOW_ALL", None, None, None)
                if kind == "DENY_ALL":
                    allowed = 0
                elif kind == "TOKEN_BUCKET":
                    s["tokens"] = min(s["tokens"] + rate * dt, cap)
                    allowed = min(offered, int(s["tokens"]))
                    s["tokens"] -= allowed
                else:
                    allowed = offered
                s["allowed"] += allowed
                s["denied"] += offered - allowed
                if until_met is not None:
                    s["allowed_after"] += allowed
                s["unreported"][0] += allowed
                s["unreported"][1] += offered - allowed
                if s["reported_at"] is None and offered > 0:
                    new.append(i)
            out = []
            if new:
                out.append(report(now, new))
            if now >= next_report:
                next_report += args.report_ms / 1000.0
                out.append(report(now, [i for i, s in enumerate(state) if s["reported_at"]]))
            ended = summary["status"] != "OK"
            if (
                until_met is None
                and args.until_bucket is not None
                and all(state[i]["last"] and state[i]["last"]["kind"] == "TOKEN_BUCKET"
                        for i in args.until_bucket)
            ):
                until_met = now
                for st in state:
                    st["headroom_after"] = st["tokens"]
                    st["rates_after"].append([0.0, st["last"] and st["last"]["rate"]])
        for r in out:
            outgoing.put(r)
        elapsed = now - start
        done = elapsed >= args.seconds and (
            args.until_bucket is None or (until_met is not None and now - until_met >= args.then)
        ) and (
            args.until_rate is None
            or all(state[i]["last"]["rate"] is not None and state[i]["last"]["rate"] >= args.until_rate
                   for i in args.until_bucket)
        )
        if ended or done or elapsed >= args.deadline:
            break
    # The usage not reported yet goes in a last report, as Envoy's next timer would send it.
    with lock:
        if any(s["unreported"] != [0, 0] for s in state):
            outgoing.put(report(time.monotonic(), [i for i, s in enumerate(state) if s["reported_at"]]))
    # Half-closes the stream; the service then ends it, which ends the reader.
    outgoing.put(None)
    reader.join(timeout=10)
    channel.close()
    with lock:
        summary["until_met"] = until_met is not None
        summary["seconds_after"] = 0.0 if until_met is None else last - until_met
        summary["buckets"] = [
            {
                k: s[k]
                for k in (
                    "strategies", "ignored", "rebuilt", "last", "ttl_ms", "allowed", "denied",
                    "allowed_after", "rebuilt_after", "headroom_after", "rates_after",
                )
            }
            for s in state
        ]
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
