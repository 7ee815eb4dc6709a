"""A hostile peer of Envoy's rate limit quota service, written against `xds-protos` (the
Python stubs the gRPC project generates from Envoy's published API), used by the sidecar
tests of its bounds.

It opens --streams StreamRateLimitQuotas streams on one channel to --target, all held open
at once. On each it reports --buckets distinct buckets ({source_cluster: --caller, path:
/pay.Pay/B<stream>-<n>}), --per-report buckets a report, each usage carrying --allowed
allowed and --denied denied requests, and waits for an assignment of every bucket it
reported or for the stream's end. With --then-one, once every stream is closed it opens one
more and reports one bucket on it. It prints one JSON summary: per stream, the gRPC status
("OK" while it was served), its details and how many buckets were assigned.
"""

import argparse
import json
import queue
import threading
import time

import grpc
from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc


class Stream:
    """One stream: reports go in through a queue, a thread reads the answers."""

    def __init__(self, stub, index, deadline):
        self.index = index
        self.outgoing = queue.Queue()
        self.assigned = set()
        self.status = "OK"
        self.details = None
        self.ended = threading.Event()
        self.changed = threading.Condition()
        self.call = stub.StreamRateLimitQuotas(iter(self.outgoing.get, None), timeout=deadline)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        try:
            for resp in self.call:
                with self.changed:
                    for action in resp.bucket_action:
                        self.assigned.add(tuple(sorted(action.bucket_id.bucket.items())))
                    self.changed.notify_all()
        except grpc.RpcError as e:
            self.status, self.details = e.code().name, e.details()
        with self.changed:
            self.ended.set()
            self.changed.notify_all()

    def report(self, args, ids):
        r = rlqs_pb2.RateLimitQuotaUsageReports(domain=args.domain)
        for bucket in ids:
            u = r.bucket_quota_usages.add()
            u.bucket_id.bucket.update(bucket)
            u.num_requests_allowed = args.allowed
            u.num_requests_denied = args.denied
        self.outgoing.put(r)

    def wait(self, want, until):
        """Waits until `want` buckets are assigned or the stream ends; whether it was served."""
        with self.changed:
            while len(self.assigned) < want and not self.ended.is_set():
                left = until - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
            return len(self.assigned) >= want

    def close(self):
        self.outgoing.put(None)
        self.ended.wait(10)
        return {
            "status": self.status,
            "details": self.details,
            "assigned": len(self.assigned),
        }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--domain", default="payments")
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--buckets", type=int, default=1)
    p.add_argument("--per-report", type=int, default=1000)
    p.add_argument("--caller", default="hostile")
    p.add_argument("--caller-bytes", type=int, default=0, help="a caller of this many bytes")
    p.add_argument("--allowed", type=int, default=1)
    p.add_argument("--denied", type=int, default=0)
    p.add_argument("--then-one", action="store_true")
    p.add_argument("--deadline", type=float, default=60.0)
    args = p.parse_args()
    caller = "c" * args.caller_bytes if args.caller_bytes else args.caller

    until = time.monotonic() + args.deadline
    summary = {"streams": []}
    with grpc.insecure_channel(
        args.target,
        options=[("grpc.max_send_message_length", 8 << 20),
                 ("grpc.max_receive_message_length", 8 << 20)],
    ) as channel:
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(channel)
        streams = [Stream(stub, i, args.deadline) for i in range(args.streams)]
        for s in streams:
            ids = [{"source_cluster": caller, "path": f"/pay.Pay/B{s.index}-{n}"}
                   for n in range(args.buckets)]
            for start in range(0, len(ids), args.per_report):
                batch = ids[start:start + args.per_report]
                s.report(args, batch)
                # The next report goes once this one is answered or the stream ended, as
                # Envoy reports at an interval.
                if not s.wait(start + len(batch), until):
                    break
        summary["streams"] = [s.close() for s in streams]
        if args.then_one:
            last = Stream(stub, args.streams, args.deadline)
            last.report(args, [{"source_cluster": caller, "path": "/pay.Pay/Last"}])
            last.wait(1, until)
            summary["then_one"] = last.close()
    codes = {}
    for s in summary["streams"]:
        codes[s["status"]] = codes.get(s["status"], 0) + 1
    summary["codes"] = codes
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
