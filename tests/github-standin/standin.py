"""A stand-in for GitHub's pull-request REST API, checked against GitHub's own description.

Every request is matched to an operation of the OpenAPI description (npm `@octokit/openapi`,
`generated/api.github.com.json`) and checked against it: the path and its parameters, every
query parameter (unknown ones are violations), the JSON body against the operation's schema,
the `Authorization` token and the API version header. Answers are the description's own
example responses with this stand-in's state filled in, and are themselves validated against
the response schemas, so a client written against this stand-in is written against GitHub.

Behaviour of the three pull-request operations the configurator uses:
  GET   /repos/{owner}/{repo}/pulls                 state/head/base filters, per_page/page,
                                                    `Link` header with rel="next"/"last"/...
  POST  /repos/{owner}/{repo}/pulls                 201; 422 when the head branch is not in
                                                    the git repo, or an open pull request
                                                    from head into base already exists
  PATCH /repos/{owner}/{repo}/pulls/{pull_number}   200; title/body/state/base
  POST  /repos/{owner}/{repo}/issues/{n}/comments   201; a comment on pull request n (404
                                                    when there is no such pull request)

Control endpoints for the test (not part of GitHub, never validated), under /_standin/:
  GET  /_standin/log               {"requests": [...], "violations": [...]}
  GET  /_standin/pulls             every pull request held
  GET  /_standin/comments          every comment made: [{"number", "body"}]
  POST /_standin/pulls             seed one: {"head", "base", "title", "state"}
  POST /_standin/pulls/N/merge     fast-forward base to head in the git repo; closed + merged
  POST /_standin/pulls/N/close     closed without merging
  POST /_standin/stale-list        the next list answer leaves out open pull requests

Usage: standin.py --openapi FILE --cert PEM --key PEM --port N --token T --git-dir BARE
                  --owner O --repo R
Only the standard library and `jsonschema` are used.
"""

import argparse
import copy
import json
import re
import ssl
import subprocess
import sys
import threading
import urllib.parse
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

API_VERSIONS_ACCEPTED = {"2022-11-28"}


def nullable_to_type_lists(node):
    """OpenAPI 3.0's `nullable: true` becomes a JSON schema that admits null."""
    if isinstance(node, dict):
        if node.get("nullable") is True:
            del node["nullable"]
            t = node.get("type")
            if isinstance(t, str):
                node["type"] = [t, "null"]
                if "enum" in node and None not in node["enum"]:
                    node["enum"] = node["enum"] + [None]
            else:
                inner = dict(node)
                node.clear()
                node["anyOf"] = [inner, {"type": "null"}]
        for v in list(node.values()):
            nullable_to_type_lists(v)
    elif isinstance(node, list):
        for v in node:
            nullable_to_type_lists(v)


