#!/usr/bin/env bash
# The project's test command: `bash tests/run.sh` (CI runs it through .ci/run).
#
# On a fresh Debian machine with only the Rust toolchain, run as root, it:
#   1. installs what is missing of `prometheus` (prometheus + promtool), `redis-server`,
#      `etcd-server` (controller leader election),
#      `postgresql`, `libssl-dev` and `pkg-config` (git2's https), `python3` and
#      `python3-venv` (the tests' Python venvs), `npm` (GitHub's REST description, when
#      not cached), `iproute2` and `iptables` (the network-fault tests' namespaces and drops)
#      with apt-get (no service is started by the install);
#   2. starts the PostgreSQL cluster (creating one if there is none), creates the role
#      `grl` (password `grl`, CREATEDB) and its database `grl`, checks password login over
#      TCP on 127.0.0.1;
#   3. exports the environment the end-to-end helpers (tests/support) read:
#        GRL_TEST_PROMETHEUS    path of prometheus     (default /usr/bin/prometheus)
#        GRL_TEST_PROMTOOL      path of promtool       (default /usr/bin/promtool)
#        GRL_TEST_REDIS_SERVER  path of redis-server   (default /usr/bin/redis-server)
#        GRL_TEST_ETCD          path of etcd           (default /usr/bin/etcd; each test
#                               starts its own on free ports)
#        GRL_TEST_PG_URL        postgres://grl:grl@127.0.0.1:<port>/grl
#        GRL_TEST_GITHUB_PYTHON  a venv's python with jsonschema (the GitHub stand-in)
#        GRL_TEST_GITHUB_OPENAPI GitHub's REST description (npm @octokit/openapi)
#        GRL_TEST_PYTHON        a venv's python with grpcio, xds-protos and kubernetes-validate
#                               (created at target/pyvenv, or GRL_TEST_PYVENV)
#        GRL_TEST_KUBECTL       path of kubectl (installed as Debian's kubernetes-client)
#        GRL_TEST_CHROMIUM      path of chromium (the /status page test, headless)
#        GRL_TEST_TMUX          path of tmux (the `grl top` terminal test)
#      Set any of them beforehand to use your own binary or server instead (with
#      GRL_TEST_PG_URL set, the local PostgreSQL is neither installed nor started);
#      GRL_TEST_PG_CLUSTER names the local cluster to use (default: `main`);
#   4. runs cargo fmt --check, cargo clippy -D warnings, prints the import circles
#      (tests/support/src/import_circles.rs), cargo machete (installed with
#      `cargo install` if missing; fails on an unused dependency), checks grl-client's
#      dependency tree, and runs cargo test for the workspace.
#
# It is idempotent: a second run finds everything installed and running.
#
# GRL_TEST_ENV_ONLY=1 does steps 1-3 only and prints the `export` lines on stdout, so
#   eval "$(GRL_TEST_ENV_ONLY=1 bash tests/run.sh)" && cargo test -p e2e
# runs a subset of the tests by hand. All progress output goes to stderr.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '%s\n' "$*" >&2; }
section() { printf '\n==== %s ====\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------------------------------
section "System packages"

need_pg=1
[[ -n "${GRL_TEST_PG_URL:-}" ]] && need_pg=0

# The tests' Python venvs (the GitHub stand-in's and target/pyvenv) and GitHub's REST
# description, kept in a cache directory; a second run finds them and downloads nothing.
gh_cache="${GRL_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/grl-test}"
gh_openapi_version=23.0.2
gh_jsonschema_version=4.26.0
gh_venv="$gh_cache/github-venv"
gh_venv_ok() {
    "$gh_venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('jsonschema') != '$gh_jsonschema_version')" 2>/dev/null
}
gh_pkg="$gh_cache/octokit-openapi-$gh_openapi_version"
pyvenv="${GRL_TEST_PYVENV:-$PWD/target/pyvenv}"
py_pkgs=(grpcio==1.85.* grpcio-tools==1.85.* xds-protos==1.85.* kubernetes-validate==1.37.*)
py_ok() {
    [[ -x "$pyvenv/bin/python" ]] &&
        "$pyvenv/bin/python" -c 'import grpc, grpc_tools.protoc, envoy.service.ratelimit.v3.rls_pb2_grpc, kubernetes_validate' 2>/dev/null
}

missing=()
if [[ -z "${GRL_TEST_PROMETHEUS:-}${GRL_TEST_PROMTOOL:-}" ]] &&
    { [[ ! -x /usr/bin/prometheus ]] || [[ ! -x /usr/bin/promtool ]]; }; then
    missing+=(prometheus)
fi
if [[ -z "${GRL_TEST_REDIS_SERVER:-}" && ! -x /usr/bin/redis-server ]]; then
    missing+=(redis-server)
fi
if [[ -z "${GRL_TEST_ETCD:-}" && ! -x /usr/bin/etcd ]]; then
    missing+=(etcd-server)
fi
# git2 links the system OpenSSL (for https remotes) through pkg-config.
if ! dpkg -s libssl-dev pkg-config >/dev/null 2>&1; then
    missing+=(libssl-dev pkg-config)
fi
# A venv to create needs python3 with venv and ensurepip (python3-venv on Debian).
if { ! py_ok || { [[ -z "${GRL_TEST_GITHUB_PYTHON:-}" ]] && ! gh_venv_ok; }; } &&
    ! { command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null; }; then
    missing+=(python3 python3-venv)
fi
if [[ -z "${GRL_TEST_GITHUB_OPENAPI:-}" && ! -s "$gh_pkg/package/generated/api.github.com.json" ]] &&
    ! command -v npm >/dev/null; then
    missing+=(npm)
fi
# The GitHub stand-in's test CA is made with the openssl CLI.
command -v openssl >/dev/null || missing+=(openssl)
# The network-fault tests (grl/server/tests/net_faults) make hosts in network namespaces
# with `ip` and drop packets with `iptables-legacy` (they skip, saying so, without them).
command -v ip >/dev/null || missing+=(iproute2)
command -v iptables-legacy >/dev/null || missing+=(iptables)
if ((need_pg)) && { ! command -v pg_lsclusters >/dev/null || ! command -v psql >/dev/null ||
    ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }; then
    missing+=(postgresql)
fi

if ((${#missing[@]})); then
    [[ $(id -u) -eq 0 ]] || die "missing packages ${missing[*]}; run as root to install them"
    log "installing: ${missing[*]}"
    # Keep package scripts from starting services (redis-server would take port 6379):
    # the tests start their own servers. Only remove a policy we created ourselves.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt_opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
    apt-get "${apt_opts[@]}" update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -q \
        --no-install-recommends "${missing[@]}" >&2
    if [[ -f /usr/sbin/policy-rc.d ]] && trap -p EXIT | grep -q policy-rc.d; then
        rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    fi
else
    log "prometheus, promtool, redis-server, etcd, postgresql, python3 and npm are installed or not needed"
fi

export GRL_TEST_PROMETHEUS="${GRL_TEST_PROMETHEUS:-/usr/bin/prometheus}"
export GRL_TEST_PROMTOOL="${GRL_TEST_PROMTOOL:-/usr/bin/promtool}"
export GRL_TEST_REDIS_SERVER="${GRL_TEST_REDIS_SERVER:-/usr/bin/redis-server}"
export GRL_TEST_ETCD="${GRL_TEST_ETCD:-/usr/bin/etcd}"
for bin in "$GRL_TEST_PROMETHEUS" "$GRL_TEST_PROMTOOL" "$GRL_TEST_REDIS_SERVER" "$GRL_TEST_ETCD"; do
    [[ -x "$bin" ]] || die "$bin is missing or not executable"
done

# ---------------------------------------------------------------------------------------
section "GitHub stand-in (tests/github-standin): jsonschema + GitHub's OpenAPI description"
# A venv with jsonschema (PyPI) and api.github.com.json from npm @octokit/openapi, both pinned,
# kept in $gh_cache; a second run finds them and downloads nothing.
if [[ -z "${GRL_TEST_GITHUB_PYTHON:-}" ]]; then
    if ! gh_venv_ok; then
        log "creating $gh_venv with jsonschema $gh_jsonschema_version"
        command -v python3 >/dev/null || die "python3 is needed for the GitHub stand-in"
        python3 -m venv "$gh_venv" >&2
        "$gh_venv/bin/pip" install -q --disable-pip-version-check "jsonschema==$gh_jsonschema_version" >&2
    fi
    export GRL_TEST_GITHUB_PYTHON="$gh_venv/bin/python"
fi
if [[ -z "${GRL_TEST_GITHUB_OPENAPI:-}" ]]; then
    if [[ ! -s "$gh_pkg/package/generated/api.github.com.json" ]]; then
        log "fetching @octokit/openapi@$gh_openapi_version (GitHub's REST description, MIT) with npm"
        command -v npm >/dev/null || die "npm is needed to fetch GitHub's OpenAPI description"
        rm -rf "$gh_pkg.tmp" && mkdir -p "$gh_pkg.tmp"
        (cd "$gh_pkg.tmp" && npm pack --silent "@octokit/openapi@$gh_openapi_version" >/dev/null &&
            tar xzf "octokit-openapi-$gh_openapi_version.tgz" package/generated/api.github.com.json \
                package/LICENSE package/package.json && rm "octokit-openapi-$gh_openapi_version.tgz") >&2
        rm -rf "$gh_pkg" && mv "$gh_pkg.tmp" "$gh_pkg"
    fi
    export GRL_TEST_GITHUB_OPENAPI="$gh_pkg/package/generated/api.github.com.json"
fi
log "GRL_TEST_GITHUB_PYTHON=$GRL_TEST_GITHUB_PYTHON GRL_TEST_GITHUB_OPENAPI=$GRL_TEST_GITHUB_OPENAPI"

# ---------------------------------------------------------------------------------------
if ((need_pg)); then
    section "PostgreSQL"
    [[ $(id -u) -eq 0 ]] || die "run as root to start PostgreSQL, or set GRL_TEST_PG_URL"

    # The cluster to use: GRL_TEST_PG_CLUSTER if set (created if missing), else `main`,
    # else the first one listed; if there is none, a new `main` of the newest version.
    cluster_line() {
        local name="${GRL_TEST_PG_CLUSTER:-main}"
        pg_lsclusters --no-header 2>/dev/null | awk -v n="$name" '$2 == n { print; exit }' | grep . ||
            { [[ -z "${GRL_TEST_PG_CLUSTER:-}" ]] && pg_lsclusters --no-header 2>/dev/null | head -n 1; }
    }
    if ! line=$(cluster_line) || [[ -z "$line" ]]; then
        ver=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -n | tail -n 1)
        [[ -n "$ver" ]] || die "no PostgreSQL server version under /usr/lib/postgresql"
        log "creating cluster $ver/${GRL_TEST_PG_CLUSTER:-main}"
        pg_createcluster "$ver" "${GRL_TEST_PG_CLUSTER:-main}" >&2
        line=$(cluster_line)
    fi
    read -r pg_ver pg_cluster pg_port pg_status _ <<<"$line"

    if [[ "$pg_status" != online* ]]; then
        log "starting cluster $pg_ver/$pg_cluster on port $pg_port"
        pg_ctlcluster "$pg_ver" "$pg_cluster" start >&2
    else
        log "cluster $pg_ver/$pg_cluster is running on port $pg_port"
    fi
    for _ in $(seq 1 120); do
        pg_isready -q -h 127.0.0.1 -p "$pg_port" && break
        sleep 0.5
    done
    pg_isready -h 127.0.0.1 -p "$pg_port" >&2 || die "PostgreSQL does not accept connections on 127.0.0.1:$pg_port"

    as_postgres() { runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$pg_port" "$@"; }
    as_postgres -d postgres <<'SQL'
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'grl') THEN
        CREATE ROLE grl LOGIN CREATEDB PASSWORD 'grl';
    ELSE
        ALTER ROLE grl LOGIN CREATEDB PASSWORD 'grl';
    END IF;
END
$$;
SQL
    if [[ -z $(as_postgres -d postgres -tA -c "SELECT 1 FROM pg_database WHERE datname = 'grl'") ]]; then
        as_postgres -d postgres -c 'CREATE DATABASE grl OWNER grl'
    fi

    pg_url="postgres://grl:grl@127.0.0.1:${pg_port}/grl"
    can_login() { psql -X -q -d "$pg_url" -tA -c 'SELECT 1' >/dev/null 2>&1; }
    if ! can_login; then
        # Debian's default pg_hba.conf allows password logins on 127.0.0.1; if a changed
        # one does not, put a rule for the test role first and reload.
        hba=$(as_postgres -d postgres -tA -c 'SHOW hba_file')
        log "allowing password login for role grl on 127.0.0.1 in $hba"
        sed -i '0,/^[[:space:]]*[^#[:space:]]/s//host all grl 127.0.0.1\/32 scram-sha-256\n&/' "$hba"
        as_postgres -d postgres -c 'SELECT pg_reload_conf()' >/dev/null
        sleep 1
        can_login || die "cannot log in as grl at $pg_url"
    fi
    export GRL_TEST_PG_URL="$pg_url"
fi
log "GRL_TEST_PG_URL=$GRL_TEST_PG_URL"

# ---------------------------------------------------------------------------------------
section "Python venv, curl, kubectl, chromium and tmux (sidecar, Envoy, Kubernetes, operator tests)"
# The sidecar tests use clients nobody here wrote: curl, and Python grpcio with xds-protos
# (the gRPC project's stubs of Envoy's API); the Kubernetes manifests are rendered by kubectl
# and validated offline by kubernetes-validate; the controller's /status page is loaded in a
# headless chromium and `grl top` is driven in a real terminal (tmux).
need_apt=()
command -v curl >/dev/null || need_apt+=(curl)
[[ -n "${GRL_TEST_CHROMIUM:-}" ]] || command -v chromium >/dev/null || need_apt+=(chromium)
[[ -n "${GRL_TEST_TMUX:-}" ]] || command -v tmux >/dev/null || need_apt+=(tmux)
if [[ -z "${GRL_TEST_KUBECTL:-}" ]] && ! command -v kubectl >/dev/null; then
    need_apt+=(kubernetes-client)
fi
if ((${#need_apt[@]})); then
    [[ $(id -u) -eq 0 ]] || die "missing packages ${need_apt[*]}; run as root to install them"
    log "installing: ${need_apt[*]}"
    apt_opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
    apt-get "${apt_opts[@]}" update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -q \
        --no-install-recommends "${need_apt[@]}" >&2
fi
if ! py_ok; then
    log "creating $pyvenv with ${py_pkgs[*]}"
    python3 -m venv "$pyvenv" >&2
    "$pyvenv/bin/python" -m pip install -q --disable-pip-version-check "${py_pkgs[@]}" >&2
    py_ok || die "$pyvenv lacks grpcio, grpcio-tools, xds-protos or kubernetes-validate"
else
    log "$pyvenv has grpcio, grpcio-tools, xds-protos and kubernetes-validate"
fi
export GRL_TEST_PYTHON="$pyvenv/bin/python"
export GRL_TEST_KUBECTL="${GRL_TEST_KUBECTL:-$(command -v kubectl)}"
[[ -x "$GRL_TEST_KUBECTL" ]] || die "$GRL_TEST_KUBECTL is missing or not executable"
export GRL_TEST_CHROMIUM="${GRL_TEST_CHROMIUM:-$(command -v chromium)}"
export GRL_TEST_TMUX="${GRL_TEST_TMUX:-$(command -v tmux)}"
[[ -x "$GRL_TEST_CHROMIUM" ]] || die "$GRL_TEST_CHROMIUM is missing or not executable"
[[ -x "$GRL_TEST_TMUX" ]] || die "$GRL_TEST_TMUX is missing or not executable"

if [[ "${GRL_TEST_ENV_ONLY:-}" == 1 ]]; then
    for var in GRL_TEST_PROMETHEUS GRL_TEST_PROMTOOL GRL_TEST_REDIS_SERVER GRL_TEST_ETCD GRL_TEST_PG_URL \
        GRL_TEST_GITHUB_PYTHON GRL_TEST_GITHUB_OPENAPI GRL_TEST_PYTHON GRL_TEST_KUBECTL \
        GRL_TEST_CHROMIUM GRL_TEST_TMUX; do
        printf 'export %s=%q\n' "$var" "${!var}"
    done
    exit 0
fi

# ---------------------------------------------------------------------------------------
section "Build settings"
# A one-shot build (CI=true) keeps no incremental state and only line tables for debug
# info: a full test build then takes about 5 GiB (4.3 GiB measured; a run on a machine
# with a few GiB free failed with "No space left on device").
if [[ "${CI:-}" == true ]]; then
    export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=line-tables-only
    export CARGO_PROFILE_TEST_DEBUG=line-tables-only
fi
free_kib=$(df -Pk "${CARGO_TARGET_DIR:-target}" 2>/dev/null | awk 'NR==2 {print $4}' || true)
[[ -z "$free_kib" ]] && free_kib=$(df -Pk . | awk 'NR==2 {print $4}')
log "free disk for the build: $((free_kib / 1024 / 1024)) GiB (a clean CI build takes about 5 GiB)"
if ((free_kib < 8 * 1024 * 1024)); then
    log "warning: less than 8 GiB free; the build may fail with \"No space left on device\""
fi

section "cargo fmt --all -- --check"
cargo fmt --all -- --check

section "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

section "import circles (modules importing each other; test-support's test holds every crate at none)"
# The crates' root files; the tool lists each circle with the imports that make it.
circles=$(cargo run -q -p test-support --bin import_circles -- \
    grl/core/src/lib.rs grl/config/src/lib.rs grl/client/src/lib.rs \
    grl/server/src/lib.rs grl/server/src/main.rs policies/src/lib.rs \
    rlc/src/lib.rs rlc/src/main.rs)
printf '%s\n' "$circles" | sed '$d' >&2
log "$(printf '%s\n' "$circles" | tail -n 1)"

section "cargo machete (no declared dependency goes unused)"
if ! command -v cargo-machete >/dev/null; then
    log "installing cargo-machete from crates.io"
    cargo install --locked cargo-machete >&2
fi
cargo machete

section "grl-client's dependency tree stays small"
# A service links only grl-client: none of these may come back into its normal tree.
forbidden='^(git2|libgit2-sys|openssl-sys|openssl-src|aws-lc-sys|axum|clap|tracing-subscriber|sqlx|reqwest|serde_yaml|yaml-rust2) '
if bad=$(cargo tree -p grl-client -e normal --prefix none | grep -E "$forbidden" | sort -u) && [[ -n "$bad" ]]; then
    die "grl-client depends on crates it must not: $bad"
fi
log "grl-client: $(cargo tree -p grl-client -e normal --prefix none | sed 's/ (\*)//; s/ (proc-macro)//' | sort -u | wc -l) packages, none of the forbidden ones"

section "cargo build --workspace --bins (the end-to-end tests run grl and rlc as processes)"
cargo build --workspace --bins

section "cargo test --workspace"
cargo test --workspace -- --test-threads=2

section "all checks passed"
