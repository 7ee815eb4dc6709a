"""Parses an Envoy HTTP filter (JSON on stdin) against Envoy's published API (`xds-protos`)
the way Envoy reads its config: unknown fields and unknown `@type`s are errors. Prints the
filter's config as Envoy would see it (JSON), or exits 1 with the parse error."""

import json
import sys

from google.protobuf import json_format

# Registers the types the filters' `@type`s name.
import envoy.extensions.filters.http.rate_limit_quota.v3.rate_limit_quota_pb2  # noqa: F401
import envoy.extensions.filters.http.ratelimit.v3.rate_limit_pb2  # noqa: F401
import envoy.type.matcher.v3.http_inputs_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)


def main():
    f = hcm.HttpFilter()
    try:
        json_format.ParseDict(json.load(sys.stdin), f)
    except json_format.ParseError as e:
        print(f"not a valid Envoy HTTP filter: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(json_format.MessageToDict(f)))


if __name__ == "__main__":
    main()
