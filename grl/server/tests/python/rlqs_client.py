"""A data plane of Envoy's rate limit quota service, written against `xds-protos` (the Python
stubs the gRPC project generates from Envoy's published API), used by the sidecar tests.

It does what Envoy's `rate_limit_quota` filter does: it offers traffic per bucket, enforces
the assignment it holds (none yet: allow all), and reports its usage per bucket every
--report-ms on one StreamRateLimitQuotas stream to --target. It prints one JSON summary of
what it saw on stdout.

Buckets are JSON: {"id": {"key": "value", ...}, "rps": offered requests per second}.
"""

import argparse
import json
import queue
import threading
import time

import grpc
from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc
from envoy.type.v3 import ratelimit_strategy_pb2, ratelimit_unit_pb2

SECONDS_PER_UNIT = {
    ratelimit_unit_pb2.SECOND: 1.0,
    ratelimit_unit_pb2.MINUTE: 60.0,
    ratelimit_unit_pb2.HOUR: 3600.0,
}


def per_second(strategy):
    """(kind, rate per second or None) of an assignment's strategy."""
    which = strategy.WhichOneof("strategy")
    if which == "requests_per_time_unit":
        r = strategy.requests_per_time_unit
        return "REQUESTS_PER_TIME_UNIT", r.requests_per_time_unit / SECONDS_PER_UNIT[r.time_unit]
    if which == "blanket_rule":
        name = ratelimit_strategy_pb2.RateLimitStrategy.BlanketRule.Name(strategy.blanket_rule)
        return name, None
    return "UNSET", None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--domain", default="payments")
    p.add_argument("--bucket", action="append", default=[])
    p.add_argument("--report-ms", type=int, default=200)
    p.add_argument("--until-bucket", type=int, help="run until this bucket gets a rate")
    p.add_argument("--then", type=float, default=0.0, help="seconds to run after --until-bucket")
    p.add_argument("--seconds", type=float, default=0.0, help="run at least this long")
    p.add_argument("--deadline", type=float, default=30.0)
    args = p.parse_args()

    buckets = [json.loads(b) for b in args.bucket]
    state = [
        {
            "assigned": None,  # (kind, rate per second) of the assignment in force
            "strategies": {},
            "last": None,
            "ttl_ms": None,
            "allowed": 0,
            "denied": 0,
            "owed": 0.0,
            "credit": 0.0,
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
                        kind, rate = per_second(qa.rate_limit_strategy)
                        s = state[i]
                        s["assigned"] = (kind, rate)
                        s["strategies"][kind] = s["strategies"].get(kind, 0) + 1
                        s["last"] = {"kind": kind, "rate": rate}
                        s["ttl_ms"] = qa.assignment_time_to_live.ToMilliseconds()
        except grpc.RpcError as e:
            with lock:
                summary["status"] = e.code().name
                summary["details"] = e.details()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    start = time.monotonic()
    until_met = None
    last = start
    first = True
    while True:
        time.sleep(args.report_ms / 1000.0)
        now = time.monotonic()
        dt = now - last
        last = now
        report = rlqs_pb2.RateLimitQuotaUsageReports(domain=args.domain if first else "")
        first = False
        with lock:
            for i, b in enumerate(buckets):
                s = state[i]
                s["owed"] += b["rps"] * dt
                offered = int(s["owed"])
                s["owed"] -= offered
                kind, rate = s["assigned"] or ("ALLOW_ALL", None)
                if kind == "DENY_ALL":
                    allowed = 0
                elif rate is None:
                    allowed = offered
                else:
                    # A token bucket of `rate` per second, as Envoy's filter keeps.
                    s["credit"] = min(s["credit"] + rate * dt, max(rate, 1.0))
                    allowed = min(offered, int(s["credit"]))
                    s["credit"] -= allowed
                denied = offered - allowed
                s["allowed"] += allowed
                s["denied"] += denied
                u = report.bucket_quota_usages.add()
                u.bucket_id.bucket.update(b["id"])
                u.time_elapsed.FromMilliseconds(int(dt * 1000))
                u.num_requests_allowed = allowed
                u.num_requests_denied = denied
            summary["reports"] += 1
            ended = summary["status"] != "OK"
            if (
                until_met is None
                and args.until_bucket is not None
                and state[args.until_bucket]["last"]
                and state[args.until_bucket]["last"]["kind"] == "REQUESTS_PER_TIME_UNIT"
            ):
                until_met = now
        outgoing.put(report)
        elapsed = now - start
        done = elapsed >= args.seconds and (
            args.until_bucket is None or (until_met is not None and now - until_met >= args.then)
        )
        if ended or done or elapsed >= args.deadline:
            break
    # Half-closes the stream; the service then ends it, which ends the reader.
    outgoing.put(None)
    reader.join(timeout=10)
    channel.close()
    with lock:
        summary["until_met"] = until_met is not None
        summary["buckets"] = [
            {k: s[k] for k in ("strategies", "last", "ttl_ms", "allowed", "denied")} for s in state
        ]
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
