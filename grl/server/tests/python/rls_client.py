"""A gRPC client of Envoy's rate limit service, written against `xds-protos` (the Python
stubs the gRPC project generates from Envoy's published API), used by the sidecar tests.

It calls envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit on --target, either the
sidecar's rate limit service or, through the sidecar's proxy, an upstream serving it, and
prints one JSON summary of what it saw on stdout: counts by gRPC status and overall code,
and, by overall code or gRPC status, how many answers carried each value of each header
GRL names refusals with (`response_headers_to_add` of an answer, the trailers of a failed
call).

Descriptors are JSON: {"entries": [["key", "value"], ...], "hits": N or absent}; a value
may be {"repeat": "text", "times": N} for a value too long for a command line.
"""

import argparse
import json
import sys
import time

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import wrappers_pb2

CODES = {v: k for k, v in rls_pb2.RateLimitResponse.Code.items()}
REFUSAL_HEADERS = ("grl-bucket", "ratelimit-policy", "ratelimit")


def count_headers(summary, code, pairs):
    seen = summary["headers"].setdefault(code, {})
    for k, v in pairs:
        if k.lower() in REFUSAL_HEADERS:
            values = seen.setdefault(k.lower(), {})
            values[v] = values.get(v, 0) + 1


def value(v):
    return v["repeat"] * v["times"] if isinstance(v, dict) else v


def descriptor(spec):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=value(v))
            for k, v in spec["entries"]
        ]
    )
    if spec.get("hits") is not None:
        d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=spec["hits"]))
    return d


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--domain", default="payments")
    p.add_argument("--descriptor", action="append", default=[])
    p.add_argument("--hits", type=int, default=0, help="the request's hits_addend")
    p.add_argument("--copies", type=int, default=1, help="send the descriptors this many times")
    p.add_argument("--caller-metadata", help="sent as the rpc-caller header")
    p.add_argument("--until", help="call until this overall code or gRPC status is seen")
    p.add_argument("--then", type=int, default=0, help="calls to make after --until")
    p.add_argument("--min-calls", type=int, default=1)
    p.add_argument("--min-seconds", type=float, default=0.0)
    p.add_argument("--deadline", type=float, default=30.0)
    p.add_argument("--timeout", type=float, default=10.0, help="per-call deadline")
    p.add_argument("--every", type=float, default=0.0, help="pace: one call every this many seconds")
    p.add_argument("--ca", help="TLS: the CA (PEM) of the server's certificate")
    p.add_argument("--server-name", default="localhost", help="TLS: the name to verify")
    a = p.parse_args()

    specs = [json.loads(s) for s in a.descriptor] * a.copies
    req = rls_pb2.RateLimitRequest(
        domain=a.domain,
        descriptors=[descriptor(s) for s in specs],
        hits_addend=a.hits,
    )
    metadata = [("rpc-caller", a.caller_metadata)] if a.caller_metadata else None
    summary = {
        "calls": 0,
        "grpc": {},
        "overall": {},
        "statuses": [{} for _ in specs],
        "details": {},
        "headers": {},
        "hits_sent": [0 for _ in specs],
        "seen": a.until is None,
        "seconds": 0.0,
        "timeline": [],
    }
    start = time.monotonic()
    after = 0
    if a.ca:
        with open(a.ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        options = [("grpc.ssl_target_name_override", a.server_name)]
        channel = grpc.secure_channel(a.target, creds, options=options)
    else:
        channel = grpc.insecure_channel(a.target)
    with channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        while time.monotonic() - start < a.deadline:
            if a.every > 0:
                due = start + summary["calls"] * a.every
                time.sleep(max(0.0, due - time.monotonic()))
            try:
                res = stub.ShouldRateLimit(req, metadata=metadata, timeout=a.timeout)
                code, overall = "OK", CODES[res.overall_code]
                summary["overall"][overall] = summary["overall"].get(overall, 0) + 1
                count_headers(
                    summary, overall, [(h.key, h.value) for h in res.response_headers_to_add]
                )
                for i, st in enumerate(res.statuses):
                    if i < len(specs):
                        c = CODES[st.code]
                        summary["statuses"][i][c] = summary["statuses"][i].get(c, 0) + 1
                for i, s in enumerate(specs):
                    h = s.get("hits")
                    summary["hits_sent"][i] += h if h is not None else max(a.hits, 1)
            except grpc.RpcError as e:
                code, overall = e.code().name, None
                summary["details"].setdefault(code, e.details())
                count_headers(summary, code, e.trailing_metadata() or ())
                trailing = dict(e.trailing_metadata() or ())
                if "retry-after" in trailing:
                    summary.setdefault("retry_after", trailing["retry-after"])
            summary["calls"] += 1
            summary["grpc"][code] = summary["grpc"].get(code, 0) + 1
            if a.every > 0:
                summary["timeline"].append([round(time.monotonic() - start, 3), overall or code])
            if summary["seen"]:
                after += 1
            elif a.until in (code, overall):
                summary["seen"] = True
            if (
                summary["seen"]
                and after >= a.then
                and summary["calls"] >= a.min_calls
                and time.monotonic() - start >= a.min_seconds
            ):
                break
    summary["seconds"] = time.monotonic() - start
    print(json.dumps(summary))
    return 0 if summary["seen"] else 1


if __name__ == "__main__":
    sys.exit(main())
