"""A hostile child of a GRL tier, written in Python against grl.proto (compiled at test time
with grpcio-tools): it opens a `grl.v1.Tier/Exchange` stream to --target and sends reports
whose rows claim --clients clients and --offered requests per second, at --level, every
--every seconds for --seconds; it prints one JSON line with how many reports it sent and
how the stream ended.
"""

import argparse
import json
import queue
import sys
import threading
import time

import grpc


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stubs", required=True, help="directory of the generated grl/v1 modules")
    p.add_argument("--target", required=True)
    p.add_argument("--id", default="hostile-1")
    p.add_argument("--service", default="payments")
    p.add_argument("--bucket", required=True)
    p.add_argument("--zone", default="a")
    p.add_argument("--region", default="eu")
    p.add_argument("--level", default="CLIENT", choices=["CLIENT", "ZONE", "REGION"])
    p.add_argument("--clients", type=int, default=2000)
    p.add_argument("--offered", type=float, default=1e9)
    p.add_argument("--every", type=float, default=0.2)
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args()
    sys.path.insert(0, a.stubs)
    from grl.v1 import grl_pb2, grl_pb2_grpc

    level = grl_pb2.Level.Value("LEVEL_" + a.level)
    q = queue.Queue()

    def reports():
        while True:
            r = q.get()
            if r is None:
                return
            yield r

    channel = grpc.insecure_channel(a.target)
    stub = grl_pb2_grpc.TierStub(channel)
    responses = stub.Exchange(reports())
    ended = {"status": None}

    def drain():
        try:
            for _ in responses:
                pass
            ended["status"] = "OK"
        except grpc.RpcError as e:
            ended["status"] = e.code().name

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    sent = 0
    deadline = time.time() + a.seconds
    seq = 0
    while time.time() < deadline and ended["status"] is None:
        seq += 1
        q.put(
            grl_pb2.Report(
                reporter_id=a.id,
                level=level,
                zone=a.zone,
                region=a.region,
                services=[a.service],
                interval_ms=1000,
                seq=seq,
                rates=[
                    grl_pb2.BucketRate(
                        service=a.service,
                        bucket=a.bucket,
                        zone=a.zone,
                        region=a.region,
                        offered=a.offered,
                        clients=a.clients,
                    )
                ],
            )
        )
        sent += 1
        time.sleep(a.every)
    q.put(None)
    channel.close()
    print(json.dumps({"sent": sent, "ended": ended["status"]}))


if __name__ == "__main__":
    main()