class Description:
    """The OpenAPI document, its operations by method, and schema validation."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.doc = json.load(f)
        self.response_doc = copy.deepcopy(self.doc)
        nullable_to_type_lists(self.response_doc)
        self.registry = Registry().with_resource("urn:gh", Resource(self.doc, DRAFT4))
        self.response_registry = Registry().with_resource(
            "urn:gh", Resource(self.response_doc, DRAFT4)
        )
        self.operations = []
        for template, item in self.doc["paths"].items():
            names = re.findall(r"\{([^}]+)\}", template)
            pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "([^/]+)", re.escape(template)) + "$"
            for method, op in item.items():
                if method in ("get", "post", "put", "patch", "delete"):
                    params = item.get("parameters", []) + op.get("parameters", [])
                    self.operations.append(
                        (method.upper(), re.compile(pattern), names, op, params)
                    )

    def resolve(self, node, doc=None):
        doc = doc or self.doc
        while isinstance(node, dict) and "$ref" in node:
            target = doc
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    def find(self, method, path):
        for m, regex, names, op, params in self.operations:
            match = regex.match(path) if m == method else None
            if match:
                values = [urllib.parse.unquote(v) for v in match.groups()]
                return op, params, dict(zip(names, values))
        return None

    def errors(self, instance, schema, response=False):
        registry = self.response_registry if response else self.registry
        resolved = rewrite_refs(schema)
        validator = jsonschema.Draft4Validator(resolved, registry=registry)
        return [
            f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in validator.iter_errors(instance)
        ][:10]

    def example(self, ref):
        return copy.deepcopy(self.resolve({"$ref": ref})["value"])


def rewrite_refs(node):
    """`#/components/...` refs point into the registered document `urn:gh`."""
    if isinstance(node, dict):
        return {
            k: ("urn:gh" + v if k == "$ref" and isinstance(v, str) and v.startswith("#") else rewrite_refs(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [rewrite_refs(v) for v in node]
    return node


def coerce(value, schema):
    t = schema.get("type")
    if t == "integer":
        try:
            return int(value)
        except ValueError:
            return value
    if t == "boolean":
        return {"true": True, "false": False}.get(value, value)
    return value


def now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class State:
    def __init__(self, args, description):
        self.args = args
        self.d = description
        self.lock = threading.Lock()
        self.pulls = []
        self.comments = []
        self.requests = []
        self.violations = []
        self.stale_list = False
        self.next_number = 1

    def git(self, *argv):
        return subprocess.run(
            ["git", "--git-dir", self.args.git_dir, *argv],
            capture_output=True,
            text=True,
        )

    def branch_tip(self, name):
        out = self.git("rev-parse", "--verify", "--quiet", f"refs/heads/{name}^{{commit}}")
        return out.stdout.strip() if out.returncode == 0 else None

    def add_pull(self, head, base, title, body=None, state="open"):
        pr = {
            "number": self.next_number,
            "head": head,
            "base": base,
            "title": title,
            "body": body,
            "state": state,
            "created_at": now(),
            "updated_at": now(),
            "closed_at": None if state == "open" else now(),
            "merged_at": None,
        }
        self.next_number += 1
        self.pulls.append(pr)
        return pr

    def render(self, pr, host, simple):
        ref = (
            "#/components/examples/pull-request-simple-items"
            if simple
            else "#/components/examples/pull-request"
        )
        value = self.d.example(ref)
        if isinstance(value, list):
            value = value[0]
        owner, repo = self.args.owner, self.args.repo
        api = f"https://{host}/repos/{owner}/{repo}"
        n = pr["number"]
        value.update(
            {
                "id": 1000 + n,
                "number": n,
                "url": f"{api}/pulls/{n}",
                "html_url": f"https://{host}/{owner}/{repo}/pull/{n}",
                "state": pr["state"],
                "title": pr["title"],
                "body": pr["body"],
                "created_at": pr["created_at"],
                "updated_at": pr["updated_at"],
                "closed_at": pr["closed_at"],
                "merged_at": pr["merged_at"],
            }
        )
        for side in ("head", "base"):
            value[side]["ref"] = pr[side]
            value[side]["label"] = f"{owner}:{pr[side]}"
            value[side]["sha"] = self.branch_tip(pr[side]) or value[side]["sha"]
        value["requested_reviewers"] = []
        value["requested_teams"] = []
        if not simple:
            value["merged"] = pr["merged_at"] is not None
        return value


def make_handler(state):
    d = state.d

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            sys.stderr.write("standin: " + (fmt % a) + "\n")

        def reply(self, status, body, headers=None):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def body_bytes(self):
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def do_GET(self):
            self.handle_any("GET")

        def do_POST(self):
            self.handle_any("POST")

        def do_PATCH(self):
            self.handle_any("PATCH")

        def do_PUT(self):
            self.handle_any("PUT")

        def do_DELETE(self):
            self.handle_any("DELETE")

        def handle_any(self, method):
            url = urllib.parse.urlsplit(self.path)
            raw = self.body_bytes()
            with state.lock:
                if url.path.startswith("/_standin/"):
                    return self.control(method, url.path, raw)
                self.api(method, url, raw)

        # ---- control --------------------------------------------------------------------
        def control(self, method, path, raw):
            body = json.loads(raw) if raw else {}
            if (method, path) == ("GET", "/_standin/log"):
                return self.reply(200, {"requests": state.requests, "violations": state.violations})
            if (method, path) == ("GET", "/_standin/pulls"):
                return self.reply(200, state.pulls)
            if (method, path) == ("GET", "/_standin/comments"):
                return self.reply(200, state.comments)
            if (method, path) == ("POST", "/_standin/pulls"):
                pr = state.add_pull(
                    body["head"], body["base"], body.get("title", "seeded"), None, body.get("state", "open")
                )
                return self.reply(201, pr)
            if (method, path) == ("POST", "/_standin/stale-list"):
                state.stale_list = True
                return self.reply(200, {})
            m = re.match(r"^/_standin/pulls/(\d+)/(merge|close)$", path)
            if method == "POST" and m:
                pr = next((p for p in state.pulls if p["number"] == int(m.group(1))), None)
                if pr is None or pr["state"] != "open":
                    return self.reply(409, {"message": "no open pull request with that number"})
                if m.group(2) == "merge":
                    head = state.branch_tip(pr["head"])
                    base = state.branch_tip(pr["base"])
                    ff = state.git("merge-base", "--is-ancestor", base, head)
                    if head is None or base is None or ff.returncode != 0:
                        return self.reply(409, {"message": "cannot fast-forward base to head"})
                    state.git("update-ref", f"refs/heads/{pr['base']}", head, base)
                    pr["merged_at"] = now()
                pr["state"] = "closed"
                pr["closed_at"] = now()
                return self.reply(200, pr)
            return self.reply(404, {"message": "unknown control endpoint"})

        # ---- the API --------------------------------------------------------------------
        def violation(self, text):
            state.violations.append(f"{self.command} {self.path}: {text}")

        def api(self, method, url, raw):
            record = {"method": method, "path": url.path, "query": url.query}
            state.requests.append(record)
            found = d.find(method, url.path)
            if found is None:
                self.violation("no such operation in the description")
                record["status"] = 404
                return self.reply(404, {"message": "Not Found"})
            op, params, path_values = found
            record["operation"] = op.get("operationId")
            self.check_headers()
            query = self.check_params(params, path_values, url.query)
            body = self.check_body(op, raw)
            record["body"] = body
            status, answer, headers = self.behave(op.get("operationId"), path_values, query, body)
            record["status"] = status
            self.check_response(op, status, answer, headers)
            self.reply(status, answer, headers)

        def check_headers(self):
            auth = self.headers.get("Authorization", "")
            if auth not in (f"Bearer {state.args.token}", f"token {state.args.token}"):
                self.violation(f"Authorization is not the token: {auth[:12]!r}...")
            version = self.headers.get("X-GitHub-Api-Version")
            if version is not None and version not in API_VERSIONS_ACCEPTED:
                self.violation(f"X-GitHub-Api-Version {version!r} is not a published version")
            accept = self.headers.get("Accept", "")
            if "json" not in accept and "*/*" not in accept:
                self.violation(f"Accept {accept!r} asks for no JSON")
            if not self.headers.get("User-Agent"):
                self.violation("no User-Agent (GitHub rejects such requests)")

        def check_params(self, params, path_values, raw_query):
            declared = {}
            for p in params:
                p = d.resolve(p)
                declared[(p["in"], p["name"])] = p
            for name, value in path_values.items():
                p = declared.get(("path", name))
                if p is None:
                    self.violation(f"path parameter {name} not declared")
                    continue
                for e in d.errors(coerce(value, p["schema"]), p["schema"]):
                    self.violation(f"path parameter {name}: {e}")
            pairs = urllib.parse.parse_qsl(raw_query, keep_blank_values=True)
            query = {}
            for name, value in pairs:
                if name in query:
                    self.violation(f"query parameter {name} given twice")
                p = declared.get(("query", name))
                if p is None:
                    self.violation(f"query parameter {name} is not in the description")
                    continue
                v = coerce(value, d.resolve(p["schema"]))
                for e in d.errors(v, p["schema"]):
                    self.violation(f"query parameter {name}={value!r}: {e}")
                query[name] = v
            for (where, name), p in declared.items():
                if where == "query" and p.get("required") and name not in query:
                    self.violation(f"required query parameter {name} missing")
            return query

        def check_body(self, op, raw):
            spec = d.resolve(op.get("requestBody")) if op.get("requestBody") else None
            if spec is None:
                if raw:
                    self.violation("a body where the operation takes none")
                return None
            if not raw:
                if spec.get("required"):
                    self.violation("required body missing")
                return None
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            media = spec.get("content", {}).get(ctype)
            if media is None:
                self.violation(f"Content-Type {ctype!r} not accepted by the operation")
                return None
            try:
                body = json.loads(raw)
            except ValueError as e:
                self.violation(f"body is not JSON: {e}")
                return None
            for e in d.errors(body, media["schema"]):
                self.violation(f"body {e}")
            known = d.resolve(media["schema"]).get("properties")
            if isinstance(body, dict) and known is not None:
                for key in body:
                    if key not in known:
                        self.violation(f"body property {key!r} is not in the description")
            return body

        def check_response(self, op, status, answer, headers):
            spec = op["responses"].get(str(status))
            if spec is None and status == 404:
                # GitHub answers 404 on every operation for a repository it will not show.
                spec = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/basic-error"}}}}
            if spec is None:
                self.violation(f"stand-in answered {status}, which the operation does not list")
                return
            spec = d.resolve(spec)
            media = spec.get("content", {}).get("application/json")
            if media is not None:
                for e in d.errors(answer, media["schema"], response=True):
                    state.violations.append(f"stand-in response {status}: {e}")

        def behave(self, operation, path_values, query, body):
            host = self.headers.get("Host")
            owner, repo = path_values.get("owner"), path_values.get("repo")
            if (owner, repo) != (state.args.owner, state.args.repo):
                return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, {}
            if operation == "pulls/list":
                return self.list_pulls(host, query)
            if operation == "pulls/create":
                return self.create(host, body or {})
            if operation == "pulls/update":
                return self.update(host, int(path_values["pull_number"]), body or {})
            if operation == "issues/create-comment":
                return self.comment(host, int(path_values["issue_number"]), body or {})
            return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, {}

        def list_pulls(self, host, query):
            want_state = query.get("state", "open")
            head = query.get("head")
            base = query.get("base")
            owner = state.args.owner
            rows = [
                p
                for p in state.pulls
                if (want_state == "all" or p["state"] == want_state)
                and (head is None or f"{owner}:{p['head']}" == head)
                and (base is None or p["base"] == base)
            ]
            if state.stale_list:
                state.stale_list = False
                rows = [p for p in rows if p["state"] != "open"]
            per_page = max(1, min(int(query.get("per_page", 30)), 100))
            page = max(1, int(query.get("page", 1)))
            last = max(1, (len(rows) + per_page - 1) // per_page)
            chunk = rows[(page - 1) * per_page : page * per_page]

            def link(n):
                q = dict(query)
                q["page"] = n
                return f"<https://{host}/repos/{owner}/{state.args.repo}/pulls?{urllib.parse.urlencode(q)}>"

            links = []
            if page < last:
                links += [f'{link(page + 1)}; rel="next"', f'{link(last)}; rel="last"']
            if page > 1:
                links += [f'{link(1)}; rel="first"', f'{link(page - 1)}; rel="prev"']
            headers = {"Link": ", ".join(links)} if links else {}
            return 200, [state.render(p, host, simple=True) for p in chunk], headers

        def create(self, host, body):
            head, base = body.get("head"), body.get("base")
            if state.branch_tip(head or "") is None or state.branch_tip(base or "") is None:
                return 422, validation_failed("head" if state.branch_tip(head or "") is None else "base", "invalid"), {}
            if any(p["state"] == "open" and p["head"] == head and p["base"] == base for p in state.pulls):
                return 422, validation_failed(
                    None, "custom", f"A pull request already exists for {state.args.owner}:{head}."
                ), {}
            pr = state.add_pull(head, base, body.get("title"), body.get("body"))
            return 201, state.render(pr, host, simple=False), {
                "Location": f"https://{host}/repos/{state.args.owner}/{state.args.repo}/pulls/{pr['number']}"
            }

        def update(self, host, number, body):
            pr = next((p for p in state.pulls if p["number"] == number), None)
            if pr is None:
                return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, {}
            for k in ("title", "body", "base"):
                if k in body:
                    pr[k] = body[k]
            if body.get("state") == "closed" and pr["state"] == "open":
                pr["state"], pr["closed_at"] = "closed", now()
            pr["updated_at"] = now()
            return 200, state.render(pr, host, simple=False), {}

        def comment(self, host, number, body):
            if not any(p["number"] == number for p in state.pulls):
                return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, {}
            state.comments.append({"number": number, "body": body.get("body")})
            owner, repo = state.args.owner, state.args.repo
            value = d.example("#/components/examples/issue-comment")
            value.update(
                {
                    "id": 5000 + len(state.comments),
                    "body": body.get("body"),
                    "url": f"https://{host}/repos/{owner}/{repo}/issues/comments/{5000 + len(state.comments)}",
                    "issue_url": f"https://{host}/repos/{owner}/{repo}/issues/{number}",
                    "created_at": now(),
                    "updated_at": now(),
                }
            )
            return 201, value, {}

    return Handler


def validation_failed(field, code, message=None):
    error = {"resource": "PullRequest", "code": code}
    if field:
        error["field"] = field
    if message:
        error["message"] = message
    return {
        "message": "Validation Failed",
        "errors": [error],
        "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
    }


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--openapi", "--cert", "--key", "--token", "--git-dir", "--owner", "--repo"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    description = Description(args.openapi)
    state = State(args, description)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(state))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"standin: listening on https://127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
